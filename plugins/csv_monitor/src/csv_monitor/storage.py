"""Where a run's files are, and writing them durably: shared by both layouts and the reader."""

from __future__ import annotations

import os
from pathlib import Path

from core_monitor import RunInfo
from core_monitor.status_file import StatusFile

#: Where runs go when the user gives no ``log_dir`` (as Lightning's ``CSVLogger`` root).
DEFAULT_DIR = Path("csv-runs")
#: The run's state: ``running``, ``finished`` or ``crashed: <reason>`` (one line).
STATUS = "status"


def run_dir(run: RunInfo) -> Path:
    """``<log_dir>/<project>/<run name>``; ``<run name>-rank<rank>`` above rank 0.

    For the Lightning layout this is ``CSVLogger(save_dir=log_dir, name=project,
    version=<run name>).log_dir``; for the DeepSpeed layout it is ``<output_path>/<job_name>``
    with ``output_path = <log_dir>/<project>`` and ``job_name`` the run name.
    """
    return Path(run.log_dir or DEFAULT_DIR).expanduser() / run.project / run.ranked_name


def status_of(folder: Path) -> StatusFile:
    """The run's ``status`` file (``core_monitor.status_file``: ``running``, ``finished`` or
    ``crashed: <reason>``)."""
    return StatusFile(folder, STATUS)


def replace_durably(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder: fsynced, then
    ``os.replace``d over ``path``, then the folder fsynced (the rename survives a power cut)."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8", newline="") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """``fsync`` a folder, so the files created or renamed in it survive a crash (POSIX)."""
    if os.name != "posix":  # pragma: no cover - Windows has no directory fsync
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
