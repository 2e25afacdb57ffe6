"""Where a run's files are and how a tag is stored as a SwanLab key: shared by the backend
and the reader."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

from core_monitor import RunInfo

#: SwanLab's own folder name under the working folder (``swanlab.init(log_dir=...)``'s default).
FOLDER = "swanlog"
#: The first character of an escaped tag (never the first of a tag stored as is).
ESCAPE = "%"
#: SwanLab's largest step + 1 (``swanlab.sdk.internal.core_python.metrics._MAX_STEP``): a
#: point at a larger step is refused.
STEP_LIMIT = 1 << 48
#: What SwanLab strips from a key's ends, and what it refuses inside one
#: (``swanlab.sdk.internal.run.fmt.validate_key``, ``constraints.MetricKey``).
_EDGES = " \t\n\r./"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LONGEST = 255


def swanlab_dir(run: RunInfo) -> Path | None:
    """The ``log_dir`` given to ``swanlab.init``: ``<log_dir>/swanlog``; ``None`` without
    ``run.log_dir`` (SwanLab's own: ``SWANLAB_LOG_DIR``, else ``./swanlog``)."""
    return Path(run.log_dir).expanduser() / FOLDER if run.log_dir is not None else None


def default_dir() -> Path:
    """SwanLab's folder when none is given: ``SWANLAB_LOG_DIR``, else ``./swanlog``."""
    return Path(os.environ.get("SWANLAB_LOG_DIR") or FOLDER)


def key_of(tag: str) -> str:
    """The SwanLab key ``tag`` is logged under: the tag itself, unless SwanLab would change
    or refuse it (a space, ``.`` or ``/`` at either end, a control character, more than 255
    characters) or it starts with ``%``. Those are stored as ``%`` + the tag
    percent-encoded, with ``.`` as ``%2E`` (``"/x"`` -> ``%%2Fx``); ``tag_of`` reverses it."""
    if (tag.startswith(ESCAPE) or tag != tag.strip(_EDGES) or _CONTROL.search(tag)
            or len(tag) > _LONGEST):
        return ESCAPE + quote(tag, safe="").replace(".", "%2E")
    return tag


def tag_of(key: str) -> str:
    """The tag stored under SwanLab ``key`` (the inverse of ``key_of``)."""
    return unquote(key[1:]) if key.startswith(ESCAPE) else key
