"""``Dispatch``: the one interface a ``Monitor`` sends through, whatever the dispatch mode.

Each mode is a subclass in a module of its own: ``sync.SyncDispatch`` (on the caller's
thread), ``threads.ThreadDispatch`` (a worker thread per backend) and
``processes.ProcessDispatch`` (a writer process per backend, the default). The ``Monitor``
calls only the methods below and never asks which mode it has.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from ..errors import BackendWarning, ConfigError
from ..media import MediaRoutes
from ..resume import NoRunToResume
from ..run import RunInfo
from .policy import Policy


class BackendSpec(NamedTuple):
    """A backend to start: the name it was selected by, its class, the user's options, and
    whether the class came from an installed entry point (so any interpreter imports it)."""

    name: str
    cls: type
    options: Mapping[str, Any]
    installed: bool = False


class Dispatch:
    """How one ``Monitor``'s calls reach its backends.

    Args:
        policy: the failure policy (strict or not; the counts).
        capacity: calls each backend's buffer holds (``Monitor(queue_size=...)``).
        on_full: ``"block"`` or ``"drop"`` (``Monitor(on_full=...)``).

    Attributes:
        policy: as given.
        media: which media kinds each started backend is sent; what the others were not sent.
        hooks: started backend name -> the hooks it implements, in start order.
        facts: started backend name -> what it told at its start: ``{"state": (resumed,
            last_step)}`` (``core_monitor.resume.backend_state``).
        missing: backend name -> the ``NoRunToResume`` it raised (``resume="must"``): it
            was not started; the ``Monitor`` raises one error naming them all.
        dropped: backend name -> calls dropped because its buffer was full (``"drop"``).
        undelivered: backend name -> calls that never reached it (``close`` gave up, or the
            backend's thread or process had died).
    """

    mode: ClassVar[str]
    #: Whether ``start`` returns only once every backend started (``Monitor(wait=...)``);
    #: only writer processes start behind it, the other modes always wait.
    wait = True

    def __init__(self, policy: Policy, capacity: int, on_full: str) -> None:
        self.policy = policy
        self.capacity = capacity
        self.on_full = on_full
        self.media = MediaRoutes()
        self.hooks: dict[str, frozenset[str]] = {}
        self.facts: dict[str, dict[str, Any]] = {}
        self.missing: dict[str, NoRunToResume] = {}
        self.dropped: dict[str, int] = {}
        self.undelivered: dict[str, int] = {}
        self._told: set[tuple[str, str]] = set()  # (backend, optional hook) warned about

    @property
    def names(self) -> list[str]:
        """The started backends, in start order."""
        return list(self.hooks)

    def start(self, specs: Sequence[BackendSpec], run: RunInfo) -> None:
        """Start every backend of ``specs`` for ``run``.

        A backend that fails to start is set aside (reported and counted as
        ``failures[name]``, hook ``"start"``) and the others run.

        Raises:
            ConfigError: raised by a backend's constructor (a bad option value), always;
                the backends already started are closed first.
            Exception: whatever a backend's start raised, when ``strict``.
        """
        raise NotImplementedError

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Call ``hook(**kwargs)`` on every started backend implementing it, in order; the
        hot path of ``Monitor.log``. The caller holds the monitor's lock."""
        raise NotImplementedError

    def flush(self, lock: Any, timeout: float | None) -> None:
        """Return once every backend wrote and flushed what was sent before; ``lock`` is held
        while the flush is queued. Raises ``FlushTimeout`` at ``timeout`` seconds."""
        raise NotImplementedError

    def stop(self) -> None:
        """Nothing is sent after this (called under the monitor's lock by ``close``)."""

    def close(self, timeout: float | None) -> None:
        """Write what is buffered (``timeout`` seconds per backend, all at once), then flush
        and close every backend; report what was dropped or not delivered."""
        raise NotImplementedError

    def before_fork(self) -> None:
        """The process is about to fork (the monitor's lock is held): leave nothing in a
        user-space buffer that the child could write a second time."""

    def forget(self) -> None:
        """In a forked child: let go of everything inherited, never writing to it."""

    def warn_lacking(self, hook: str, consequence: str) -> None:
        """Warn once per backend that it lacks the optional ``hook``, pointing at the caller
        of the ``Monitor`` method that called this."""
        for name, hooks in self.hooks.items():
            if hook not in hooks and (name, hook) not in self._told:
                self._told.add((name, hook))
                warnings.warn(f"backend {name!r} has no {hook} hook: {consequence}",
                              BackendWarning, stacklevel=3)

    def _start_failed(self, name: str, error: BaseException) -> None:
        """A backend did not start: raise (``ConfigError``, or any error when strict) or set
        it aside under the failure policy. A missing run to resume is kept in ``missing``."""
        if isinstance(error, NoRunToResume):
            self.missing[name] = error
            return
        if isinstance(error, ConfigError) or self.policy.strict:
            raise error
        self.policy.failed(name, "start", error)
