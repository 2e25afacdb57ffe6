"""Where a run's event files go, and how config values become HParams values."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from core_monitor import ConfigError

#: Where runs go when the caller gives no ``log_dir`` (PyTorch's ``SummaryWriter`` default).
DEFAULT_LOG_DIR = "runs"
#: Tag of the text ``TensorBoardMonitor.monitor_crash`` writes (TensorBoard has no run status):
#: in the Text dashboard, at the run's last step, the reason the training process ended.
CRASH_TAG = "core_monitor/crash"

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


#: A folder given as a URL (fsspec's ``protocol://path``: ``s3://``, ``gs://``, ``memory://``).
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def event_folder(run_folder: str | os.PathLike[str], *, rank: int = 0) -> Path | str:
    """The folder a run given as an exact folder (the ``run_dir`` option) writes to, as an
    absolute path: ``run_folder`` itself (relative to the current directory), and
    ``run_folder/rank<rank>`` for a rank above 0, as ``run_dir`` adds it. A URL
    (``s3://bucket/runs/r``, ``memory://runs/r``) is returned as a ``str``: TensorBoard's own
    file layer (``tensorboard.compat.tf.io.gfile``) writes and reads it through fsspec, as
    ``TensorBoardLogger(save_dir=<URL>)`` writes there.

    Raises:
        ConfigError: ``run_folder`` is empty or holds a NUL.
    """
    text = os.fspath(run_folder)
    if not isinstance(text, str) or not text or "\0" in text:
        raise ConfigError(
            f"tensorboard: option run_dir={run_folder!r} must be a non-empty folder path, e.g. "
            "run_dir='runs/baseline'"
        )
    if URL.match(text):
        return f"{text.rstrip('/')}/rank{rank}" if rank > 0 else text.rstrip("/")
    folder = Path(text).expanduser()
    return (folder / f"rank{rank}" if rank > 0 else folder).absolute()


def event_files(folder: Path | str) -> list[str]:
    """The event files directly in ``folder`` (local or a URL); ``[]`` when it is no folder."""
    if isinstance(folder, Path):
        return [str(p) for p in folder.glob("*tfevents*") if p.is_file()] if folder.is_dir() \
            else []
    from tensorboard.compat import tf  # TensorBoard's file layer: fsspec for a URL

    gfile = tf.io.gfile
    return list(gfile.glob(f"{folder}/*tfevents*")) if gfile.isdir(folder) else []


def is_folder(folder: Path | str) -> bool:
    """Whether ``folder`` (local or a URL) is an existing folder."""
    if isinstance(folder, Path):
        return folder.is_dir()
    from tensorboard.compat import tf

    return bool(tf.io.gfile.isdir(folder))


def remove(file: str) -> None:
    """Delete one event file (local, or a URL through fsspec, which TensorBoard's file layer
    uses for URLs and which has no delete of its own)."""
    if URL.match(file):
        import fsspec

        filesystem, path = fsspec.core.url_to_fs(file)
        filesystem.rm_file(path)
    else:
        Path(file).unlink(missing_ok=True)


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
