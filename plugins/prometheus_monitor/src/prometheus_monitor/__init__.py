"""prometheus-monitor: the ``prometheus`` backend for core-monitor, and its reader.

``Monitor(["prometheus"], project=..., log_dir=...)`` writes each scalar as a CSV row at the
caller's step; ``read_rows(run)`` and ``read_config(run)`` read a run back from that storage
(what the contract kit checks).

Storage of one run, under ``<log_dir>/<project>/<run name>/`` (``<run name>-rank<rank>/`` for a
rank above 0): ``scalars.csv`` (columns ``tag,step,value,wall_time``, one row per scalar, in the
order logged) and ``config.json`` (the run's hyperparameters).

Importing this module imports no tracker SDK: core-monitor imports it on every rank (to check
the options) and ``monitors list`` never imports it. To wrap a tracker SDK instead of the CSV
file, import the SDK inside ``__init__`` (never at module level), name its tested versions in
``capabilities`` (``tested_sdk="mysdk>=1.2,<1.4"``) and return what it lacks from
``check_sdk``: the core runs that check before it constructs the backend, and
``monitors list --check`` runs the same one.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl

if TYPE_CHECKING:
    from core_monitor.hookspecs import Backend

__all__ = ["PrometheusMonitor", "read_config", "read_rows"]

#: Where runs go when the user gives no ``log_dir``.
DEFAULT_DIR = Path("prometheus-runs")
SCALARS = "scalars.csv"
CONFIG = "config.json"
HEADER = ("tag", "step", "value", "wall_time")


def run_dir(run: RunInfo) -> Path:
    """The folder of ``run``: ``<log_dir>/<project>/<name>``; ``<name>-rank<rank>`` on a rank
    above 0 (``run.ranked_name``), so every process of a distributed job writes a run of its
    own."""
    return (run.log_dir or DEFAULT_DIR) / run.project / run.ranked_name


class PrometheusMonitor:
    """Appends every scalar to ``scalars.csv``; keeps the config in ``config.json``.

    Constructed by core-monitor as ``PrometheusMonitor(run, **options)`` with the user's options for
    ``"prometheus"``, e.g. ``Monitor(["prometheus"], project="p", prometheus={"fsync": True})``.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        fsync: also ``os.fsync`` the file on every flush (survives a machine crash; slower).
        buffering: ``open``'s buffer size for ``scalars.csv``, in bytes (``-1``: Python's
            default; ``1``: line buffered, a row reaches the OS as it is written).

    Options arrive checked: the core refuses a value whose type is not its annotation's
    (``fsync="yes"``) and runs ``check_options`` below, both before constructing the class
    and without importing an SDK (``core_monitor.options``).

    Raises:
        OSError: the run's folder cannot be created or written.
    """

    #: What this backend stores and needs, declared once; read by core-monitor (media routing,
    #: resume, ``monitors copy``, the SDK checks) and by its contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="prometheus",  # the backend name when the class is passed to ``Monitor`` directly
        rows_readable_after="flush",  # ``read_rows`` sees every row after ``monitor_flush``
        value_dtype="float64",  # values are stored exactly (``repr`` of a float round-trips)
        stores_config=True,  # ``run.config`` and ``monitor_config``, read by ``read_config``
        media_kinds=frozenset(),  # no images, histograms or text: the core skips them
        supports_resume=False,  # ``resume="allow"`` starts a new run (with one warning)
        tested_sdk=None,  # the SDK versions tested, e.g. "mysdk>=1.2,<1.4"; none here
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """What the annotations of ``__init__`` cannot say; run by the core before the class
        is constructed. ``options`` are the user's, only those given, types already checked.

        Raises:
            ConfigError: a value is wrong; the message names the option, the value and the fix.
        """
        buffering = options.get("buffering", -1)
        if buffering == 0 or buffering < -1:
            raise ConfigError(f"prometheus: option buffering={buffering!r} must be -1 (the "
                              "default) or a size in bytes >= 1; e.g. buffering=1 (by line)")

    def __init__(self, run: RunInfo, *, fsync: bool = False, buffering: int = -1) -> None:
        self._fsync = fsync
        self._dir = run_dir(run)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._config = dict(run.config)
        self._write_config()
        path = self._dir / SCALARS
        new = not path.exists() or path.stat().st_size == 0
        self._file = path.open("a", buffering, newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)
        if new:
            self._csv.writerow(HEADER)

    @classmethod
    def check_sdk(cls) -> list[str]:
        """Run by the core before it first constructs the backend in a process, and by
        ``monitors list --check``: import the SDK (an ``ImportError`` when it is missing) and
        return what it lacks of what this backend uses (``[]``: nothing); the core turns
        problems into a ``BackendLoadError`` naming ``capabilities.tested_sdk`` (outside that
        range it warns once). Never call it yourself. This backend needs no SDK."""
        return []

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """One row per event, at ``event.step`` exactly as given (the core decided it)."""
        self._csv.writerows((e.tag, e.step, repr(e.value), repr(e.wall_time)) for e in events)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge hyperparameters given late (``Monitor.log_config``); a key given again wins."""
        self._config.update(config)
        self._write_config()

    @hookimpl
    def monitor_flush(self) -> None:
        """Make every row written so far readable by ``read_rows``."""
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    @hookimpl
    def monitor_close(self) -> None:
        """Flush and close the file. A second call does nothing."""
        if not self._file.closed:
            self.monitor_flush()
            self._file.close()

    def _write_config(self) -> None:
        """Replace ``config.json`` whole, so a reader never sees half of it."""
        path = self._dir / CONFIG
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self._config, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(partial, path)


# Reading a run back from the backend's own storage ---------------------------------------------

def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)``, in the order stored; ``[]`` when none.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``); for ``run.rank > 0``
            that rank's own run is read.
    """
    path = run_dir(run) / SCALARS
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as file:
        return [(row["tag"], int(row["step"]), float(row["value"]))
                for row in csv.DictReader(file)]


def read_config(run: RunInfo) -> dict[str, Any]:
    """The run's stored config (given at start, merged with ``Monitor.log_config``); ``{}``
    when none. Argument as for ``read_rows``."""
    path = run_dir(run) / CONFIG
    if not path.exists():
        return {}
    config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return config


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[Backend] = PrometheusMonitor
