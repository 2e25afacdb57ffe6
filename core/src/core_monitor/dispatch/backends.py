"""Starting one backend: constructing its class and validating its hooks with pluggy.

pluggy checks each backend's hook names and signatures against ``core_monitor.hookspecs``;
the core then calls each hook's function itself, one backend at a time, so that one backend
raising never stops the others. A hook option that changes how pluggy would order or wrap
calls (``wrapper``, ``hookwrapper``, ``tryfirst``, ``trylast``) cannot be honoured: such a
backend is refused when it starts, like any that fails to start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy

from .. import hookspecs
from ..run import RunInfo
from ..sdk import ensure_sdk

#: ``hookimpl`` options the core cannot honour, since it calls each backend's function itself.
UNSUPPORTED_HOOK_OPTIONS = ("wrapper", "hookwrapper", "tryfirst", "trylast")


class StartedBackend:
    """One started backend, in the process that calls it (``hookspecs.Backend`` is the
    protocol its class follows; this is the core's handle on one instance).

    Attributes:
        name: the name it was selected by, e.g. ``"trackio"``.
        instance: the backend object, constructed as ``cls(run, **options)``.
        hooks: hook name (one of ``hookspecs.HOOKS``) -> the function to call, for the hooks
            it implements; a hook it does not implement is absent.
    """

    __slots__ = ("hooks", "instance", "name")

    def __init__(self, name: str, instance: object, hooks: Mapping[str, Callable[..., Any]]):
        self.name = name
        self.instance = instance
        self.hooks = dict(hooks)

    def __repr__(self) -> str:
        return f"<StartedBackend {self.name!r} hooks={sorted(self.hooks)}>"


#: The name ``StartedBackend`` had (two classes were named ``Backend``); kept for one release.
Backend = StartedBackend


def new_manager() -> pluggy.PluginManager:
    """A plugin manager that knows the core's hook specifications."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return manager


def start_backend(manager: pluggy.PluginManager, name: str, cls: type, run: RunInfo,
                  options: Mapping[str, Any]) -> StartedBackend:
    """Check the SDK of ``cls`` (``core_monitor.sdk.ensure_sdk``: its ``check_sdk()``, once
    per process), construct ``cls(run, **options)`` and validate its hooks. The one place the
    core constructs a backend, whichever process it runs in.

    Raises:
        BackendLoadError: the SDK is missing, or ``check_sdk()`` reported a problem (nothing
            was constructed).
        Exception: what the constructor raised (``ConfigError`` for a value only the SDK
            refuses, ``NoRunToResume``), or
            ``pluggy.PluginValidationError`` for a misspelt hook name, a wrong hook signature
            or a hook option the core cannot honour (``UNSUPPORTED_HOOK_OPTIONS``). The
            instance is unregistered again.
    """
    ensure_sdk(cls)
    instance = cls(run, **options)
    try:
        # pluggy checks the hook signatures; check_pending catches a misspelt hook name.
        manager.register(instance, name=name)
        manager.check_pending()
        hooks = _hooks_of(manager, name, instance)
    except Exception:
        if manager.is_registered(instance):
            manager.unregister(instance)
        raise
    return StartedBackend(name, instance, hooks)


def hook_names(cls: type) -> frozenset[str]:
    """The hooks ``cls`` implements (marked with ``hookimpl``), read from the class alone:
    what the training process knows of a backend that runs in a writer process."""
    return frozenset(hook for hook in hookspecs.HOOKS
                     if hookspecs.hookimpl_options(cls, hook) is not None)


def _hooks_of(manager: pluggy.PluginManager, name: str,
              instance: object) -> dict[str, Callable[..., Any]]:
    hooks: dict[str, Callable[..., Any]] = {}
    for hook in hookspecs.HOOKS:
        for impl in getattr(manager.hook, hook).get_hookimpls():
            if impl.plugin is not instance:
                continue
            refused = [o for o in UNSUPPORTED_HOOK_OPTIONS if impl.opts.get(o)]
            if refused:
                raise pluggy.PluginValidationError(instance, (
                    f"backend {name!r}: {hook} is declared with hookimpl("
                    f"{', '.join(f'{o}=True' for o in refused)}), which the core cannot "
                    "honour (it calls each backend's hook itself, one backend at a time, "
                    "in selection order); remove that option"
                ))
            hooks[hook] = impl.function
    return hooks


def flush_confirms(cls: type) -> bool:
    """Whether a ``monitor_flush`` of backend class ``cls`` that returned confirms every call
    handed to it before, i.e. moves its journal cursor (``core_monitor.journal``):
    ``Capabilities.durable_after == "flush"``. A backend whose storage holds its rows surely
    only after ``monitor_close`` (SwanLab has no flush; its records reach its file from a thread
    of its own) is confirmed at its close alone, so that a kill of the whole job after a flush
    loses none of its calls: ``monitors sync`` delivers those its storage lacks."""
    from ..capabilities import Capabilities

    try:
        return Capabilities.of(cls).durable_after == "flush"
    except TypeError:  # a capabilities declaration the start reported already
        return True
