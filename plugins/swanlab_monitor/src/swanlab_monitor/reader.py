"""Reading a run back from SwanLab's own files (``monitors copy`` and the contract kit read
through here; declared under ``experiment_monitor_readers``).

A run is a folder ``run-<time>-<id>/`` under SwanLab's ``log_dir`` holding its record file
``run-<id>.swanlab`` (every start, scalar, media, config and finish record, in order: what
``swanlab sync`` uploads), read with SwanLab's own reader (``_compat.read_records``), and
``files/config.yaml``, the config as SwanLab writes it (``key: {value: ..., desc, sort}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Image, Text

from ._compat import read_records
from .media import from_record
from .storage import default_dir, swanlab_dir, tag_of

__all__ = ["find_run_dir", "read_config", "read_crash", "read_finish", "read_group", "read_media",
           "read_rows"]


def find_run_dir(run: RunInfo) -> Path:
    """The folder of the latest (by start time) SwanLab run of ``run.project`` named
    ``run.ranked_name`` under ``<run.log_dir>/swanlog`` (without ``log_dir``:
    ``SWANLAB_LOG_DIR``, else ``./swanlog``).

    Raises:
        LookupError: no such run there.
    """
    root = swanlab_dir(run) or default_dir()
    found = []
    for file in root.glob("run-*/run-*.swanlab"):
        start = next((r.start for r in read_records(file) if r.HasField("start")), None)
        if start is not None and start.project == run.project and start.name == run.ranked_name:
            found.append(((start.started_at.seconds, start.started_at.nanos), file.parent))
    if not found:
        raise LookupError(f"swanlab: no run {run.ranked_name!r} of project {run.project!r} "
                          f"under {str(root)!r}")
    return max(found)[1]


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)``, in the order SwanLab recorded them.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``); for ``run.rank > 0``
            that rank's own run (``<name>-rank<rank>``) is read.

    Raises:
        LookupError: no such run (``find_run_dir``).
    """
    rows = []
    for record in read_records(_record_file(run)):
        if record.HasField("scalar"):
            scalar = record.scalar
            rows.append((tag_of(scalar.key), int(scalar.step), float(scalar.value.number)))
    return rows


def read_media(run: RunInfo) -> list[tuple[str, int, Image | Text]]:
    """The run's images and texts as ``(tag, step, value)``, in the order SwanLab recorded
    them: an ``Image`` (``uint8`` pixels ``(H, W, C)`` from its PNG, its caption) or a
    ``Text``. Argument and errors as for ``read_rows``."""
    file = _record_file(run)
    found: list[tuple[str, int, Image | Text]] = []
    for record in read_records(file):
        if record.HasField("media"):
            value = from_record(record.media, file.parent)
            if value is not None:
                found.append((tag_of(record.media.key), int(record.media.step), value))
    return found


def read_config(run: RunInfo) -> dict[str, Any]:
    """The run's config (``files/config.yaml``: given at start, merged with
    ``Monitor.log_config``); ``{}`` when none. Argument and errors as for ``read_rows``."""
    path = find_run_dir(run) / "files" / "config.yaml"
    if not path.exists():
        return {}
    import yaml  # SwanLab's own YAML library; here: importing the plugin imports no SDK

    stored = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {key: entry["value"] for key, entry in stored.items()}


def read_finish(run: RunInfo) -> tuple[str, str] | None:
    """How the run ended, from its finish record: (SwanLab's state name, e.g.
    ``"RUN_STATE_CRASHED"``, the error text); ``None`` while it has none (still running, or
    killed). Argument and errors as for ``read_rows``."""
    finish = None
    for record in read_records(_record_file(run)):
        if record.HasField("finish"):
            finish = record.finish
    if finish is None:
        return None
    return type(finish).DESCRIPTOR.fields_by_name["state"].enum_type.values_by_number[
        finish.state].name, finish.error


def read_group(run: RunInfo) -> str | None:
    """The run's SwanLab group (``swanlab.init(group=...)``), from its start record; ``None``
    when it has none. Argument and errors as for ``read_rows``."""
    for record in read_records(_record_file(run)):
        if record.HasField("start"):
            return record.start.group or None
    return None


def _record_file(run: RunInfo) -> Path:
    folder = find_run_dir(run)
    (file,) = folder.glob("run-*.swanlab")
    return file


def read_crash(run: RunInfo) -> str | None:
    """Why the run ended by a crash: the error text of a finish record whose state is
    ``RUN_STATE_CRASHED``; ``None`` otherwise. Argument and errors as for ``read_rows``."""
    finish = read_finish(run)
    return finish[1] if finish is not None and finish[0] == "RUN_STATE_CRASHED" else None
