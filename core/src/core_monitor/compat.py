"""Helpers for a plugin's ``_compat.py``: the SDK-presence check, the supported SDK range and the
``BackendLoadError`` a capability check raises when the SDK changed shape.

A plugin that reaches into its SDK's private API fences that access in ``_compat.py`` and checks
at first use that the SDK still has the shape it relies on. These helpers keep the wording of
that check the same in every plugin::

    from core_monitor.compat import require_sdk, sdk_changed, supported_range

    require_sdk("mysdk", "mysdk-monitor")  # at import of _compat: the plugin fails to load

    def check() -> None:
        import mysdk
        problems = [] if hasattr(mysdk.Run, "_flush") else ["no mysdk.Run._flush"]
        if problems:
            raise sdk_changed("mysdk", "mysdk-monitor", "mysdk_monitor:MySdkMonitor",
                              sdk="mysdk", sdk_version=mysdk.__version__, problems=problems,
                              supported=supported_range("mysdk-monitor", "mysdk", "mysdk>=1,<2"))

Nothing here imports an SDK.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Sequence

from .errors import BackendLoadError

__all__ = ["require_sdk", "sdk_changed", "supported_range"]


def require_sdk(module: str, distribution: str) -> None:
    """Make the plugin fail to load when its SDK is not installed, without importing the SDK.

    Args:
        module: the SDK's top-level import name, e.g. ``"trackio"``.
        distribution: the plugin's distribution, e.g. ``"trackio-monitor"`` (named in the
            message).

    Raises:
        ModuleNotFoundError: ``importlib.util.find_spec(module)`` finds nothing; ``.name`` is
            ``module``, so the core's ``BackendLoadError`` says which package to install.
    """
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"No module named {module!r} ({distribution} needs it)",
                                  name=module)


def supported_range(distribution: str, sdk: str, fallback: str) -> str:
    """The SDK requirement ``distribution`` declares, as its installed metadata has it.

    Args:
        distribution: the plugin's distribution, e.g. ``"wandb-monitor"``.
        sdk: the SDK's distribution name, e.g. ``"wandb"``; the first requirement that starts
            with it (case ignored) is taken, without its environment marker.
        fallback: returned when the distribution's metadata is absent (e.g. the plugin runs
            from a source tree) or declares no such requirement, e.g. ``"wandb>=0.31,<0.32"``.

    Returns:
        A requirement string such as ``"wandb<0.32,>=0.31"`` (the metadata's own ordering).
    """
    try:
        requires = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return fallback
    found = [r.split(";")[0].strip() for r in requires if r.lower().startswith(sdk.lower())]
    return found[0] if found else fallback


def sdk_changed(
    backend: str,
    distribution: str,
    target: str,
    *,
    sdk: str,
    sdk_version: str,
    problems: Sequence[str],
    supported: str,
) -> BackendLoadError:
    """The error for an SDK that lacks what the plugin relies on, naming the supported range.

    Args:
        backend: the backend name, e.g. ``"wandb"``.
        distribution: the plugin's distribution; its installed version goes into the error
            (``"unknown"`` when it has no metadata).
        target: the plugin's entry point, ``"module:Class"``.
        sdk: the SDK's name as shown to the user, e.g. ``"wandb"``.
        sdk_version: the installed SDK's version, e.g. ``wandb.__version__``.
        problems: what is missing or changed, one short phrase each (at least one).
        supported: the supported SDK range, e.g. from ``supported_range``.

    Returns:
        A ``BackendLoadError`` (for the caller to raise) whose message reads
        ``"<sdk> <version> is not supported (<problems>); this plugin supports <range>:
        `pip install '<range>'`"``.
    """
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return BackendLoadError(
        backend, distribution, version, target,
        RuntimeError(f"{sdk} {sdk_version} is not supported ({'; '.join(problems)}); this "
                     f"plugin supports {supported}: `pip install '{supported}'`"),
    )
