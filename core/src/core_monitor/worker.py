"""Background dispatch: one thread and one bounded queue per backend.

The models are the standard library's ``logging.handlers.QueueListener`` (a thread that drains
a queue into handlers) and OpenTelemetry's ``BatchSpanProcessor`` (a bounded queue, counted
drops, ``force_flush(timeout)``, ``shutdown``). The caller's thread validates a call and puts
one work item into the queue of every backend; each backend's worker thread takes items in
order and calls that backend's hook. So:

* calls into one backend never overlap (only its worker calls it) and come in the order logged;
* a slow or hung backend holds up only its own queue: the caller waits only when that queue is
  full (``on_full="block"``), or the newest item is dropped and counted (``on_full="drop"``);
* the queue is a ``collections.deque`` appended to in C: ``fan_out`` puts one item into every
  queue with no Python bytecode in between, so neither a signal handler (``KeyboardInterrupt``,
  SIGTERM) nor another thread can run between two queues: each item reaches all or none.

A work item is ``(hook, kwargs)``: the worker calls ``hooks[hook](**kwargs)``, so any hook
(``monitor_write`` with a ``Batch``, ``monitor_config``, one added later) rides the same path.
``(FLUSH, threading.Event)`` makes the worker call ``monitor_flush`` then set the event;
``(STOP, None)`` ends the thread. Failures go to the ``Dispatcher``'s policy.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dispatch import Backend, Dispatcher

#: Items each backend's queue holds by default (one item per ``log()`` call). At 10 scalars an
#: item is about 1 KB, so a full queue is about 10 MB per backend.
DEFAULT_QUEUE_SIZE = 10_000
#: What ``Monitor(on_full=...)`` accepts.
ON_FULL = ("block", "drop")
#: Control items (the first element of a work item).
FLUSH = "flush"
STOP = "stop"
#: Seconds a worker sleeps without work before looking at its queue again (a safety net: a
#: put always wakes it).
IDLE_WAIT = 1.0

_append = deque.append
_consume = deque(maxlen=0).extend  # runs an iterator to its end, in C


class Worker:
    """One backend's queue and the thread that drains it.

    Args:
        backend: the started backend it calls.
        dispatcher: whose failure policy applies (``Dispatcher.failed``).
        capacity: items the queue holds (>= 1); ``put`` blocks or drops beyond it.

    Attributes:
        name: the backend's name.
        items: the queue (``collections.deque``), oldest first.
        dropped: items dropped because the queue was full (``on_full="drop"``).
        busy: the item being processed, or ``None``.
    """

    def __init__(self, backend: Backend, dispatcher: Dispatcher, capacity: int) -> None:
        self.backend = backend
        self.name = backend.name
        self.dispatcher = dispatcher
        self.capacity = capacity
        self.items: deque[tuple[str, Any]] = deque()
        self.dropped = 0
        self.busy: tuple[str, Any] | None = None
        self.sleeping = False
        self._abandoned = False
        self._waiting = 0  # callers waiting for room
        self._wake = threading.Event()
        self._room = threading.Condition(threading.Lock())
        self._thread = threading.Thread(
            target=self._run, name=f"core_monitor:{self.name}", daemon=True
        )
        self._thread.start()

    # Caller's side -------------------------------------------------------------------------

    def wake(self) -> None:
        """Wake the thread if it sleeps (called after every put)."""
        if self.sleeping:
            self._wake.set()

    def wait_for_room(self, deadline: float | None = None) -> bool:
        """Block until the queue holds fewer than ``capacity`` items; ``False`` at ``deadline``
        (a ``time.monotonic()`` value) or when the thread died."""
        with self._room:
            self._waiting += 1
            try:
                while len(self.items) >= self.capacity:
                    if not self._thread.is_alive():
                        return False
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._room.wait(0.1 if left is None else min(left, 0.1))
            finally:
                self._waiting -= 1
        return True

    def control(self, kind: str, payload: Any = None) -> None:
        """Queue a control item (``FLUSH``/``STOP``) past the capacity and wake the thread."""
        self.items.append((kind, payload))
        self._wake.set()

    def join(self, deadline: float | None) -> bool:
        """Wait for the thread to end; ``False`` if it still runs at ``deadline``."""
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread.is_alive()

    def pending(self) -> int:
        """Hook calls queued or in progress (control items not counted)."""
        busy = self.busy
        queued = sum(1 for kind, _ in list(self.items) if kind not in (FLUSH, STOP))
        return queued + (busy is not None and busy[0] not in (FLUSH, STOP))

    def abandon(self) -> None:
        """Give up on the thread (``close`` timed out): it drops what is still queued and ends
        after the call it is in, never calling the backend again."""
        self._abandoned = True
        self._wake.set()

    def forget(self) -> None:
        """In a forked child: the thread does not exist there; drop every queued item and
        replace the locks (another thread of the parent may have held them at the fork)."""
        self.items = deque()
        self.busy = None
        self.sleeping = False
        self._waiting = 0
        self._wake = threading.Event()
        self._room = threading.Condition(threading.Lock())

    # The thread --------------------------------------------------------------------------

    def _run(self) -> None:
        items = self.items
        hooks = self.backend.hooks
        failed = self.dispatcher.failed_in_worker
        name = self.name
        while True:
            while items:
                if self._abandoned:
                    return
                item = self.busy = items.popleft()
                kind, payload = item
                if self._waiting:
                    with self._room:
                        self._room.notify_all()
                if kind is STOP:
                    self.busy = None
                    return
                if kind is FLUSH:
                    kind = "monitor_flush"
                    function = hooks.get(kind)
                    try:
                        if function is not None:
                            function()
                    except Exception as error:
                        failed(name, kind, error)
                    finally:
                        payload.set()
                else:
                    function = hooks.get(kind)
                    if function is not None:
                        try:
                            function(**payload)
                        except Exception as error:
                            failed(name, kind, error)
                self.busy = None
            self.sleeping = True
            if not items:  # set sleeping first: a put after this check sees it and wakes us
                self._wake.wait(IDLE_WAIT)
            self.sleeping = False
            self._wake.clear()


def fan_out(workers: Sequence[Worker], item: tuple[str, Any]) -> None:
    """Append ``item`` to every worker's queue in one C-level pass, then wake the workers.

    ``deque.extend`` drives ``map(deque.append, ...)`` without running Python bytecode, so no
    signal handler and no other thread runs between two appends: the item is in every queue or
    in none. Capacity is the caller's business (``Worker.wait_for_room``).
    """
    _consume(map(_append, [w.items for w in workers], repeat(item)))
    for worker in workers:
        if worker.sleeping:
            worker._wake.set()


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
        self.dropped: dict[str, int] = {}
        self.undelivered: dict[str, int] = {}

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Queue ``hooks[hook](**kwargs)`` for every backend (all or none of them, see
        ``fan_out``); block or drop for a full queue as ``on_full`` says."""
        item = (hook, kwargs)
        if max(map(len, self._queues), default=0) < self.capacity:
            fan_out(self.workers, item)
        else:
            fan_out(self._with_room(), item)

    def _with_room(self) -> list[Worker]:
        """The workers that take one more item now, after waiting (``"block"``) or dropping
        (``"drop"``) for the full ones. A worker whose thread died gets nothing (counted)."""
        ready = []
        for worker in self.workers:
            if len(worker.items) < self.capacity:
                ready.append(worker)
            elif self.on_full == "block" and worker.wait_for_room():
                ready.append(worker)
            elif self.on_full == "block":  # the thread is gone: nothing will drain the queue
                self.undelivered[worker.name] = self.undelivered.get(worker.name, 0) + 1
            else:
                worker.dropped += 1
                self.dropped[worker.name] = worker.dropped
                if worker.dropped == 1:
                    self.dispatcher.report_drop(worker.name, self.capacity)
        return ready

    def queue_flush(self) -> list[tuple[Worker, threading.Event]]:
        """Queue a flush marker behind what every queue holds now; return (worker, done)."""
        markers = [(worker, threading.Event()) for worker in self.workers]
        for worker, done in markers:
            worker.control(FLUSH, done)
        return markers

    @staticmethod
    def wait_flushed(markers: list[tuple[Worker, threading.Event]],
                     timeout: float | None) -> dict[str, int]:
        """Wait up to ``timeout`` seconds in all (``None``: no limit) for the markers.

        Returns:
            backend name -> hook calls still queued or running, for each backend that did not
            get there in time (empty when every backend did).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        late: dict[str, int] = {}
        for worker, done in markers:
            while not done.is_set() and worker.alive:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                done.wait(0.5 if left is None else min(left, 0.5))
            if not done.is_set():
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
