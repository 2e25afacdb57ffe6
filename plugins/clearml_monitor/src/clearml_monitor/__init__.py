"""ClearML backend for ``core-monitor``: scalars reported with ClearML's own
``Logger.report_scalar`` at the caller's step (ClearML's iteration), images and text as debug
samples (``Logger.report_media``: PNG, UTF-8 text), histograms as ClearML's histogram plots
(``Logger.report_histogram``), each at that iteration too, the config as the task's
hyperparameters (section ``General``), in an offline session under ``<log_dir>/clearml`` or
on the server of ClearML's own configuration.

Select it as ``Monitor(["clearml"], project=..., log_dir=...)``. See ``ClearmlMonitor`` for
the options and ``clearml_monitor.storage`` for the session's files.

Modules, each importing only those listed after it: ``backend`` (``ClearmlMonitor``: the
hooks), ``reader`` (read-back from the session's files: scalars, media, config, crash,
group), ``storage`` (folders, title and series of a tag, the media's files and events, the group
tag), ``_compat`` (the ClearML calls and internals used, and their check).

Importing this package imports no ClearML: the SDK is imported when a monitor starts.
"""

from __future__ import annotations

from .backend import ClearmlMonitor
from .reader import find_session, read_config, read_crash, read_media, read_rows
from .storage import CRASH_PREFIX, CRASH_TAG, SECTION, cache_dir, title_of

__all__ = [
    "CRASH_PREFIX",
    "CRASH_TAG",
    "SECTION",
    "ClearmlMonitor",
    "cache_dir",
    "find_session",
    "read_config",
    "read_crash",
    "read_media",
    "read_rows",
    "title_of",
]
