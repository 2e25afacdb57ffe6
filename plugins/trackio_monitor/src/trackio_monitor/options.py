"""Checking ``TrackioMonitor``'s option values, before Trackio is imported.

The core checks each option's type from ``TrackioMonitor.__init__``'s annotations
(``core_monitor.options``); what types cannot say is checked here, called by the core as
``TrackioMonitor.check_options(options)`` in the training process at ``Monitor()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core_monitor import ConfigError

#: Options that must not be blank when given, with an example of a good value.
_NAMES = {
    "group": "a group name such as 'sweep-1'",
    "space_id": "a Space id such as 'user/my-space'",
    "server_url": "a URL such as 'https://host:7860/?write_token=...'",
}


def check_options(options: Mapping[str, Any]) -> None:
    """Check the values of the options given (their types already checked by the core).

    Args:
        options: the user's options for ``trackio``, only those given.

    Raises:
        ConfigError: ``group``, ``space_id`` or ``server_url`` is blank, ``server_url`` does
            not start with ``http://`` or ``https://``; the message names the option, the
            value and the fix.
    """
    for option, example in _NAMES.items():
        value = options.get(option)
        if isinstance(value, str) and not value.strip():
            raise ConfigError(f"trackio: {option}={value!r} must be None or {example}")
    server_url = options.get("server_url")
    if server_url is not None and not server_url.startswith(("http://", "https://")):
        raise ConfigError(f"trackio: server_url={server_url!r} must start with http:// or https://")
