"""TensorBoard backend for ``core-monitor``: scalars and hyperparameters as standard event files.

Layout: ``<log_dir>/<project>/<run name>/events.out.tfevents.<time>.<host>.<pid>.<n><suffix>``
(``log_dir=None`` means ``./runs``, TensorBoard's and PyTorch's default), so
``tensorboard --logdir <log_dir>`` shows the run as ``<project>/<run name>``. Writing goes through
TensorBoard's own ``EventFileWriter`` and ``Summary.Value(simple_value=...)`` protobufs; no
TensorFlow, torch or tensorboardX is needed.

This module imports ``tensorboard.summary`` (~0.2 s); the core never imports it, and
``monitors list`` reads entry-point metadata only.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from core_monitor import ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step

__all__ = ["TensorBoardMonitor", "hparam_value", "read_rows", "run_dir"]

#: Where runs go when the caller gives no ``log_dir`` (PyTorch's ``SummaryWriter`` default).
DEFAULT_LOG_DIR = "runs"

# HParams numbers are float64; larger integers are written as their decimal text, exactly.
_EXACT_INT = 2**53


def run_dir(
    project: str, name: str, log_dir: str | os.PathLike[str] | None, *, rank: int = 0
) -> Path:
    """Return the folder a run's event files go to, as an absolute path.

    ``<log_dir>/<project>/<name>``, with ``log_dir=None`` meaning ``./runs`` (relative to the
    current directory at the time of the call). A ``rank`` above 0 (only possible with
    ``Monitor(..., rank_zero_only=False)``) adds ``rank<rank>``, so each process writes its own
    TensorBoard run ``<project>/<name>/rank<rank>`` instead of interleaving with rank 0.

    ``project`` and ``name`` may contain ``/`` (nested folders, shown by TensorBoard as one run
    path), but no empty, ``.`` or ``..`` component, no NUL and no absolute path: a run never
    writes outside ``log_dir``.

    Raises:
        ConfigError: ``project`` or ``name`` is not a safe relative path.
    """
    root = Path(DEFAULT_LOG_DIR if log_dir is None else log_dir)
    folder = root.joinpath(*_components("project", project), *_components("run name", name))
    if rank > 0:
        folder = folder / f"rank{rank}"
    return folder.absolute()


def _components(label: str, value: str) -> list[str]:
    parts = value.replace(os.sep, "/").split("/")
    if (
        not value
        or "\0" in value
        or Path(value).is_absolute()
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ConfigError(
            f"tensorboard: {label} {value!r} cannot be a folder name under log_dir; use a "
            "non-empty name without empty, '.' or '..' path parts (e.g. 'run-1' or 'sweep/lr-3e-4')"
        )
    return parts


def hparam_value(value: Any) -> bool | float | str:
    """Convert one JSON-safe config value to what TensorBoard's HParams plugin accepts.

    ``bool`` stays ``bool``; ``int`` with ``|value| <= 2**53`` and finite ``float`` become a
    number (float64); larger ints and NaN/+-inf become their text (``"9007199254740993"``,
    ``"nan"``, ``"inf"``, ``"-inf"``: the plugin serves hparams as JSON, which has no
    non-finite numbers); ``str`` stays ``str``; anything else (``None``, lists, mappings) becomes
    its JSON text (``"null"``, ``"[64, 64]"``), non-ASCII kept.
    """
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return float(value) if -_EXACT_INT <= value <= _EXACT_INT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


class TensorBoardMonitor:
    """Write a run's scalars (and its config as HParams) to TensorBoard event files.

    Constructed by the core as ``TensorBoardMonitor(run, **options)``; users select it as
    ``Monitor(["tensorboard"], ..., tensorboard={"flush_secs": 30})``.

    Storage: one ``Event`` protobuf per step row of a ``log`` call (all scalars of that row as
    ``Summary.Value(tag=..., simple_value=...)``), ``Event.step`` = the caller's step exactly
    (int64: lower and repeated steps are kept in file order), ``Event.wall_time`` = the time of
    the ``log`` call (``core_monitor.Event.wall_time``, seconds since the epoch). Values are
    float32 (TensorBoard's ``simple_value``): about 7 significant digits; NaN and +-inf are
    kept; finite values beyond +-3.4e38 become +-inf.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        flush_secs: seconds (> 0) between the writer thread's periodic flushes; TensorBoard's
            and PyTorch's default is 120. ``Monitor.flush()`` and ``close()`` flush regardless.
        max_queue: events (>= 1) the writer's queue holds before ``log`` waits for its thread;
            PyTorch's ``SummaryWriter`` default is 10.
        filename_suffix: text appended to the event file name (no path separators).
        hparams: write ``run.config`` as HParams data (a ``session_start_info`` summary) so it
            shows in TensorBoard's HParams tab; ``False`` writes scalars only.

    Raises:
        ConfigError: an option has a wrong type or value, or the project / run name cannot
            be a folder name (see ``run_dir``).
        OSError: the run folder cannot be created.
    """

    #: Backend name used when the class is passed to ``Monitor`` directly.
    name = "tensorboard"
    #: ``EventAccumulator`` sees every event after ``monitor_flush``.
    rows_readable_after = "flush"
    #: ``Summary.Value.simple_value`` is a float32.
    value_dtype = "float32"

    def __init__(
        self,
        run: RunInfo,
        *,
        flush_secs: float = 120.0,
        max_queue: int = 10,
        filename_suffix: str = "",
        hparams: bool = True,
    ) -> None:
        _check_options(flush_secs, max_queue, filename_suffix, hparams)
        self.run = run
        #: The folder this run's event file is in (absolute).
        self.log_dir = run_dir(run.project, run.name, run.log_dir, rank=run.rank)
        self._closed = False
        self._Event = event_pb2.Event
        self._writer = EventFileWriter(
            str(self.log_dir),
            max_queue_size=max_queue,
            flush_secs=flush_secs,
            filename_suffix=filename_suffix,
        )
        self._add_event = self._writer.add_event
        if hparams and run.config and run.rank == 0:
            self._write_hparams(run.config)

    def _write_hparams(self, config: Mapping[str, Any]) -> None:
        # summary_v2 builds the plugin's session_start_info without TensorFlow. Only the
        # session is written: the HParams plugin derives the experiment (hparam columns,
        # metric columns from scalar tags) from all sessions under --logdir, whereas one
        # experiment summary per run would hide every other run's hparams.
        from tensorboard.plugins.hparams import summary_v2

        now = time.time()
        values = {key: hparam_value(value) for key, value in config.items()}
        # One HParams row per run (as PyTorch's add_hparams), labelled with the run's path
        # under --logdir; summary_v2's default, a hash of the values, would merge equal configs.
        trial_id = f"{self.run.project}/{self.run.name}"
        summary = summary_v2.hparams_pb(values, trial_id=trial_id, start_time_secs=now)
        self._add_event(self._Event(wall_time=now, step=0, summary=summary))

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Write one TensorBoard ``Event`` per step row of the batch (see the class docstring).

        Raises:
            OSError: the writer is closed, or its thread failed to write (e.g. disk full).
        """
        new_event = self._Event
        add_event = self._add_event
        for step, wall_time, row in rows_by_step(events):
            event = new_event(wall_time=wall_time, step=step)
            add_value = event.summary.value.add
            for tag, value in row.items():
                add_value(tag=tag, simple_value=value)
            add_event(event)

    @hookimpl
    def monitor_flush(self) -> None:
        """Block until every event written so far is in the event file (a no-op after close)."""
        if not self._closed:
            self._writer.flush()

    @hookimpl
    def monitor_close(self) -> None:
        """Flush, stop the writer thread and close the event file. A second call does nothing."""
        if not self._closed:
            self._closed = True
            self._writer.close()


def _check_options(flush_secs: Any, max_queue: Any, filename_suffix: Any, hparams: Any) -> None:
    if (
        isinstance(flush_secs, bool)
        or not isinstance(flush_secs, (int, float))
        or not (math.isfinite(flush_secs) and flush_secs > 0)
    ):
        raise ConfigError(
            f"tensorboard: option flush_secs={flush_secs!r} must be a number of seconds > 0, "
            "e.g. flush_secs=120"
        )
    if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
        raise ConfigError(
            f"tensorboard: option max_queue={max_queue!r} must be an integer >= 1, "
            "e.g. max_queue=10"
        )
    if not isinstance(filename_suffix, str) or any(
        sep in filename_suffix for sep in ("/", "\\", "\0")
    ):
        raise ConfigError(
            f"tensorboard: option filename_suffix={filename_suffix!r} must be a str without "
            "path separators, e.g. filename_suffix='.v2'"
        )
    if not isinstance(hparams, bool):
        raise ConfigError(
            f"tensorboard: option hparams={hparams!r} must be True or False"
        )


def read_rows(run_dir: str | os.PathLike[str]) -> list[tuple[str, int, float]]:
    """Read a run folder's scalars back with TensorBoard's own ``EventAccumulator``.

    Every point is returned (``size_guidance={"scalars": 0}``; the default keeps 10,000 per
    tag). Order: tags in order of first appearance, each tag's points in file order (event
    files in name order, as TensorBoard reads them). Only files directly in ``run_dir`` are
    read, not sub-runs such as ``rank1/``.

    Args:
        run_dir: a run folder, e.g. ``tensorboard_monitor.run_dir(project, name, log_dir)``.

    Returns:
        ``[(tag, step, value), ...]`` with ``step`` an ``int`` and ``value`` the stored float32
        as a Python ``float``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a folder.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = Path(run_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"no TensorBoard run folder at {str(folder)!r}")
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return [
        (tag, int(point.step), float(point.value))
        for tag in accumulator.Tags()["scalars"]
        for point in accumulator.Scalars(tag)
    ]
