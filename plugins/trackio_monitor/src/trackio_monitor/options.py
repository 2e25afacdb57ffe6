"""Checking ``TrackioMonitor``'s option values, before Trackio is imported.

The core checks each option's type from ``TrackioMonitor.__init__``'s annotations
(``core_monitor.options``); what types cannot say is checked here, called by the core as
``TrackioMonitor.check_options(options)`` in the training process at ``Monitor()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core_monitor import ConfigError


def check_options(options: Mapping[str, Any]) -> None:
    """Check the values of the options given (their types already checked by the core).

    Args:
        options: the user's options for ``trackio``, only those given.

    Raises:
        ConfigError: ``server_url`` does not start with ``http://`` or ``https://``; the
            message names the value and the fix. (A blank ``group``, ``space_id`` or
            ``server_url`` is refused before, by its ``NonBlank`` annotation.)
    """
    server_url = options.get("server_url")
    if server_url is not None and not server_url.startswith(("http://", "https://")):
        raise ConfigError(f"trackio: server_url={server_url!r} must start with http:// or https://")
