"""Reading a run back from its ClearML offline session's own files (no SDK import); the reader
``monitors copy`` uses (entry-point group ``experiment_monitor_readers``).

The run's session is the newest folder ``<cache>/offline/*/`` whose ``task.json`` names the
run's project and ``RunInfo.ranked_name`` (``storage.cache_dir``). Scalars and media come from
``metrics.jsonl`` in the order reported (an image's or a text's file from the session's
``data`` folder, by the event's ``key``, as ClearML's own ``import_offline_session`` finds it),
the config from ``task.json``'s hyperparameters (the group from its tags), the crash mark
from ``log.jsonl``. numpy and Pillow (ClearML's own requirements) are imported by
``read_media`` only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, Text

from .storage import (
    CAPTION_CHUNK,
    CRASH_PREFIX,
    DATA_FOLDER,
    GROUP_TAG_PREFIX,
    HISTOGRAM_EDGES,
    IMAGE_EXTENSION,
    PLOT_EVENT,
    SAMPLE_EVENT,
    SCALAR_EVENT,
    SECTION,
    TEXT_EXTENSION,
    cache_dir,
)

__all__ = ["find_session", "read_config", "read_crash", "read_group", "read_media", "read_rows"]

#: ``task.json``'s value type -> how to read the value back (other types stay text).
_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "bool": lambda text: text == "True", "str": str}
#: How often, and how many seconds apart, a ``task.json`` that is not (yet) whole JSON is read
#: again: ClearML rewrites it in place (truncate, then write) whenever an open task changes,
#: from threads of its own too (its repository detection, after ``Task.init``), so a reader
#: can find it empty for a moment.
TASK_READS, TASK_READ_PAUSE = 100, 0.01


def _task(path: Path) -> dict[str, Any] | None:
    """``task.json`` at ``path``, read again while ClearML is rewriting it; ``None`` when it
    stays unreadable (``TASK_READS`` reads)."""
    for attempt in range(TASK_READS):
        try:
            task = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            if attempt + 1 < TASK_READS:
                time.sleep(TASK_READ_PAUSE)
            continue
        return task if isinstance(task, dict) else None
    return None


def find_session(run: RunInfo, *, cache: str | Path | None = None) -> Path:
    """The offline session folder ``run`` was written to.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``).
        cache: ClearML's cache folder (default: ``storage.cache_dir(run)``).

    Raises:
        LookupError: no session of that project and name in the cache folder.
    """
    folder = Path(cache) if cache is not None else cache_dir(run)
    if folder is None:
        raise LookupError("no log_dir and no CLEARML_CACHE_DIR: give one to find the session")
    found, unreadable = [], []
    for path in (folder / "offline").glob("*/task.json"):
        task = _task(path)
        if task is None:
            unreadable.append(path)
        elif task.get("project_name") == run.project and task.get("name") == run.ranked_name:
            found.append(path.parent)
    if not found:
        raise LookupError(f"no ClearML offline session of project {run.project!r} named "
                          f"{run.ranked_name!r} under {folder}/offline" + (
                              f" ({len(unreadable)} task.json not JSON, e.g. {unreadable[0]})"
                              if unreadable else ""))
    return max(found, key=lambda path: path.stat().st_mtime_ns)


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """Every event of a ``.jsonl`` file of the session (each line a JSON list of events)."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as file:
        for line in file:
            if not line.endswith("\n"):  # a batch ClearML is appending right now
                return
            if line.strip():
                yield from json.loads(line)


def read_rows(run: RunInfo, *, cache: str | Path | None = None) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)`` in the order reported: the tag is the series
    (the whole tag), the step ClearML's iteration. Args, Raises: as ``find_session``."""
    session = find_session(run, cache=cache)
    return [(event["variant"], int(event["iter"]), float(event["value"]))
            for event in _lines(session / "metrics.jsonl")
            if event.get("type") == SCALAR_EVENT]


def read_config(run: RunInfo, *, cache: str | Path | None = None) -> dict[str, Any]:
    """The hyperparameters of section ``General``, each read back as the type ClearML kept
    with it (``int``, ``float``, ``bool``, ``str``; any other as its text).
    Args, Raises: as ``find_session``."""
    session = find_session(run, cache=cache)
    task = _task(session / "task.json") or {}
    section = (task.get("hyperparams") or {}).get(SECTION, {})
    return {name: _TYPES.get(entry.get("type"), str)(entry.get("value", ""))
            for name, entry in section.items()}


def read_crash(run: RunInfo, *, cache: str | Path | None = None) -> str | None:
    """Why the run ended by a crash (the reason of its ``core-monitor crash:`` error line);
    ``None`` when it did not. Args, Raises: as ``find_session``."""
    session = find_session(run, cache=cache)
    for event in _lines(session / "log.jsonl"):
        message = str(event.get("msg", ""))
        if event.get("level") == "error" and message.startswith(CRASH_PREFIX):
            return message[len(CRASH_PREFIX):]
    return None


def read_group(run: RunInfo, *, cache: str | Path | None = None) -> str | None:
    """The job's run group named by the task's tag ``job.group: <group>`` (``task.json``'s
    tags); ``None`` when it has none. Args, Raises: as ``find_session``."""
    session = find_session(run, cache=cache)
    task = _task(session / "task.json") or {}
    prefix = GROUP_TAG_PREFIX.rstrip()  # a tag of the user's may have no space after it
    for tag in task.get("tags") or []:
        if str(tag).startswith(prefix):
            return str(tag)[len(prefix):].strip()
    return None


def read_media(run: RunInfo, *, cache: str | Path | None = None,
               ) -> list[tuple[str, int, Image | Histogram | Text]]:
    """The run's images, histograms and text as ``(tag, step, value)`` in the order reported:
    the tag is the series, the step ClearML's iteration.

    ``Image``: the debug sample's PNG decoded, ``uint8`` ``(H, W, C)`` with ``C`` in ``(1, 3,
    4)``, its caption from the PNG's ``Description`` chunk (``None`` without one). ``Text``: the
    ``.txt`` debug sample's UTF-8 text, exact. ``Histogram``: ``edges`` and ``counts`` of a
    histogram plot this plugin reported (each bar's ``customdata`` edges, its ``y`` count).
    Debug samples of other extensions and other plots (reported by other code) are left out.

    Args: as ``find_session``.

    Raises:
        LookupError: as ``find_session``.
        FileNotFoundError: a debug sample's file is missing from the session's ``data`` folder
            (named; e.g. a session copied without it).
    """
    import numpy as np
    from PIL import Image as PILImage

    session = find_session(run, cache=cache)
    media: list[tuple[str, int, Image | Histogram | Text]] = []
    for event in _lines(session / "metrics.jsonl"):
        kind, tag = event.get("type"), str(event.get("variant"))
        step = int(event.get("iter") or 0)
        if kind == PLOT_EVENT:
            histogram = _histogram(event.get("plot_str") or "{}", np)
            if histogram is not None:
                media.append((tag, step, histogram))
            continue
        key = str(event.get("key") or "")
        if kind != SAMPLE_EVENT or not key.endswith((IMAGE_EXTENSION, TEXT_EXTENSION)):
            continue
        path = session.joinpath(DATA_FOLDER, *key.split("/"))
        if not path.is_file():
            raise FileNotFoundError(f"the debug sample of {tag!r} at step {step} is missing: "
                                    f"{path} (metrics.jsonl names it)")
        if key.endswith(TEXT_EXTENSION):
            media.append((tag, step, Text(path.read_bytes().decode("utf-8"))))
            continue
        with PILImage.open(path) as png:
            caption = getattr(png, "text", {}).get(CAPTION_CHUNK)
            pixels = np.asarray(png)
        media.append((tag, step, Image(pixels.reshape(*pixels.shape[:2], -1),
                                       caption=caption)))
    return media


def _histogram(plot: str, np: Any) -> Histogram | None:
    """The histogram of a plot's JSON when it is one this plugin reported (one bar trace, each
    bar's edges in ``customdata``), else ``None``."""
    traces = json.loads(plot).get("data") or []
    if len(traces) != 1 or traces[0].get("type") != "bar":
        return None
    bins, counts = traces[0].get(HISTOGRAM_EDGES), traces[0].get("y")
    if (not isinstance(bins, list) or not isinstance(counts, list) or not bins
            or len(bins) != len(counts)
            or any(not isinstance(pair, list) or len(pair) != 2 for pair in bins)):
        return None
    edges = [bins[0][0], *(right for _, right in bins)]
    return Histogram(edges=np.asarray(edges, np.float64), counts=np.asarray(counts))
