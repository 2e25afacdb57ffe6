"""Renamed ``core_monitor.sdk`` (a plugin's SDK checks, run by the core); this name is kept for
one release so that code importing it keeps working. Plugins' own ``_compat.py`` modules are
another idea: the SDK internals a plugin fences."""

from .sdk import (
    Plugin,
    check_installed,
    ensure_sdk,
    packages_distributions,
    sdk_error,
)
from .sdk import (
    require_sdk as require_sdk,  # not exported: importable for one release, and refusing
)

__all__ = ["Plugin", "check_installed", "ensure_sdk", "packages_distributions", "sdk_error"]
