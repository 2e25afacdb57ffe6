"""A run's end, for trackers that keep no run status: one line in a file beside the run.

A backend whose tracker has no "finished"/"failed" state of its own (CSV files, DVCLive's
folder) keeps ``running``, ``finished`` or ``crashed: <reason>`` in ``<run folder>/status``::

    status = StatusFile(folder)
    status.running()            # in __init__
    status.crashed(reason)      # in monitor_crash
    status.finished()           # in monitor_close, unless crashed

and its reader's ``read_crash`` returns ``StatusFile(folder).crash()``. The file is replaced
atomically (written to a temporary file in the same folder, fsynced, ``os.replace``d, the
folder fsynced), so a reader sees the old line or the new one, never half, and the line
survives a power cut. As Slurm's and Kubernetes' job states read, ``crashed`` is final: a
later ``finished()`` does not hide it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CRASHED", "FINISHED", "RUNNING", "StatusFile"]

#: The states a status line starts with.
RUNNING, FINISHED, CRASHED = "running", "finished", "crashed"


class StatusFile:
    """The status line of the run in ``folder``.

    Args:
        folder: the run's folder (created by the backend); the file is ``<folder>/<name>``.
        name: the file's name, ``"status"`` unless the tracker's own files use that name.
    """

    def __init__(self, folder: str | os.PathLike[str], name: str = "status") -> None:
        self.path = Path(folder) / name

    def read(self) -> str | None:
        """The status line (``running``, ``finished``, ``crashed: <reason>``), or ``None``
        when the run has none (not started by this backend, or not there)."""
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None

    def crash(self) -> str | None:
        """The reason the run crashed (what ``crashed`` was given), or ``None`` when it did not
        (running, finished, no status): a reader's ``read_crash``."""
        line = self.read()
        if line is None or not (line == CRASHED or line.startswith(CRASHED + ":")):
            return None
        return line[len(CRASHED) + 1:].strip()

    def running(self) -> None:
        """Mark the run started (or resumed)."""
        self.write(RUNNING)

    def crashed(self, reason: str) -> None:
        """Mark the run ended by a crash, ``reason`` on the same line (newlines become spaces)."""
        self.write(f"{CRASHED}: {' '.join(reason.split())}")

    def finished(self) -> None:
        """Mark the run closed, unless it is already marked crashed (that stays)."""
        if self.crash() is None:
            self.write(FINISHED)

    def write(self, line: str) -> None:
        """Replace the file with ``line`` atomically and durably (module docstring)."""
        partial = self.path.with_name(self.path.name + ".partial")
        with partial.open("w", encoding="utf-8") as file:
            file.write(line + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, self.path)
        if os.name == "posix":  # Windows has no directory fsync
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
