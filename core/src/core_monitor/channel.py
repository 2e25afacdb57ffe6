"""How a ``Monitor``'s calls reach its backends: per-backend worker threads (background
dispatch, the default) or the caller's own thread (``dispatch="sync"``).

``Channel`` is what ``core_monitor.monitor`` talks to: ``send`` a hook call to every backend,
``flush`` with a time limit, ``close`` with a per-backend drain limit, and the fork steps.
``Workers`` holds the background mode's ``core_monitor.worker.Worker`` objects: the bounded
queues, what a full queue does (block or drop and count), and waiting for markers.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Mapping
from queue import Empty, SimpleQueue
from typing import Any

from ._stack import caller_level
from .dispatch import Dispatcher
from .errors import BackendWarning, ConfigError, FlushTimeout
from .worker import FLUSH, STOP, Worker, fan_out, in_worker

logger = logging.getLogger("core_monitor")

#: Seconds ``Channel.flush_before_fork`` waits for the backends to write what is queued.
FORK_FLUSH_TIMEOUT = 10.0
#: ``Monitor(dispatch=...)`` values: worker threads (default), or on the caller's thread.
DISPATCH_MODES = ("background", "sync")


def check_dispatch(dispatch: Any, queue_size: Any, on_full: Any) -> None:
    """Check ``Monitor``'s ``dispatch``, ``queue_size`` and ``on_full`` arguments.

    Raises:
        ConfigError: ``dispatch`` not in ``DISPATCH_MODES``; ``queue_size`` not an ``int``
            >= 1; ``on_full`` neither ``"block"`` nor ``"drop"``.
    """
    if dispatch not in DISPATCH_MODES:
        raise ConfigError(f"dispatch={dispatch!r} must be 'background' (each backend written "
                          "by its own thread) or 'sync' (on the caller's thread)")
    if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
        raise ConfigError(f"queue_size={queue_size!r} must be an int >= 1 (log() calls each "
                          "backend's queue holds), e.g. queue_size=10000")
    if on_full not in ("block", "drop"):
        raise ConfigError(f"on_full={on_full!r} must be 'block' (wait for room, lose nothing) "
                          "or 'drop' (drop and count the newest call for that backend)")


class Channel:
    """The dispatch mode of one ``Monitor``, over its started backends.

    Args:
        dispatcher: the started backends and the failure policy.
        mode: ``"background"`` or ``"sync"``.
        capacity: items each backend's queue holds (background).
        on_full: ``"block"`` or ``"drop"`` (background; see ``Workers``).

    Attributes:
        send: ``send(hook, kwargs)``: the hook call for every backend (queued, or made now).
        workers: the ``Workers`` in background mode with backends, else ``None``.
        dropped, undelivered: as ``Workers`` counts them (empty in sync mode).
    """

    def __init__(self, dispatcher: Dispatcher, mode: str, capacity: int, on_full: str) -> None:
        self.dispatcher = dispatcher
        self.workers = (Workers(dispatcher, capacity, on_full)
                        if mode == "background" and dispatcher.backends else None)
        self.send = dispatcher.send if self.workers is None else self.workers.send
        self.dropped: dict[str, int] = {} if self.workers is None else self.workers.dropped
        self.undelivered: dict[str, int] = (
            {} if self.workers is None else self.workers.undelivered
        )

    def flush(self, lock: Any, timeout: float | None) -> None:
        """``monitor_flush`` on every backend after what was sent before; ``lock`` (the
        monitor's) is held while queueing. Raises ``FlushTimeout`` at ``timeout``."""
        workers = self.workers
        if workers is None:
            with lock:
                self.dispatcher.call("monitor_flush")
            return
        with lock:
            markers = workers.queue_flush()
        late = workers.wait_flushed(markers, timeout)
        self.dispatcher.deliver()
        if late:
            raise FlushTimeout(late, timeout)

    def queue_stop(self) -> None:
        """Queue the end of every worker (under the monitor's lock)."""
        if self.workers is not None:
            self.workers.queue_stop()

    def close(self, timeout: float | None) -> None:
        """Let every queue drain (``timeout`` seconds per backend, at the same time), report
        what was dropped or not delivered, then flush and close the backends whose worker
        ended, in reverse start order (``Dispatcher.close``)."""
        finished = None
        if self.workers is not None:
            finished = self.workers.wait_stopped(timeout)
            if self.undelivered:
                _report_lost(self.undelivered, f"still queued when close(timeout={timeout}) "
                             "gave up; the backend is not closed")
            if self.dropped:
                _report_lost(self.dropped, "dropped, its queue was full (on_full='drop')")
        self.dispatcher.close(finished)

    def flush_before_fork(self) -> None:
        """Have every backend write and flush what it holds, never raising, within
        ``FORK_FLUSH_TIMEOUT`` seconds (the monitor's lock is held by the caller)."""
        if self.workers is None:
            self.dispatcher.flush_quietly()
        elif not in_worker():  # a backend forking on its own thread cannot wait for itself
            self.workers.wait_flushed(self.workers.queue_flush(), FORK_FLUSH_TIMEOUT)

    def forget(self) -> None:
        """In a forked child: no worker exists there; drop every queue."""
        if self.workers is not None:
            self.workers.forget()


class Workers:
    """Every started backend's ``Worker``: what ``Monitor`` sends through in background mode.

    The caller holds the monitor's lock around ``send``, ``flush`` (the part that queues) and
    ``stop`` (ditto), so items reach every queue in the order their steps were assigned.

    Args:
        dispatcher: the started backends and the failure policy.
        capacity: items each backend's queue holds (``Monitor(queue_size=...)``).
        on_full: ``"block"``: wait for room; ``"drop"``: drop the item for that backend, count
            it in ``dropped`` and warn once per backend.

    Attributes:
        workers: one per started backend, in start order.
        dropped: backend name -> items dropped (``on_full="drop"``).
        undelivered: backend name -> hook calls still queued or running when ``stop`` gave up.
    """

    def __init__(self, dispatcher: Dispatcher, capacity: int, on_full: str) -> None:
        self.dispatcher = dispatcher
        self.capacity = capacity
        self.on_full = on_full
        self.workers = [Worker(b, dispatcher, capacity) for b in dispatcher.backends]
        self._queues = [worker.items for worker in self.workers]
        self._qsize = SimpleQueue.qsize
        self.dropped: dict[str, int] = {}
        self.undelivered: dict[str, int] = {}

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Queue ``hooks[hook](**kwargs)`` for every backend (all or none of them, see
        ``fan_out``); block or drop for a full queue as ``on_full`` says."""
        item = (hook, kwargs)
        if max(map(self._qsize, self._queues), default=0) < self.capacity:
            fan_out(self.workers, item)
        else:
            fan_out(self._with_room(), item)

    def _with_room(self) -> list[Worker]:
        """The workers that take one more item now, after waiting (``"block"``) or dropping
        (``"drop"``) for the full ones. A worker whose thread died gets nothing (counted)."""
        ready = []
        for worker in self.workers:
            room = worker.items.qsize() < self.capacity
            if room or (self.on_full == "block" and worker.wait_for_room()):
                ready.append(worker)
            elif self.on_full == "block":  # the thread is gone: nothing will drain the queue
                self.undelivered[worker.name] = self.undelivered.get(worker.name, 0) + 1
            else:
                worker.dropped += 1
                self.dropped[worker.name] = worker.dropped
                if worker.dropped == 1:
                    _report_drop(worker.name, self.capacity)
        return ready

    def queue_flush(self) -> list[tuple[Worker, SimpleQueue[bool]]]:
        """Queue a flush marker behind what every queue holds now; return (worker, done)."""
        markers: list[tuple[Worker, SimpleQueue[bool]]] = [
            (worker, SimpleQueue()) for worker in self.workers
        ]
        for worker, done in markers:
            worker.control(FLUSH, done)
        return markers

    @staticmethod
    def wait_flushed(markers: list[tuple[Worker, SimpleQueue[bool]]],
                     timeout: float | None) -> dict[str, int]:
        """Wait up to ``timeout`` seconds in all (``None``: no limit) for the markers.

        Returns:
            backend name -> hook calls still queued or running, for each backend that did not
            get there in time (empty when every backend did).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        late: dict[str, int] = {}
        for worker, done in markers:
            flushed = False
            while not flushed and worker.alive:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                with contextlib.suppress(Empty):
                    flushed = done.get(timeout=0.5 if left is None else min(left, 0.5))
            if not flushed and done.empty():
                late[worker.name] = worker.pending() or 1
        return late

    def queue_stop(self) -> None:
        """Queue the end of every thread behind what its queue holds."""
        for worker in self.workers:
            worker.control(STOP)

    def wait_stopped(self, timeout: float | None) -> list[str]:
        """Wait up to ``timeout`` seconds (all backends drain at once, so it is each backend's
        limit) for every thread to end. A backend still busy then has its remaining calls
        counted in ``undelivered`` and is left to its daemon thread.

        Returns:
            the names of the backends whose thread ended (safe to flush and close).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        done = []
        for worker in self.workers:
            if worker.join(deadline):
                done.append(worker.name)
            else:
                worker.abandon()
                self.undelivered[worker.name] = (
                    self.undelivered.get(worker.name, 0) + worker.pending()
                )
        return done

    def forget(self) -> None:
        """In a forked child: no thread runs there; drop every queue (see ``Worker.forget``)."""
        for worker in self.workers:
            worker.forget()
        self._queues = [worker.items for worker in self.workers]


def _report_drop(name: str, capacity: int) -> None:
    """Warn once that backend ``name``'s queue was full and calls are being dropped."""
    message = (
        f"backend {name!r} is slower than the logging: its queue is full ({capacity} calls) "
        "and on_full='drop' drops the newest calls for it; Monitor.dropped counts them (the "
        "other backends still get every call). Raise queue_size, log less often, or use "
        "on_full='block'."
    )
    logger.warning(message)
    warnings.warn(message, BackendWarning, stacklevel=caller_level())


def _report_lost(counts: Mapping[str, int], why: str) -> None:
    """Report, per backend, calls that never reached it: a ``BackendWarning`` (pointing at the
    caller of ``Monitor.close``) and an error on the ``core_monitor`` logger."""
    for name, lost in counts.items():
        message = f"backend {name!r}: {lost} call(s) were not delivered: {why}"
        logger.error(message)
        warnings.warn(message, BackendWarning, stacklevel=caller_level())
