"""Trackio's folder: one per process, pointed at the run's ``log_dir`` while the run is open.

Trackio reads ``TRACKIO_DIR`` once, when imported, and several of its modules copy the value.
There is one folder per process, so the plugin points all those copies at the run's folder while
it is open (``_compat.point_trackio_at``), refuses a second folder while anything writes to the
first, and points them back when done.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

from core_monitor import ConfigError

from . import _compat

#: Folder under ``RunInfo.log_dir`` that becomes Trackio's folder (its ``TRACKIO_DIR``).
SUBDIR = "trackio"

_lock = threading.Lock()
#: Trackio's own folder while the plugin points Trackio elsewhere, else None.
_home: Path | None = None
#: Resolved folder -> number of open TrackioMonitor runs writing there.
_in_use: Counter[Path] = Counter()


def trackio_dir(log_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the folder Trackio writes to for a given ``log_dir``, as an absolute path.

    ``<log_dir>/trackio`` when ``log_dir`` is given; otherwise Trackio's own folder:
    ``TRACKIO_DIR`` as Trackio read it when first imported, else
    ``$HF_HOME/trackio`` (``~/.cache/huggingface/trackio``). The project's database is
    ``trackio_dir(log_dir) / "<project>.db"`` (Trackio keeps only ``[A-Za-z0-9_-]`` of the
    project name for the file name). With ``log_dir=None`` this imports Trackio.
    """
    if log_dir is not None:
        return Path(log_dir).expanduser().resolve() / SUBDIR
    with _lock:
        return (_home if _home is not None else _compat.trackio_home()).resolve()


def acquire(wanted: Path | None) -> Path:
    """Point Trackio at ``wanted`` (``None``: Trackio's own folder); return the resolved folder.

    Raises:
        ConfigError: an open ``TrackioMonitor`` or the script's own unfinished Trackio run
            writes to another folder.
    """
    global _home
    with _lock:
        current = _compat.trackio_home()
        home = _home if _home is not None else current
        target = wanted if wanted is not None else home.resolve()
        busy = {folder: "an open Monitor with the 'trackio' backend" for folder in _in_use}
        user_run = _compat.user_run()
        if user_run is not None:
            busy.setdefault(
                current.resolve(), f"the Trackio run {user_run.name!r} started by trackio.init()"
            )
        for folder, user in busy.items():
            if folder != target:
                raise ConfigError(
                    f"trackio: cannot write to {target}: {user} is writing to {folder}, and "
                    "Trackio keeps one folder per process (it reads TRACKIO_DIR once, at "
                    "import). Close or finish that run first, or give this Monitor the same "
                    f"log_dir (log_dir=None means Trackio's own folder, {home})."
                )
        if current.resolve() != target:
            back_home = target == home.resolve()
            _compat.point_trackio_at(home if back_home else target)
            _home = None if back_home else home
        _in_use[target] += 1
        return target


def release(folder: Path) -> None:
    """Undo one ``acquire``; the last one points Trackio back at its own folder, unless the
    script started a Trackio run of its own meanwhile (it keeps writing where it started)."""
    global _home
    with _lock:
        _in_use[folder] -= 1
        if _in_use[folder] <= 0:
            del _in_use[folder]
        if _in_use or _home is None or _compat.user_run() is not None:
            return
        if _compat.trackio_home().resolve() == folder:
            _compat.point_trackio_at(_home)
        _home = None


def check_writable(folder: Path, log_dir: str | os.PathLike[str] | None) -> None:
    """Create ``folder`` if needed and check that a file can be created in it.

    Raises:
        OSError: it cannot (``log_dir`` is a regular file, a read-only folder, ...); the
            message names ``folder`` and the ``log_dir`` given.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        given = "Trackio's own folder" if log_dir is None else f"log_dir={os.fspath(log_dir)!r}"
        raise OSError(
            error.errno,
            f"trackio: cannot write to {folder} ({given}): {error.strerror or error}; give a "
            "log_dir that is a writable folder",
        ) from error


def is_home(folder: Path) -> bool:
    """Whether ``folder`` is Trackio's own folder (not one the plugin pointed it at)."""
    return folder == (_home or _compat.trackio_home()).resolve()
