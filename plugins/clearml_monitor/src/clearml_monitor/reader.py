"""Reading a run back from its ClearML offline session's own files (no SDK import); the reader
``monitors copy`` uses (entry-point group ``experiment_monitor_readers``).

The run's session is the newest folder ``<cache>/offline/*/`` whose ``task.json`` names the
run's project and ``RunInfo.ranked_name`` (``storage.cache_dir``). Scalars come from
``metrics.jsonl`` in the order reported, the config from ``task.json``'s hyperparameters, the
crash mark from ``log.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core_monitor import RunInfo

from .storage import CRASH_PREFIX, SECTION, cache_dir

__all__ = ["find_session", "read_config", "read_crash", "read_rows"]

#: ``task.json``'s value type -> how to read the value back (other types stay text).
_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "bool": lambda text: text == "True", "str": str}


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
    found = []
    for path in (folder / "offline").glob("*/task.json"):
        task = json.loads(path.read_text(encoding="utf-8"))
        if task.get("project_name") == run.project and task.get("name") == run.ranked_name:
            found.append(path.parent)
    if not found:
        raise LookupError(f"no ClearML offline session of project {run.project!r} named "
                          f"{run.ranked_name!r} under {folder}/offline")
    return max(found, key=lambda path: path.stat().st_mtime_ns)


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """Every event of a ``.jsonl`` file of the session (each line a JSON list of events)."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as file:
        for line in file:
            if line.strip():
                yield from json.loads(line)


def read_rows(run: RunInfo, *, cache: str | Path | None = None) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)`` in the order reported: the tag is the series
    (the whole tag), the step ClearML's iteration. Args, Raises: as ``find_session``."""
    session = find_session(run, cache=cache)
    return [(event["variant"], int(event["iter"]), float(event["value"]))
            for event in _lines(session / "metrics.jsonl")
            if event.get("type") == "training_stats_scalar"]


def read_config(run: RunInfo, *, cache: str | Path | None = None) -> dict[str, Any]:
    """The hyperparameters of section ``General``, each read back as the type ClearML kept
    with it (``int``, ``float``, ``bool``, ``str``; any other as its text).
    Args, Raises: as ``find_session``."""
    session = find_session(run, cache=cache)
    task = json.loads((session / "task.json").read_text(encoding="utf-8"))
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
