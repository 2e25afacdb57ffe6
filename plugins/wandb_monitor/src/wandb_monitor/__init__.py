"""Weights & Biases backend for ``core-monitor``: every point at the caller's step, none dropped.

wandb keeps one history row per ``log`` call and, given ``step=``, drops a row whose step is lower
than an earlier one (with only a warning). This backend therefore never passes ``step=``: it logs
the caller's step as a metric of the row (``global_step``, name configurable) declared with
``define_metric(step_metric, hidden=True)`` and ``define_metric("*", step_metric=step_metric)``,
so charts use it as their x-axis and wandb's own ``_step`` is only a row counter. Every point is
kept, including lower and repeated steps.

Layout: wandb's own, ``<log_dir>/wandb/offline-run-<YYYYmmdd_HHMMSS>-<id>/run-<id>.wandb`` (or
``run-...`` folders online), so ``wandb sync <log_dir>/wandb/offline-run-...`` uploads it.
``log_dir=None`` leaves the folder to wandb (``WANDB_DIR``, else the current directory).

``read_rows`` reads an offline run back from its ``.wandb`` transaction log: wandb 0.31 writes no
history JSON offline and ships no Python reader, so ``read_records`` decodes wandb's LevelDB-log
framing (32 KiB blocks, CRC-32 per chunk) into wandb's own ``Record`` protobuf messages.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import wandb
from wandb.proto import wandb_internal_pb2
from wandb.sdk import wandb_setup

from core_monitor import ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step

__all__ = [
    "DEFAULT_STEP_METRIC",
    "ESCAPE",
    "WandbMonitor",
    "find_run_dirs",
    "read_records",
    "read_rows",
]

#: Name of the metric that holds the caller's step in every row (the charts' x-axis).
DEFAULT_STEP_METRIC = "global_step"
#: Prefix added to a tag that wandb reserves (``_*``), to the step metric's own name, and to a
#: tag that already starts with it: ``_x`` is stored as ``~_x``, ``global_step`` as
#: ``~global_step``, ``~a`` as ``~~a``. ``read_rows`` removes it again.
ESCAPE = "~"
#: Seconds ``monitor_close`` waits for the run's exit record to reach the ``.wandb`` file.
FINISH_TIMEOUT = 60.0

_ESCAPED_FIRST = "_" + ESCAPE  # first characters of the names that get the ESCAPE prefix

_MODES = ("online", "offline", "disabled")
_STEP_METRIC = re.compile(r"[A-Za-z][A-Za-z0-9_\-/]*")

# The .wandb transaction log (wandb-core's transactionlog/leveldb packages): a 7-byte header,
# then LevelDB log records in 32 KiB blocks: crc32 (IEEE, of type byte + data), uint16 length,
# uint8 type, data. A record may be split into FIRST, MIDDLE..., LAST chunks across blocks.
_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK = 32768
_CHUNK_HEADER = struct.Struct("<IHB")
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


# Reading ------------------------------------------------------------------------------------


def read_records(path: str | os.PathLike[str]) -> Iterator[wandb_internal_pb2.Record]:
    """Yield the ``wandb.proto.wandb_internal_pb2.Record`` messages of a ``.wandb`` file in order.

    Args:
        path: a ``run-<id>.wandb`` file, or a run folder holding exactly one.

    A file still being written ends at its last complete record (wandb-core writes whole
    32 KiB blocks until the run finishes).

    Raises:
        FileNotFoundError: no such file, or the folder holds no ``.wandb`` file.
        ValueError: not a wandb transaction log (header), an unknown format version, a folder
            with several ``.wandb`` files, or a corrupt chunk (checksum); the message says which.
    """
    file = _wandb_file(path)
    data = file.read_bytes()
    if len(data) < len(_HEADER) and _HEADER.startswith(data):
        return  # just created: nothing written yet
    if data[:6] != _HEADER[:6]:
        raise ValueError(f"{str(file)!r} is not a wandb transaction log (bad header)")
    if data[6] != _HEADER[6]:
        raise ValueError(f"{str(file)!r} has transaction log version {data[6]}; this reader "
                         "knows version 0 (wandb 0.31): upgrade wandb-monitor")
    for payload in _payloads(data, 0, file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        yield record


def _payloads(data: bytes, start: int, file: Path) -> Iterator[bytes]:
    """Yield whole records of ``data`` (a file's bytes from block-aligned offset ``start``).

    Chunks that continue a record begun before ``start`` are skipped; a truncated tail ends the
    iteration (the writer has not got there yet).
    """
    pos = len(_HEADER) if start == 0 else 0
    offset = start
    parts: list[bytes] | None = None
    size = len(data)
    while True:
        left = _BLOCK - (offset + pos) % _BLOCK
        if left < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos += left
            continue
        if pos + _CHUNK_HEADER.size > size:
            return
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        end = pos + _CHUNK_HEADER.size + length
        if end > size or (crc == 0 and length == 0 and kind == 0):
            return  # not written yet
        chunk = data[pos + _CHUNK_HEADER.size : end]
        if zlib.crc32(chunk, zlib.crc32(bytes((kind,)))) != crc:
            raise ValueError(
                f"{str(file)!r} is corrupt: checksum mismatch in the chunk at byte {offset + pos}"
            )
        pos = end
        if kind == _FULL:
            parts = None
            yield chunk
        elif kind == _FIRST:
            parts = [chunk]
        elif kind == _MIDDLE and parts is not None:
            parts.append(chunk)
        elif kind == _LAST and parts is not None:
            parts.append(chunk)
            yield b"".join(parts)
            parts = None


def _wandb_file(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("run-*.wandb"))
        if not files:
            raise FileNotFoundError(f"no run-*.wandb file in {str(path)!r}")
        if len(files) > 1:
            raise ValueError(f"{str(path)!r} holds several .wandb files; pass one: {files}")
        return files[0]
    if not path.is_file():
        raise FileNotFoundError(f"no wandb run file or folder at {str(path)!r}")
    return path


def _exit_record_written(file: Path) -> bool:
    """Whether the run's exit record (wandb's last record of a finished run) is in ``file``.

    Reads only the last two blocks: the exit record is small and comes last.
    """
    try:
        size = file.stat().st_size
        start = max(0, size - 2 * _BLOCK) // _BLOCK * _BLOCK
        with file.open("rb") as stream:
            stream.seek(start)
            data = stream.read()
        record = wandb_internal_pb2.Record()
        for payload in _payloads(data, start, file):
            record.ParseFromString(payload)
            if record.HasField("exit"):
                return True
    except (OSError, ValueError):  # not created yet, or a chunk caught mid-write
        return False
    return False


def find_run_dirs(
    log_dir: str | os.PathLike[str], *, project: str | None = None, name: str | None = None
) -> list[Path]:
    """Return the run folders under ``log_dir``, oldest first.

    Args:
        log_dir: the ``log_dir`` given to the ``Monitor`` (its ``wandb/`` folder is searched),
            or a ``wandb`` folder itself.
        project: keep only runs of this project (from each run's own run record).
        name: keep only runs with this display name (a run of rank ``r > 0`` is named
            ``<name>-rank<r>``).

    Returns:
        ``offline-run-*`` and ``run-*`` folders holding a ``.wandb`` file, ordered by the run's
        start time; ``[]`` when there is none.
    """
    root = Path(log_dir)
    if (root / "wandb").is_dir():
        root = root / "wandb"
    found = []
    for folder in root.glob("*run-*"):
        if folder.is_symlink() or not folder.is_dir() or not any(folder.glob("run-*.wandb")):
            continue
        if not folder.name.startswith(("offline-run-", "run-")):
            continue
        run = _run_record(folder)
        if run is None:
            continue
        if (project is not None and run.project != project) or (
            name is not None and run.display_name != name
        ):
            continue
        started = (run.start_time.seconds, run.start_time.nanos)
        found.append((started, folder.name, folder))
    return [folder for *_, folder in sorted(found)]


def _run_record(folder: Path) -> Any:
    try:
        for record in read_records(folder):
            if record.HasField("run"):
                return record.run
    except (OSError, ValueError):
        return None
    return None


def read_rows(
    path: str | os.PathLike[str], step_metric: str = DEFAULT_STEP_METRIC
) -> list[tuple[str, int, float]]:
    """Read the points a ``WandbMonitor`` logged, from a run's ``.wandb`` transaction log.

    Args:
        path: a run folder (see ``find_run_dirs``) or its ``run-<id>.wandb`` file.
        step_metric: the ``step_metric`` option the run was logged with.

    Returns:
        ``[(tag, step, value), ...]``: rows in storage order (the order of the ``log`` calls);
        within one row wandb stores keys in no fixed order. ``step`` is the caller's step (the
        step metric, an ``int``), ``value`` a ``float`` (NaN and +-inf included: wandb stores
        them as the JSON tokens ``NaN``, ``Infinity``, ``-Infinity``). Tags are as logged:
        the ``ESCAPE`` prefix is removed; wandb's own keys (``_step``, ``_runtime``,
        ``_timestamp``, ...) and rows without the step metric are left out.

    Raises:
        FileNotFoundError, ValueError: as ``read_records``.
    """
    rows: list[tuple[str, int, float]] = []
    for record in read_records(path):
        if not record.HasField("history"):
            continue
        step = None
        points = []
        for item in record.history.item:
            key = item.key or ".".join(item.nested_key)
            if key == step_metric:
                step = _as_step(item.value_json)
            elif key.startswith(ESCAPE):
                points.append((key[len(ESCAPE) :], item.value_json))
            elif not key.startswith("_"):
                points.append((key, item.value_json))
        if step is None:
            continue
        for tag, value_json in points:
            value = _as_float(value_json)
            if value is not None:
                rows.append((tag, step, value))
    return rows


def _as_step(value_json: str) -> int | None:
    value = json.loads(value_json)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_float(value_json: str) -> float | None:
    # parse_int=float keeps "-0" negative; NaN/Infinity/-Infinity are bare JSON tokens here,
    # and quoted strings in wandb's JSON exports: accept both.
    value = json.loads(value_json, parse_int=float)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return value if isinstance(value, float) else None


# The wandb service process --------------------------------------------------------------------

# A service (wandb-core) process this plugin started, and that no one else's run uses yet, is
# torn down when the plugin's last run closes; a service someone else started is left alone.
_service_lock = threading.Lock()
_owned_service_pid: int | None = None
_open_runs = 0


def _service_running() -> bool | None:
    """Whether this process has a wandb service connection; ``None`` if wandb changed inside."""
    singleton = getattr(wandb_setup, "_singleton", False)
    if singleton is False:
        return None
    if singleton is None or getattr(singleton, "_pid", None) != os.getpid():
        return False
    connection = getattr(singleton, "_connection", False)
    return None if connection is False else connection is not None


def _other_runs_active() -> bool:
    if wandb.run is not None:
        return True
    singleton = getattr(wandb_setup, "_singleton", None)
    if singleton is None or getattr(singleton, "_pid", None) != os.getpid():
        return False
    try:
        return singleton.most_recent_active_run is not None
    except Exception:  # wandb changed inside: assume someone else's run is active
        return True


def _detach(run: Any) -> None:
    """Hide ``run`` from wandb's list of active runs.

    That list is what a user's own ``wandb.init()`` (``reinit="default"``) returns instead of a
    new run, and what ``reinit="finish_previous"`` finishes: without this, the user would get
    this plugin's run, or finish it.
    """
    remove = getattr(wandb_setup.singleton(), "remove_active_run", None)
    if remove is not None:
        remove(run)


# The backend ----------------------------------------------------------------------------------


class WandbMonitor:
    """Log a run's scalars to one wandb run, each point at the caller's step.

    Constructed by the core as ``WandbMonitor(run, **options)``; users select it as
    ``Monitor(["wandb"], ..., wandb={"mode": "offline", "entity": "team"})``. One wandb run per
    ``Monitor``, started with ``wandb.init(reinit="create_new")``: it never becomes
    ``wandb.run``, is hidden from wandb's active-run list (a user's own ``wandb.init()`` starts
    their own run instead of returning this one) and is written through its own ``Run``
    methods, never the global ``wandb.log``.

    Storage: one history row per step row of a batch (``core_monitor.events.rows_by_step``:
    all tags of one ``log`` call at one step), logged without ``step=`` so wandb keeps every
    row; the row holds ``step_metric`` = the caller's step (an exact integer) and
    ``_timestamp`` = the ``log`` call's wall time (``Event.wall_time``, the convention of
    wandb's own TensorBoard import). Values are float64; NaN and +-inf are kept. A tag that
    starts with ``_`` (wandb's reserved prefix) or ``ESCAPE``, or equals ``step_metric``, is
    stored with the ``ESCAPE`` prefix (``_x`` -> ``~_x``); so are such config keys.
    ``run.config`` goes in as the run's config, ``run.project``/``run.name`` as project and
    display name (``<name>-rank<r>`` on a rank ``r > 0``).

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        mode: ``"online"``, ``"offline"`` or ``"disabled"``; ``None`` (default) follows wandb's
            own settings (``WANDB_MODE``, ``wandb offline``, else online).
        entity: wandb entity (user or team); ``None`` for wandb's default.
        group: run group (e.g. one per distributed job or sweep); ``None`` for none.
        job_type: run job type, e.g. ``"train"``; ``None`` for none.
        tags: run tags, a sequence of ``str``.
        notes: run description.
        step_metric: name of the metric holding the caller's step: a letter, then letters,
            digits, ``_``, ``-`` or ``/`` (no ``.``, which wandb reads as nesting).
        settings: extra ``wandb.Settings`` fields, e.g. ``{"console": "off",
            "x_disable_stats": True}``; ``None`` keeps wandb's defaults and environment.

    Raises:
        ConfigError: an option has a wrong type or value (``settings``: an unknown or invalid
            ``wandb.Settings`` field; values are not echoed).
        wandb.Error: ``wandb.init`` failed (e.g. online without credentials).
    """

    #: Backend name used when the class is passed to ``Monitor`` directly.
    name = "wandb"
    #: wandb has no public flush and writes the ``.wandb`` file in 32 KiB blocks: rows are
    #: complete on disk only once ``monitor_close`` returns.
    rows_readable_after = "close"
    #: History values are JSON numbers (float64).
    value_dtype = "float64"

    def __init__(
        self,
        run: RunInfo,
        *,
        mode: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        job_type: str | None = None,
        tags: Sequence[str] | None = None,
        notes: str | None = None,
        step_metric: str = DEFAULT_STEP_METRIC,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        global _owned_service_pid, _open_runs
        _check_options(mode, entity, group, job_type, tags, notes, step_metric)
        init: dict[str, Any] = {
            "project": run.project,
            "name": run.name if run.rank == 0 else f"{run.name}-rank{run.rank}",
            "config": {_escape(key, step_metric): value for key, value in run.config.items()},
            "reinit": "create_new",
            "settings": _settings(settings),
        }
        for key, value in (("mode", mode), ("entity", entity), ("group", group),
                           ("job_type", job_type), ("notes", notes)):
            if value is not None:
                init[key] = value
        if tags is not None:
            init["tags"] = tuple(tags)
        if run.log_dir is not None:  # given log_dir wins over WANDB_DIR
            log_dir = Path(run.log_dir).absolute()
            log_dir.mkdir(parents=True, exist_ok=True)
            init["dir"] = str(log_dir)

        self.step_metric = step_metric
        self._closed = False
        #: The run's ``.wandb`` transaction log, or ``None`` when mode is ``"disabled"``.
        self.run_file: Path | None = None
        #: The run's folder (``offline-run-...`` or ``run-...``), or ``None`` when disabled.
        self.run_dir: Path | None = None
        with _service_lock:
            starts_service = _service_running() is False
            self._run = wandb.init(**init)
            if starts_service and _service_running():
                _owned_service_pid = os.getpid()
            _open_runs += 1
        try:
            _detach(self._run)
            self._run.define_metric(step_metric, hidden=True)
            self._run.define_metric("*", step_metric=step_metric)
            self._log = self._run.log
            if not self._run.disabled:
                self.run_file = Path(self._run.settings.sync_file)
                self.run_dir = self.run_file.parent
        except BaseException:
            self.monitor_close()
            raise

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Log one wandb history row per step row of the batch (see the class docstring).

        Raises:
            wandb.Error: the run was finished from outside (e.g. ``wandb.teardown()``).
        """
        step_metric = self.step_metric
        log = self._log
        for step, wall_time, row in rows_by_step(events):
            data = {
                (ESCAPE + tag if tag[0] in _ESCAPED_FIRST or tag == step_metric else tag): value
                for tag, value in row.items()
            }
            data[step_metric] = step
            data["_timestamp"] = wall_time
            log(data)

    @hookimpl
    def monitor_flush(self) -> None:
        """Do nothing: wandb has no public flush; rows are on disk after ``monitor_close``."""

    @hookimpl
    def monitor_close(self) -> None:
        """Finish the run; return once its ``.wandb`` file holds the exit record.

        ``Run.finish()`` offline has been seen to return before wandb-core wrote the exit
        record (about 1 run in 100), so this polls the file's tail for it, up to
        ``FINISH_TIMEOUT`` seconds. When this plugin started wandb's service process and no
        other wandb run is active, the service is shut down (``wandb.teardown()``) so no
        ``wandb-core`` process outlives the monitor. A second call does nothing.

        Raises:
            TimeoutError: the exit record did not reach the file in time.
        """
        global _owned_service_pid, _open_runs
        if self._closed:
            return
        self._closed = True
        try:
            self._run.finish()
        except Exception:
            # Someone called wandb.teardown() first: the service closed the run's file on its
            # way down (every row is in it, but no exit record), and finish() cannot reach it.
            if _service_running() is not False:
                raise
            return
        finally:
            with _service_lock:
                _open_runs -= 1
                if (
                    _owned_service_pid == os.getpid()
                    and _open_runs == 0
                    and _service_running()
                    and not _other_runs_active()
                ):
                    _owned_service_pid = None
                    wandb.teardown()
        file = self.run_file
        if file is None:
            return
        deadline = time.monotonic() + FINISH_TIMEOUT
        delay = 0.001
        while not _exit_record_written(file):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"wandb: the run's exit record did not reach {str(file)!r} within "
                    f"{FINISH_TIMEOUT:g} s of finish(); the file may be incomplete"
                )
            time.sleep(delay)
            delay = min(2 * delay, 0.05)


def _escape(key: str, step_metric: str) -> str:
    return ESCAPE + key if (key and key[0] in _ESCAPED_FIRST) or key == step_metric else key


def _settings(settings: Mapping[str, Any] | None) -> Any:
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise ConfigError(
            f"wandb: option settings must be a mapping of wandb.Settings fields, not "
            f"{type(settings).__name__}, e.g. settings={{'console': 'off'}}"
        )
    try:
        return wandb.Settings(**settings)
    except Exception as error:
        # Field names and pydantic's messages only: a value may be a credential.
        problems = getattr(error, "errors", None)
        detail = (
            "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
                for e in problems()
            )
            if callable(problems)
            else type(error).__name__
        )
        raise ConfigError(
            f"wandb: option settings has invalid wandb.Settings fields ({detail}); see "
            "https://docs.wandb.ai/models/ref/python/settings"
        ) from None


def _check_options(
    mode: Any, entity: Any, group: Any, job_type: Any, tags: Any, notes: Any, step_metric: Any
) -> None:
    if mode is not None and mode not in _MODES:
        raise ConfigError(
            f"wandb: option mode={mode!r} must be one of {', '.join(map(repr, _MODES))}, or "
            "None to follow WANDB_MODE"
        )
    for option, value in (("entity", entity), ("group", group), ("job_type", job_type),
                          ("notes", notes)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"wandb: option {option}={value!r} must be a str or None")
    if tags is not None and (
        isinstance(tags, str)
        or not isinstance(tags, Sequence)
        or not all(isinstance(tag, str) and tag for tag in tags)
    ):
        raise ConfigError(
            f"wandb: option tags={tags!r} must be a list of non-empty str, e.g. "
            "tags=['baseline', 'lr-sweep']"
        )
    if not isinstance(step_metric, str) or not _STEP_METRIC.fullmatch(step_metric):
        raise ConfigError(
            f"wandb: option step_metric={step_metric!r} must start with a letter and hold only "
            "letters, digits, '_', '-' or '/' (wandb reserves '_' names and reads '.' as "
            "nesting), e.g. step_metric='global_step'"
        )
