"""Read a run back from its ``.wandb`` transaction log (tests, notebooks, the demo).

wandb writes no history JSON offline and ships no Python reader: the records come from
``_compat.read_records``, which decodes wandb's on-disk format into wandb's own protobufs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, Text

from ._compat import read_records
from .storage import DEFAULT_STEP_METRIC, is_own_key, unescaped

__all__ = ["earlier_run", "find_run_dirs", "history", "next_wandb_step", "read_config",
           "read_crash", "read_exit_code", "read_media", "read_rows", "run_folders"]


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


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """Read the points a ``WandbMonitor`` logged, from the run's ``.wandb`` transaction log.

    Args:
        run: the run as the core describes it (``Monitor.run``). Its folders are
            ``run_folders(run)``: those of the latest (by start time) run of
            ``find_run_dirs(run.log_dir, project=run.project, name=...)`` with the name
            ``run.name``, or ``<name>-rank<rank>`` for a rank above 0, and every older folder
            of the same run id (a resumed run), read oldest first; ``log_dir=None`` means
            wandb's own folder (``WANDB_DIR``, else the current one).

    Returns:
        ``[(tag, step, value), ...]``: rows in storage order (the order of the ``log`` calls);
        within one row wandb stores keys in no fixed order. ``step`` is the caller's step (the
        step metric the run declared for ``"*"``, an ``int``), ``value`` a ``float`` (NaN and
        +-inf included: wandb stores them as the JSON tokens ``NaN``, ``Infinity``,
        ``-Infinity``). Tags are as logged: the ``ESCAPE`` prefix is removed; wandb's own keys
        (``_step``, ``_runtime``, ``_timestamp``, ...) and rows without the step metric are
        left out. ``[]`` when there is no such run (e.g. ``mode="disabled"``).

    Raises:
        ValueError: the run's file is not a readable transaction log (see ``read_records``).
    """
    rows: list[tuple[str, int, float]] = []
    for step, points, _ in history(run):
        for tag, value_json in points:
            value = _as_float(value_json) if isinstance(value_json, str) else None
            if value is not None:
                rows.append((tag, step, value))
    return rows


def history(run: RunInfo) -> Iterator[tuple[int, list[tuple[str, str | dict[str, Any]]], Path]]:
    """Yield ``(step, points, run folder)`` per history row of the run's ``.wandb`` log that
    holds the step metric. ``points``: ``[(tag, value), ...]``, tags as logged (``ESCAPE``
    removed, wandb's own ``_`` keys left out); ``value`` is wandb's JSON text, or for a media
    value (which wandb stores as nested keys ``tag.path``, ``tag._type``, ...) a dict of its
    decoded fields. Nothing when there is no such run."""
    for folder in run_folders(run):
        yield from _history(folder)


def _history(folder: Path) -> Iterator[tuple[int, list[tuple[str, str | dict[str, Any]]], Path]]:
    records = list(read_records(folder))
    step_metric = next((r.metric.step_metric for r in records if r.HasField("metric")
                        and r.metric.glob_name == "*" and r.metric.step_metric),
                       DEFAULT_STEP_METRIC)
    for record in records:
        if not record.HasField("history"):
            continue
        step = None
        points: dict[str, Any] = {}
        for item in record.history.item:
            path = [item.key] if item.key else list(item.nested_key)
            if path == [step_metric]:
                step = _as_step(item.value_json)
            elif len(path) == 1:
                points[path[0]] = item.value_json
            else:  # one field of a media value
                fields = points.setdefault(path[0], {})
                fields[".".join(path[1:])] = json.loads(item.value_json)
        if step is not None:
            yield step, [(unescaped(key), value) for key, value in points.items()
                         if not is_own_key(key)], folder


def read_config(run: RunInfo) -> dict[str, Any]:
    """Return the run's config as wandb stored it, ``{}`` when there is none.

    The run record's config, updated by every later config record (``Monitor.log_config``
    calls ``run.config.update``), in file order. Keys are as the caller gave them (the
    ``ESCAPE`` prefix removed); wandb's own keys (``_wandb``) are left out; values are decoded
    from wandb's JSON. Argument and errors as for ``read_rows``.
    """
    config: dict[str, Any] = {}
    records = [record for folder in run_folders(run) for record in read_records(folder)]
    for record in records:
        kind = record.WhichOneof("record_type")
        stored = record.run.config if kind == "run" else record.config if kind == "config" else None
        if stored is None:
            continue
        for item in stored.update:
            config[item.key or ".".join(item.nested_key)] = json.loads(item.value_json)
        for item in stored.remove:
            config.pop(item.key or ".".join(item.nested_key), None)
    return {unescaped(key): value for key, value in config.items() if not is_own_key(key)}


def read_exit_code(run: RunInfo) -> int | None:
    """Return the exit code the run finished with, from the exit record of its ``.wandb`` log.

    Args:
        run: as for ``read_rows`` (``Monitor.run``); the latest folder of the run is read.

    Returns:
        ``0`` for a run closed normally, ``1`` (``service.CRASH_EXIT_CODE``) for a run whose
        training process died (``WandbMonitor.monitor_crash``; wandb shows it as failed), any
        other code a script passed to ``wandb.Run.finish``; ``None`` when the run has no exit
        record (still running, or its writer was killed too) or there is no such run.

    Raises:
        ValueError: as ``read_rows``.
    """
    folders = run_folders(run)
    if not folders:
        return None
    code = None
    for record in read_records(folders[-1]):
        if record.HasField("exit"):
            code = int(record.exit.exit_code)
    return code


def read_media(run: RunInfo) -> list[tuple[str, int, Image | Histogram | Text]]:
    """Read a run's images, histograms and text back from its ``.wandb`` log and media files.

    Args:
        run: as for ``read_rows`` (``Monitor.run``); readable once the monitor is closed.

    Returns:
        ``[(tag, step, value), ...]`` in storage order (within a row in wandb's key order):
        ``value`` an ``Image`` (``array``: the PNG under the run's ``files/`` decoded,
        ``uint8`` ``(H, W, C)``; ``caption``), a ``Histogram`` (``edges``, ``counts``) or a
        ``Text`` (every ``str`` value of a row). ``[]`` when there is no such run.

    Raises:
        ValueError: as ``read_rows``.
        FileNotFoundError: an image row names a file that is not there.
    """
    import numpy as np
    from PIL import Image as PILImage

    found: list[tuple[str, int, Image | Histogram | Text]] = []
    for step, points, folder in history(run):
        for tag, stored in points:
            value = json.loads(stored) if isinstance(stored, str) else stored
            kind = value.get("_type") if isinstance(value, dict) else None
            if isinstance(value, str) and value not in ("NaN", "Infinity", "-Infinity"):
                found.append((tag, step, Text(value)))
            elif kind == "image-file":
                with PILImage.open(folder / "files" / value["path"]) as picture:
                    pixels = np.asarray(picture)
                found.append((tag, step, Image(pixels.reshape(*pixels.shape[:2], -1),
                                               caption=value.get("caption"))))
            elif kind == "histogram":
                found.append((tag, step, Histogram(edges=np.asarray(value["bins"], np.float64),
                                                   counts=np.asarray(value["values"],
                                                                     np.float64))))
    return found


def run_folders(run: RunInfo) -> list[Path]:
    """The folders of the run ``run`` names, oldest first: every folder (one per process that
    wrote it: a resumed run has several) holding the run id of the latest run of that project
    and name under ``run.log_dir`` (``None``: ``WANDB_DIR``, else the current folder); ``[]``
    when there is none."""
    root = run.log_dir if run.log_dir is not None else os.environ.get("WANDB_DIR") or "."
    found = [(folder, _run_record(folder)) for folder in
             find_run_dirs(root, project=run.project, name=run.ranked_name)]
    if not found:
        return []
    latest = found[-1][1].run_id
    return [folder for folder, record in found if record.run_id == latest]


def earlier_run(run: RunInfo) -> tuple[str | None, int | None]:
    """``(run id, largest step)`` of the run ``resume`` continues: the latest run of that
    project and name (``run_folders``), across all its folders; ``(None, None)`` when there is
    none. Raises as ``read_rows``."""
    folders = run_folders(run)
    if not folders:
        return None, None
    steps = [step for folder in folders for step, _, _ in _history(folder)]
    return _run_record(folders[-1]).run_id, max(steps, default=None)


def next_wandb_step(run: RunInfo) -> int:
    """wandb's own row counter (``_step``) after every folder of the run ``resume`` continues:
    the largest ``_step`` their history rows hold, + 1; 0 when there is none. A resumed offline
    run starts its new folder at 0 by itself (wandb learns the counter from its server, which an
    offline run has not reached); the backend passes this number on instead. Raises as
    ``read_rows``."""
    largest = -1
    for folder in run_folders(run):
        for record in read_records(folder):
            if record.HasField("history"):
                for item in record.history.item:
                    if item.key == "_step" or list(item.nested_key) == ["_step"]:
                        step = _as_step(item.value_json)
                        if step is not None and step > largest:
                            largest = step
    return largest + 1


def _run_record(folder: Path) -> Any:
    try:
        for record in read_records(folder):
            if record.HasField("run"):
                return record.run
    except (OSError, ValueError):
        return None
    return None


def _as_step(value_json: str) -> int | None:
    value = json.loads(value_json)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_NON_FINITE = ("NaN", "Infinity", "-Infinity")


def _as_float(value_json: str) -> float | None:
    # parse_int=float keeps "-0" negative; NaN/Infinity/-Infinity are bare JSON tokens here,
    # and quoted strings in wandb's JSON exports: accept both.
    value = json.loads(value_json, parse_int=float)
    if isinstance(value, str):  # only those tokens: any other str is a Text value
        return float(value) if value in _NON_FINITE else None
    return value if isinstance(value, float) else None


def read_crash(run: RunInfo) -> str | None:
    """``""`` when the run finished with a non-zero exit code (a crash: wandb shows it as
    failed; its exit record keeps no reason, so the text is empty), ``None`` when it exited
    with 0 or has no exit record. Argument and errors as for ``read_exit_code``."""
    code = read_exit_code(run)
    return None if code in (None, 0) else ""
