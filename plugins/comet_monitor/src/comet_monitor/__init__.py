"""comet-monitor: the ``comet`` backend for core-monitor (Comet's SDK, ``comet_ml``, offline by
default), and its reader.

Modules, each importing only those listed after it: ``backend`` (the hooks), ``reader``
(read-back from the offline archives: scalars, config, media, tags, the crash mark),
``media`` (writing images and text), ``storage`` (where the archives are, the names the
plugin stores), ``_compat`` (what the plugin relies on in comet_ml beyond its documented API,
and its check). Importing this package does not import comet_ml; the backend's constructor
does, with its import switches set first (``_compat.IMPORT_ENV``).
"""

from __future__ import annotations

from ._compat import IMPORT_ENV, TESTED
from .backend import CometMonitor
from .media import MEDIA_KINDS
from .reader import (
    read_archives,
    read_config,
    read_crash,
    read_media,
    read_others,
    read_rows,
    read_tags,
)
from .storage import CRASH_OTHER, CRASH_TAG, run_dir

__all__ = [
    "CRASH_OTHER",
    "CRASH_TAG",
    "IMPORT_ENV",
    "MEDIA_KINDS",
    "TESTED",
    "CometMonitor",
    "read_archives",
    "read_config",
    "read_crash",
    "read_media",
    "read_others",
    "read_rows",
    "read_tags",
    "run_dir",
]
