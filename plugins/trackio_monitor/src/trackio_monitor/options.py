"""Checking ``TrackioMonitor``'s options: types and values, before Trackio is imported."""

from __future__ import annotations

from typing import Any

from core_monitor import ConfigError

#: The values of ``TrackioMonitor(resume=...)`` (Trackio's own ``resume`` values).
RESUME = ("never", "allow", "must")


def check_options(group: Any, resume: Any, space_id: Any, server_url: Any, private: Any,
                  auto_log_gpu: Any, auto_log_cpu: Any, quiet: Any) -> None:
    """Check ``TrackioMonitor``'s options before Trackio is imported (same error on every rank).

    Args:
        group, space_id, server_url: ``str`` (non-blank) or ``None``; ``server_url`` starts
            with ``http://`` or ``https://``.
        resume: one of ``RESUME``.
        private, auto_log_gpu, auto_log_cpu: ``bool`` or ``None``.
        quiet: ``bool``.

    Raises:
        ConfigError: an option has a wrong type or value; the message names the option, the
            value and the fix.
    """
    _check_str("group", group, "a group name such as 'sweep-1'")
    if resume not in RESUME:
        raise ConfigError(f"trackio: resume={resume!r} is not one of "
                          f"{', '.join(map(repr, RESUME))}; use resume='allow' to continue a "
                          "run of the same name if it exists")
    _check_str("space_id", space_id, "a Space id such as 'user/my-space'")
    _check_str("server_url", server_url, "a URL such as 'https://host:7860/?write_token=...'")
    if server_url is not None and not server_url.startswith(("http://", "https://")):
        raise ConfigError(f"trackio: server_url={server_url!r} must start with http:// or https://")
    for option, value in (("private", private), ("auto_log_gpu", auto_log_gpu),
                          ("auto_log_cpu", auto_log_cpu)):
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"trackio: {option}={value!r} must be True, False or None")
    if not isinstance(quiet, bool):
        raise ConfigError(f"trackio: quiet={quiet!r} must be True or False")


def _check_str(option: str, value: Any, example: str) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"trackio: {option}={value!r} must be None or {example}")
