"""Per-backend dispatch and the failure policy: how one call reaches every started backend.

pluggy validates each backend (hook names and signatures against ``core_monitor.hookspecs``);
the core then calls each hook's function itself, one backend at a time, in start order, so that
one backend raising never stops the others: they still get the call, the failure is counted
(``Dispatcher.failures``), and without ``strict`` the first failure of a backend is reported
once (a ``BackendWarning`` and the ``core_monitor`` logger), the later ones only counted; with
``strict`` the first exception is re-raised once every backend got the call.

In background mode (``core_monitor.worker``) a backend fails on its own thread: the failure is
counted and logged there at once, and reported (the ``BackendWarning``, or the strict
re-raise) on the caller's thread at its next ``log``, ``flush`` or ``close`` (``deliver``).

A hook option that changes how pluggy would order or wrap calls (``wrapper``, ``hookwrapper``,
``tryfirst``, ``trylast``) cannot be honoured: such a backend is refused when it starts, like
any that fails to start. ``core_monitor.channel`` and ``.monitor`` build on this module.
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pluggy

from . import hookspecs
from ._stack import caller_level
from .errors import BackendWarning, ConfigError
from .events import Event
from .routing import MediaRoutes
from .run import RunInfo

logger = logging.getLogger("core_monitor")

#: The hooks the core calls, in the order a backend's life uses them.
HOOKS = ("monitor_write", "monitor_flush", "monitor_close", "monitor_config",
         "monitor_write_media")
#: ``hookimpl`` options the core cannot honour, since it calls each backend's function itself.
UNSUPPORTED_HOOK_OPTIONS = ("wrapper", "hookwrapper", "tryfirst", "trylast")


class Backend:
    """One started backend.

    Attributes:
        name: the name it was selected by, e.g. ``"trackio"``.
        instance: the backend object, constructed as ``cls(run, **options)``.
        hooks: hook name (one of ``HOOKS``) -> the function to call, for the hooks it
            implements; a hook it does not implement is absent.
    """

    __slots__ = ("hooks", "instance", "name")

    def __init__(self, name: str, instance: object, hooks: Mapping[str, Callable[..., Any]]):
        self.name = name
        self.instance = instance
        self.hooks = dict(hooks)

    def __repr__(self) -> str:
        return f"<Backend {self.name!r} hooks={sorted(self.hooks)}>"


class Dispatcher:
    """Starts backends and calls their hooks under the failure policy (module docstring).

    Args:
        strict: re-raise a backend's first exception after every backend got the call,
            instead of warning once per backend and counting.

    Attributes:
        strict: as given.
        failures: backend name -> how many of its hook calls (and its start) raised.
        media_skipped: ``(backend name, kind)`` -> how many media values of that kind the
            backend was not sent because it does not store the kind (``media_kinds``).
        backends: the started backends, in start order.
    """

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self.failures: dict[str, int] = {}
        #: Which media kinds each backend gets; ``media.skip`` counts the others.
        self.media = MediaRoutes()
        self.media_skipped = self.media.skipped
        self.backends: list[Backend] = []
        self._pending: BaseException | None = None
        #: Failures of worker threads not yet reported on the caller's thread.
        self.reports: deque[tuple[str, str, Exception]] = deque()
        self._told: set[tuple[str, str]] = set()  # (backend, optional hook) warned about
        #: (name, monitor_write function) per backend: ``write`` runs on every ``log()``.
        self._writers: list[tuple[str, Callable[..., Any]]] = []
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)

    def start(
        self, name: str, cls: type, run: RunInfo, options: dict[str, Any]
    ) -> Backend | None:
        """Construct ``cls(run, **options)``, validate its hooks, and add it to ``backends``.

        Returns:
            The started backend, or ``None`` when it failed to start and was set aside (the
            failure is reported and counted as ``failures[name]``, hook ``"start"``).

        Raises:
            ConfigError: raised by the backend's constructor (a bad option value), always.
            Exception: whatever the constructor or the validation raised, when ``strict``:
                a misspelt hook name, a wrong hook signature (``pluggy.PluginValidationError``)
                or a hook option the core cannot honour (``UNSUPPORTED_HOOK_OPTIONS``).
        """
        instance = None
        try:
            instance = cls(run, **options)
            # pluggy checks the hook signatures; check_pending catches a misspelt hook name.
            self._pm.register(instance, name=name)
            self._pm.check_pending()
            hooks = self._hooks_of(name, instance)
        except ConfigError:
            raise
        except Exception as error:
            if self.strict:
                raise
            self.failed(name, "start", error)
            if instance is not None and self._pm.is_registered(instance):
                self._pm.unregister(instance)
            return None
        self.media.add(name, getattr(cls, "media_kinds", ()), hooks)
        backend = Backend(name, instance, hooks)
        self.backends.append(backend)
        if "monitor_write" in hooks:
            self._writers.append((name, hooks["monitor_write"]))
        return backend

    def _hooks_of(self, name: str, instance: object) -> dict[str, Callable[..., Any]]:
        hooks: dict[str, Callable[..., Any]] = {}
        for hook in HOOKS:
            for impl in getattr(self._pm.hook, hook).get_hookimpls():
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

    def get(self, name: str) -> Backend:
        """The started backend called ``name``.

        Raises:
            KeyError: no started backend has that name.
        """
        for backend in self.backends:
            if backend.name == name:
                return backend
        raise KeyError(name)

    def warn_lacking(self, hook: str, consequence: str) -> None:
        """Warn once per backend (for this dispatcher's life) that it lacks the optional
        ``hook``: ``BackendWarning("backend 'x' has no <hook> hook: <consequence>")``, pointing
        at the caller of the ``Monitor`` method that called this."""
        for backend in self.backends:
            if hook not in backend.hooks and (backend.name, hook) not in self._told:
                self._told.add((backend.name, hook))
                warnings.warn(f"backend {backend.name!r} has no {hook} hook: {consequence}",
                              BackendWarning, stacklevel=3)

    # Calls -------------------------------------------------------------------------------

    def write(self, batch: Sequence[Event]) -> None:
        """Call ``monitor_write(events=batch)`` on every backend; raise a strict failure after.

        The hot path of ``Monitor.log``: no look-up beyond the prepared writer list.
        """
        for name, write in self._writers:
            try:
                write(events=batch)
            except Exception as error:
                self.failed(name, "monitor_write", error)
        if self._pending is not None:
            self.raise_pending()

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        """``call(hook, **kwargs)``: the sync-mode counterpart of ``Workers.send``."""
        if hook == "monitor_write":
            self.write(kwargs["events"])
        else:
            self.call(hook, **kwargs)

    def call(self, hook: str, **kwargs: Any) -> None:
        """Call ``hook(**kwargs)`` on every backend implementing it, in start order; then
        raise a strict failure, if any."""
        for backend in self.backends:
            function = backend.hooks.get(hook)
            if function is not None:
                self._guarded(backend.name, hook, function, kwargs)
        self.raise_pending()

    def flush_quietly(self) -> None:
        """``monitor_flush`` on every backend under the policy, never raising (before a fork)."""
        for backend in self.backends:
            function = backend.hooks.get("monitor_flush")
            if function is not None:
                self._guarded(backend.name, "monitor_flush", function, {})

    def close(self, only: Sequence[str] | None = None) -> None:
        """Flush every backend, then close every backend, both in reverse start order.

        Args:
            only: the names of the backends to flush and close (``None``: all); in background
                mode, those whose worker thread ended.

        Every backend is flushed and closed even when another one raises; a strict failure
        (also one a worker kept) is raised at the end.
        """
        self.deliver(raising=False)
        backends = [b for b in self.backends if only is None or b.name in only]
        for hook in ("monitor_flush", "monitor_close"):
            for backend in reversed(backends):
                function = backend.hooks.get(hook)
                if function is None:
                    continue
                try:  # inline, not _guarded: a warning then points at the caller of close()
                    function()
                except Exception as error:
                    self.failed(backend.name, hook, error)
        self.raise_pending()

    def _guarded(
        self, name: str, hook: str, function: Callable[..., Any], kwargs: Mapping[str, Any]
    ) -> None:
        try:
            function(**kwargs)
        except Exception as error:
            self.failed(name, hook, error)

    # The failure policy ------------------------------------------------------------------

    def failed(self, name: str, hook: str, error: Exception) -> None:
        """Count ``error`` against backend ``name``; keep it (strict) or report it once.

        ``hook`` is the hook that raised, or ``"start"``.
        """
        count = self.failures.get(name, 0)
        self.failures[name] = count + 1
        if self.strict:
            if self._pending is None:
                if hasattr(error, "add_note"):
                    error.add_note(f"(raised by backend {name!r} in {hook})")
                self._pending = error
            return
        if count == 0:
            message = _message(name, hook, error)
            logger.error(message, exc_info=error)
            warnings.warn(message, BackendWarning, stacklevel=4)

    def failed_in_worker(self, name: str, hook: str, error: Exception) -> None:
        """``failed`` on a backend's worker thread: count now, log the first failure now, and
        keep the report (warning or strict exception) for the caller's thread (``deliver``)."""
        count = self.failures.get(name, 0)
        self.failures[name] = count + 1  # only this backend's worker counts it meanwhile
        if self.strict:
            if self._pending is None:
                if hasattr(error, "add_note"):  # Python >= 3.11
                    error.add_note(f"(raised by backend {name!r} in {hook}, on its thread)")
                self._pending = error
                self.reports.append((name, hook, error))
            return
        if count == 0:
            logger.error(_message(name, hook, error), exc_info=error)
            self.reports.append((name, hook, error))

    def deliver(self, *, raising: bool = True) -> None:
        """On the caller's thread: warn about worker failures not reported yet, then raise a
        strict failure (unless ``raising`` is false)."""
        reports = self.reports
        while reports:
            name, hook, error = reports.popleft()
            if not self.strict:
                warnings.warn(_message(name, hook, error), BackendWarning,
                              stacklevel=caller_level())
        if raising and self._pending is not None:
            self.raise_pending()

    def raise_pending(self) -> None:
        """Raise (once) the exception a backend raised under ``strict``, if any."""
        error, self._pending = self._pending, None
        if error is not None:
            raise error


def _message(name: str, hook: str, error: BaseException) -> str:
    return (f"backend {name!r} failed in {hook}: {type(error).__name__}: {error}. The other "
            "backends carry on; further failures of this backend are counted in "
            "Monitor.failures, not reported (strict=True raises instead).")

