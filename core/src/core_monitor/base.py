"""``MonitorBase``: what a ``Monitor`` is besides its logging API: starting its backends,
``flush`` and ``close``, the process it belongs to (fork handling, called by
``core_monitor.shutdown``), its context manager and read-only views.
``core_monitor.monitor.Monitor`` builds on it and sets every attribute used here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import discovery, shutdown
from . import resume as _resume  # [resume]
from .channel import FORK_FLUSH_TIMEOUT, Channel
from .settings import check_backend_keys, check_options

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .run import RunInfo


class MonitorBase:
    """Process ownership and read-only views of a ``Monitor`` (see its docstring)."""

    run: RunInfo
    _dispatch: Dispatcher
    _channel: Channel | None
    _lock: Any  # threading.RLock
    _pid: int
    _forked: bool
    _closed: bool
    _fork_locked: bool = False
    _send: Any
    _reports: Any  # Dispatcher.reports
    dropped: dict[str, int]
    undelivered: dict[str, int]

    def _start(self, backends: list[str | type], backend_options: Mapping[str, Any],
               write: bool, mode: tuple[str, int, str]) -> None:
        """Select, load and check every backend (each name and option before any import),
        start them when this rank ``write``s, then open the ``Channel`` of ``mode``
        (``dispatch``, ``queue_size``, ``on_full``). A failure closes what started."""
        found = discovery.select(backends, strict=self._dispatch.strict)  # before any import
        check_backend_keys(backend_options, backends)
        classes = {
            k: v if isinstance(v, type) else discovery.load_backend(v) for k, v in found.items()
        }
        for backend_name, cls in classes.items():
            check_options(backend_name, cls, backend_options.get(backend_name) or {})
        if write:
            try:
                _resume.check_classes(self.run, classes)  # [resume]
                missing = {}  # [resume] backend name -> NoRunToResume (resume="must")
                for backend_name, cls in classes.items():
                    options = dict(backend_options.get(backend_name) or {})
                    try:  # [resume]
                        self._dispatch.start(backend_name, cls, self.run, options)
                    except _resume.NoRunToResume as error:  # [resume]
                        missing[backend_name] = error  # [resume]
                _resume.raise_missing(self.run, missing)  # [resume]
            except Exception:  # a ConfigError, or any start failure with strict=True
                self.close()
                raise
        self._channel = channel = Channel(self._dispatch, *mode)
        self._send = channel.send  # log()'s hot path: one bound method, no look-up
        self.dropped, self.undelivered = channel.dropped, channel.undelivered

    def flush(self, timeout: float | None = None) -> None:
        """Return once every backend has written and flushed (``monitor_flush``) everything
        logged before this call: it is then readable by each backend's own reader.

        Args:
            timeout: seconds to wait in all (background mode), ``None`` for no limit.

        Raises:
            FlushTimeout: the time ran out; ``.pending``: calls not yet written, per backend.
            Exception: with ``strict=True``, a backend's exception.

        A no-op once closed, and in a forked child (the monitor belongs to its parent).
        """
        if self._closed:
            return
        if self._reports:
            self._dispatch.deliver()
        if self._channel is not None:
            self._channel.flush(self._lock, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued, then flush and close every backend in reverse start order.

        Args:
            timeout: seconds each backend gets to write its queued calls (all drain at once);
                ``None`` waits. A backend still busy then is neither flushed nor closed; its
                queued calls are counted in ``undelivered`` and reported (``BackendWarning``).
                At exit and on SIGTERM the limit is ``core_monitor.shutdown.EXIT_TIMEOUT``.

        Every backend is flushed and closed even when another one raises; a second call, or
        one in a forked child, does nothing. Calls dropped (``on_full="drop"``) are reported.

        Raises:
            Exception: with ``strict=True``, the first exception a backend raised.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._channel is not None:
                self._channel.queue_stop()
        shutdown.unregister(self)
        if self._channel is None:  # a backend failed to start: close the started ones
            self._dispatch.close()
        else:
            self._channel.close(timeout)

    @staticmethod
    def backend_name(cls: type) -> str:
        """The name a backend class passed directly is known by: ``cls.name`` or ``__name__``."""
        return discovery.backend_name(cls)

    @property
    def strict(self) -> bool:
        """Whether a backend's exception is re-raised (``True``) or warned about once."""
        return self._dispatch.strict

    @property
    def backends(self) -> list[str]:
        """Names of the backends this process writes to, in start order (empty off rank 0)."""
        return [backend.name for backend in self._dispatch.backends]

    def before_fork(self) -> None:
        """Before this process forks (``core_monitor.shutdown`` calls it): hold the lock (no
        call is half-queued or half-written) and have every backend write and flush what it
        holds, within ``FORK_FLUSH_TIMEOUT`` seconds, so the child copies no buffered rows that
        it could write a second time. ``after_fork_in_parent`` lets the lock go. A lock
        held longer than that (another thread waiting for room in a hung backend's queue) is
        not waited for: the fork goes ahead unflushed."""
        self._fork_locked = self._lock.acquire(timeout=FORK_FLUSH_TIMEOUT)
        if self._fork_locked and self._channel is not None:
            self._channel.flush_before_fork()

    def after_fork_in_parent(self) -> None:
        """Let go of the lock ``before_fork`` took."""
        if self._fork_locked:
            self._fork_locked = False
            self._lock.release()

    def after_fork_in_child(self) -> None:
        """Make this monitor inert in a forked child (``core_monitor.shutdown`` calls it).

        No thread of the parent exists in the child and no queued call is kept; nothing is
        ever sent to a backend again from here (the parent owns the runs).
        """
        self._closed = self._forked = True
        self._lock = threading.RLock()  # another thread may have held it at the fork
        if self._channel is not None:
            self._channel.forget()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run (also ``True`` in a forked child)."""
        return self._closed

    def __enter__(self) -> MonitorBase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Monitor {self.run.project}/{self.run.name} {self.backends} {state}>"

    def _closed_error(self, method: str) -> RuntimeError:
        if self._forked:
            return RuntimeError(
                f"{method}() in process {os.getpid()} on the Monitor of run {self.run.name!r}, "
                f"created by process {self._pid}: this process is a fork of it, and a forked "
                "child never writes to its parent's runs. Log from the parent, or create a new "
                "Monitor in the child (a run of its own)"
            )
        return RuntimeError(
            f"{method}() on the closed Monitor of run {self.run.name!r}; call it before "
            "close(), or create a new Monitor"
        )
