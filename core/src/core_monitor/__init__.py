"""core-monitor: one logging API for training code, fanned out to experiment-tracker plugins.

Users build a ``Monitor``; backend authors implement the hooks in ``core_monitor.hookspecs``
with the ``hookimpl`` marker and declare their class in the ``experiment_monitors`` entry-point
group.
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import BackendLoadError, BackendWarning, ConfigError, UnknownBackendError
from .events import Event
from .hookspecs import hookimpl, hookspec
from .monitor import Monitor
from .run import RunInfo

try:
    __version__ = version("core-monitor")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "BackendLoadError",
    "BackendWarning",
    "ConfigError",
    "Event",
    "Monitor",
    "RunInfo",
    "UnknownBackendError",
    "__version__",
    "hookimpl",
    "hookspec",
]
