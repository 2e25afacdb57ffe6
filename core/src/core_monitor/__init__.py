"""core-monitor: one logging API for training code, fanned out to experiment-tracker plugins.

Users build a ``Monitor``; backend authors implement the hooks in ``core_monitor.hookspecs``
with the ``hookimpl`` marker and declare their class in the ``experiment_monitors`` entry-point
group.

The names below are imported on first use (PEP 562), so that the ``monitors`` command, which
only reads metadata, starts without importing pluggy and the logging machinery, and a writer
process without ``importlib.metadata`` (``__version__`` is read on first use too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import first_use

if TYPE_CHECKING:
    from .capabilities import Capabilities
    from .errors import (
        BackendError,
        BackendLoadError,
        BackendWarning,
        ConfigError,
        ConfigWarning,
        FlushTimeout,
        RemoteTraceback,
        SdkVersionWarning,
        TagMismatchError,
        TrackerLost,
        UnknownBackendError,
        WriterDied,
    )
    from .events import Event
    from .hookspecs import hookimpl, hookspec
    from .media import Histogram, Image, Text
    from .monitor import Monitor
    from .resume import NoRunToResume
    from .run import RunInfo

#: Public name -> the module defining it.
_EXPORTS = {
    "Capabilities": ".capabilities",
    "BackendError": ".errors",
    "BackendLoadError": ".errors",
    "BackendWarning": ".errors",
    "ConfigError": ".errors",
    "ConfigWarning": ".errors",
    "FlushTimeout": ".errors",
    "RemoteTraceback": ".errors",
    "SdkVersionWarning": ".errors",
    "TagMismatchError": ".errors",
    "TrackerLost": ".errors",
    "UnknownBackendError": ".errors",
    "WriterDied": ".errors",
    "Event": ".events",
    "hookimpl": ".hookspecs",
    "hookspec": ".hookspecs",
    "Histogram": ".media",
    "Image": ".media",
    "Text": ".media",
    "Monitor": ".monitor",
    "NoRunToResume": ".resume",
    "RunInfo": ".run",
}

__all__ = [
    "BackendError",
    "BackendLoadError",
    "BackendWarning",
    "Capabilities",
    "ConfigError",
    "ConfigWarning",
    "Event",
    "FlushTimeout",
    "Histogram",
    "Image",
    "Monitor",
    "NoRunToResume",
    "RemoteTraceback",
    "RunInfo",
    "SdkVersionWarning",
    "TagMismatchError",
    "Text",
    "TrackerLost",
    "UnknownBackendError",
    "WriterDied",
    "__version__",
    "hookimpl",
    "hookspec",
]


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``, whose import alone takes
    about 50 ms: read on first use, never by a writer process)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("core-monitor")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


__getattr__, __dir__ = first_use(__name__, globals(), _EXPORTS, {"__version__": _version})
