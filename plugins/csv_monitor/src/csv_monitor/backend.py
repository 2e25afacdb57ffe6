"""``CsvMonitor``: scalars as CSV files, in Lightning's ``CSVLogger`` or DeepSpeed's layout."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step
from core_monitor.resume import NoRunToResume
from core_monitor.sdk import no_sdk

from . import deepspeed_files, lightning_table, remote
from .reader import layout_of, read_config_in, read_rows_in
from .storage import STATUS, run_dir, status_of

if TYPE_CHECKING:
    from core_monitor.hookspecs import Backend


class CsvMonitor:
    """Write a run's scalars and config as CSV files under ``<log_dir>/<project>/<run name>``.

    Constructed by the core as ``CsvMonitor(run, **options)``; users select it as
    ``Monitor(["csv"], ..., csv={"layout": "deepspeed"})``. No SDK: the standard library's
    ``csv`` (and PyYAML for Lightning's ``hparams.yaml``).

    Args:
        run: the run (project, name, config, ``log_dir``, rank).
        layout: ``"lightning"`` (default): Lightning's ``CSVLogger`` files, ``metrics.csv``
            (a ``step`` column and one column per tag, a row per step; read with one
            ``pandas.read_csv``) and ``hparams.yaml``. ``"deepspeed"``: DeepSpeed's
            ``csv_monitor`` files, one ``<tag>.csv`` per tag and ``deepspeed_config.csv``.
        fsync: ``True`` (default): ``monitor_flush`` also ``os.fsync``s every file, so what
            was flushed survives a machine crash; ``False`` leaves it to the OS.
        run_dir: the run's folder, exactly (``str`` or path, relative to the current
            directory), instead of ``<log_dir>/<project>/<run name>``: where DeepSpeed's own
            ``csv_monitor`` writes, ``<output_path>/<job_name>``
            (``core_monitor.integrations.deepspeed`` sets it). A rank above 0
            (``rank_zero_only=False``) adds ``rank<rank>``. Read it back with
            ``read_rows_in(folder)``. An fsspec URL (``s3://bucket/runs/exp/v0``,
            ``memory://runs/v0``; Lightning layout only) is written through fsspec, as
            Lightning's ``CSVLogger(save_dir=<URL>)`` writes (``remote``; ``fsspec`` and the
            filesystem's package must be installed: ``csv-monitor[remote]``).
        integer_tags: tags whose integral values the Lightning layout writes as integers
            (``0``, not ``0.0``), a sequence of ``str``; default ``("epoch",)``: the column
            Lightning's ``Trainer`` logs as a Python ``int``, which ``CSVLogger`` writes as
            ``0`` (values reach backends as floats, so which were ints is known only by
            name). A value that is not integral is written as a float all the same.

    Every run also has ``status``: ``running`` from the start, ``finished`` after
    ``monitor_close``, ``crashed: <reason>`` when the training process died without closing
    (``monitor_crash``). Media are not stored: the core skips them for this backend and says
    so once per kind. Resume (``run.resume``): ``"allow"``/``"must"`` append to the run's
    files (this backend's, or a ``metrics.csv`` Lightning's ``CSVLogger`` left there);
    ``last_step`` is the largest step they held. Without resume, a run already in the folder
    is replaced as ``CSVLogger`` replaces it: a ``UserWarning`` naming the folder, then its
    files deleted (Lightning layout: ``metrics.csv``; DeepSpeed layout: every tag file named
    in ``tags.json``, ``tags.json`` and ``deepspeed_config.csv``), so rows of two runs never
    mix. (DeepSpeed's own ``csv_monitor`` appends to each tag's file, a second header among
    the rows; the one rule for every backend whose run is a folder is the one above.)

    Raises:
        NoRunToResume: ``resume="must"`` and the run's folder has no run (nothing created).
        ConfigError: the run's folder holds the other layout's files.
        OSError: the run's folder cannot be created or written.
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="csv",
        rows_readable_after="flush",  # monitor_flush writes (and fsyncs) every buffered row
        value_dtype="float64",  # a float is written as its repr, which round-trips
        stores_config=True,  # hparams.yaml / deepspeed_config.csv, merged on monitor_config
        supports_resume=True,  # run.resume appends to the run's files
        tested_sdk=None,  # no SDK
    )

    check_sdk = staticmethod(no_sdk)  # no SDK: nothing can be missing

    def __init__(self, run: RunInfo, *, layout: Literal["lightning", "deepspeed"] = "lightning",
                 fsync: bool = True, run_dir: str | os.PathLike[str] | None = None,
                 integer_tags: Sequence[str] = ("epoch",)) -> None:
        self._layout = layout
        self._config = dict(run.config)
        self._integers = frozenset(integer_tags)
        self._crashed = False
        self._remote: remote.RemoteFolder | None = None
        if run_dir is not None and remote.is_url(os.fspath(run_dir)):
            self._start_remote(run, os.fspath(run_dir))
            return
        self._folder = _folder(run, run_dir)
        found, last = (False, None) if run.resume == "never" else _earlier(self._folder, layout)
        if not found and run.resume == "must":
            raise NoRunToResume(f"csv: no {layout} run in {str(self._folder)!r}")
        #: Whether an earlier run was continued; the largest step it held (``None``: none).
        self.resumed, self.last_step = found, last
        if not self.resumed:
            _check_layout(self._folder, layout)
            _replace_earlier(self._folder, layout)
        self._folder.mkdir(parents=True, exist_ok=True)
        self._table: lightning_table.LightningTable | remote.RemoteTable | None = None
        self._files: deepspeed_files.PerTagFiles | None = None
        if layout == "lightning":
            self._table = lightning_table.LightningTable(self._folder, fsync=fsync)
        else:
            self._files = deepspeed_files.PerTagFiles(self._folder, fsync=fsync)
        if self.resumed:
            self._config = {**read_config_in(self._folder), **self._config}
        self._write_config()
        status_of(self._folder).running()

    def _start_remote(self, run: RunInfo, url: str) -> None:
        """The run in the remote folder ``url`` (plus ``rank<rank>`` above rank 0), Lightning
        layout: as in a local folder, through ``remote.RemoteFolder``."""
        if self._layout != "lightning":
            raise ConfigError(f"csv: run_dir={url!r} is a URL, which only the lightning layout "
                              "writes (DeepSpeed's csv_monitor writes local files); give a "
                              "local run_dir or layout='lightning'")
        folder = self._remote = remote.RemoteFolder(
            url if run.rank == 0 else f"{url.rstrip('/')}/rank{run.rank}")
        found = folder.exists(lightning_table.METRICS) or folder.read_status() is not None
        if not found and run.resume == "must":
            raise NoRunToResume(f"csv: no lightning run in {url!r}")
        self.resumed = found and run.resume != "never"
        self.last_step = None
        if not self.resumed and not folder.is_empty():
            warnings.warn(f"csv: experiment logs directory {folder.url!r} exists and is not "
                          f"empty; its {lightning_table.METRICS} is deleted and this run "
                          "written in its place, as Lightning's CSVLogger does. Pass "
                          "resume='allow' to append to it instead, or give another run name "
                          "to keep it", UserWarning, stacklevel=3)
            folder.remove(lightning_table.METRICS)
        folder.make()
        self._table = remote.RemoteTable(folder)
        self._files = None
        if self.resumed:
            rows = read_rows_in(folder.url)
            self.last_step = max((step for _, step, _ in rows), default=None)
            self._config = {**read_config_in(folder.url), **self._config}
        self._write_config()
        folder.write_status("running")

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Lightning layout: one row per step (buffered until ``monitor_flush``); DeepSpeed
        layout: one ``step,value`` row per event in its tag's file."""
        if self._table is not None:
            for step, _, row in rows_by_step(events):
                self._table.add(step, {tag: _integral(value) if tag in self._integers
                                       else value for tag, value in row.items()})
        elif self._files is not None:
            self._files.write(events)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge late config; a key given again takes the new value."""
        self._config.update(config)
        self._write_config()

    @hookimpl
    def monitor_flush(self) -> None:
        """Write every buffered row and (with ``fsync``) make it durable."""
        if self._table is not None:
            self._table.save()
        elif self._files is not None:
            self._files.save()

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Mark the run ``crashed: <reason>`` in its ``status`` file (rows are flushed)."""
        self._write_status(f"crashed: {' '.join(reason.split())}")
        self._crashed = True  # close keeps the mark

    @hookimpl
    def monitor_close(self) -> None:
        """Write what is buffered, close the files, mark the run ``finished`` (unless it
        crashed)."""
        if self._table is not None:
            self._table.save()
        elif self._files is not None:
            self._files.close()
        if not self._crashed:
            self._write_status("finished")

    def _write_status(self, text: str) -> None:
        if self._remote is not None:
            self._remote.write_status(text)
        else:
            status_of(self._folder).write(text)

    def _write_config(self) -> None:
        if self._remote is not None:
            remote.write_hparams(self._remote, self._config)
        elif self._layout == "lightning":
            lightning_table.write_hparams(self._folder, self._config)
        else:
            deepspeed_files.write_config(self._folder, self._config)


def _folder(run: RunInfo, exact: str | os.PathLike[str] | None) -> Path:
    """The run's folder: ``run_dir(run)``, or ``exact`` (plus ``rank<rank>`` above rank 0).

    Raises:
        ConfigError: ``exact`` is empty.
    """
    if exact is None:
        return run_dir(run)
    if not os.fspath(exact):
        raise ConfigError("csv: option run_dir='' names no folder; give a path, e.g. "
                          "run_dir='runs/job', or leave it out")
    folder = Path(exact).expanduser()
    return folder if run.rank == 0 else folder / f"rank{run.rank}"


def _integral(value: float) -> float | int:
    """``value`` as an ``int`` when it is a finite whole number (``0.0`` -> ``0``), else as is."""
    return int(value) if math.isfinite(value) and value.is_integer() else value


def _replace_earlier(folder: Path, layout: str) -> None:
    """What ``CSVLogger`` does with a run folder that is not empty (Lightning's
    ``_ExperimentWriter._check_log_dir_exists``): warn, and delete the earlier run's rows
    (``metrics.csv``; in the DeepSpeed layout its tag files, ``tags.json`` and
    ``deepspeed_config.csv``). Only a run's own files count (those, ``hparams.yaml``,
    ``status``): other backends (DVCLive) keep theirs in the same folder."""
    if layout == "lightning":
        rows = [lightning_table.METRICS]
        own = [*rows, lightning_table.HPARAMS, STATUS]
    else:
        rows = [*deepspeed_files.read_tags(folder), deepspeed_files.TAGS, deepspeed_files.CONFIG]
        own = [*rows, STATUS]
    if not any((folder / name).exists() for name in own):
        return
    deleted = lightning_table.METRICS if layout == "lightning" else "tag files"
    warnings.warn(f"csv: experiment logs directory {str(folder)!r} exists and is not empty; "
                  f"its {deleted} is deleted and this run written in its place, as Lightning's "
                  "CSVLogger does. Pass resume='allow' to append to it instead, or give another "
                  "run name to keep it", UserWarning, stacklevel=2)
    for name in rows:
        (folder / name).unlink(missing_ok=True)


def _check_layout(folder: Path, layout: str) -> None:
    """Raise ``ConfigError`` when ``folder`` holds a run in the other layout."""
    found = layout_of(folder)
    if found is not None and found != layout:
        raise ConfigError(f"csv: {str(folder)!r} holds a run in the {found} layout; pass "
                          f"layout={found!r} or another run name")


def _earlier(folder: Path, layout: str) -> tuple[bool, int | None]:
    """Whether ``folder`` holds a run in ``layout`` (its ``status`` file, or a ``metrics.csv``
    that Lightning's ``CSVLogger`` wrote), and its largest step (``None``: no rows).

    Raises:
        ConfigError: the folder holds the other layout's table.
    """
    _check_layout(folder, layout)
    if status_of(folder).read() is None and not (
            layout == "lightning" and (folder / lightning_table.METRICS).is_file()):
        return False, None

    return True, max((step for _, step, _ in read_rows_in(folder)), default=None)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[Backend] = CsvMonitor
