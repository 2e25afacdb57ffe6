"""``dispatch="thread"``: one worker thread and one bounded queue per backend.

The models are the standard library's ``logging.handlers.QueueListener`` (a thread that drains
a queue into handlers) and OpenTelemetry's ``BatchSpanProcessor`` (a bounded queue, counted
drops, ``force_flush(timeout)``, ``shutdown``). The caller's thread validates a call and puts
one work item into the queue of every backend; each backend's worker thread takes items in
order and calls that backend's hook. So:

* calls into one backend never overlap (only its worker calls it) and come in the order logged;
* a slow or hung backend holds up only its own queue: the caller waits only when that queue is
  full (``on_full="block"``), or the newest item is dropped and counted (``on_full="drop"``);
* the queue is a ``queue.SimpleQueue`` (C, no Python-level lock): ``fan_out`` puts one item
  into every queue with no Python bytecode in between, so neither a signal handler
  (``KeyboardInterrupt``, SIGTERM) nor another thread runs between two queues: each item
  reaches all or none, and an interrupt never leaves a lock held.

A work item is ``(hook, kwargs)``: the worker calls ``hooks[hook](**kwargs)``, so any hook
(``monitor_write`` with a ``Batch``, ``monitor_config``, one added later) rides the same path.
``(FLUSH, SimpleQueue)`` makes the worker call ``monitor_flush``, then put ``True`` there;
``(STOP, None)`` ends the thread. Failures go to the failure policy (``policy.Policy``).

A worker polls its queue every ``POLL_SECONDS`` while calls keep coming (a put into a queue
nobody waits on costs the caller no system call) and blocks after ``IDLE_SECONDS`` without
any. With ``on_full="drop"`` a full queue whose worker is not inside a hook (it is between
polls) gets ``DROP_GRACE_SECONDS`` to drain before the call is dropped: a backend that keeps up
never drops. The caller's side never takes a lock the worker takes (no ``threading.Event``
either): an interrupt there can leave nothing held.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from queue import Empty, SimpleQueue
from typing import Any

from ..errors import FlushTimeout
from .backends import Backend
from .policy import Policy
from .strategy import BackendSpec
from .sync import SyncDispatch
from .warn import report_drop, report_lost

#: Items each backend's queue holds by default (one item per ``log()`` call). At 10 scalars an
#: item is about 1 KB, so a full queue is about 10 MB per backend.
DEFAULT_QUEUE_SIZE = 10_000
#: Seconds a worker sleeps between looks at an empty queue while calls keep coming; at most
#: this much later than the call it is written (``flush`` and ``close`` wait for it).
POLL_SECONDS = 0.005
#: Seconds without a call before a worker blocks until an item arrives.
IDLE_SECONDS = 0.5
#: Seconds a full queue gets to drain, with ``on_full="drop"``, when its worker is idle.
DROP_GRACE_SECONDS = 0.05
#: Control items (the first element of a work item).
FLUSH = "flush"
STOP = "stop"

_thread_state = threading.local()


def in_worker() -> bool:
    """Whether the current thread is a backend's worker thread."""
    return getattr(_thread_state, "worker", False)


_put = SimpleQueue.put
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # an iterator's end, in C


class Worker:
    """One backend's queue and the thread that drains it.

    Args:
        backend: the started backend it calls.
        policy: whose failure policy applies (``Policy.failed_elsewhere``).
        capacity: items the queue holds (>= 1); ``ThreadDispatch.send`` blocks or drops
            beyond it.

    Attributes:
        name: the backend's name.
        items: the queue, a ``queue.SimpleQueue`` (written in C: ``put`` takes no Python-level
            lock, so an interrupt on the caller's thread can never leave one held).
        dropped: items dropped because the queue was full (``on_full="drop"``).
        busy: the item being processed, or ``None``.
    """

    def __init__(self, backend: Backend, policy: Policy, capacity: int) -> None:
        self.backend = backend
        self.name = backend.name
        self.policy = policy
        self.capacity = capacity
        self.dropped = 0
        self._reset()
        self._thread = threading.Thread(
            target=self._run, name=f"core_monitor:{self.name}", daemon=True
        )
        self._thread.start()

    def _reset(self) -> None:
        self.items: SimpleQueue[tuple[str, Any]] = SimpleQueue()
        self.busy: tuple[str, Any] | None = None
        self._controls_put = 0  # control items queued (caller's side) ...
        self._controls_taken = 0  # ... and taken (the thread's side)
        self._abandoned = False

    # Caller's side -------------------------------------------------------------------------

    def wait_for_room(self, deadline: float | None = None) -> bool:
        """Block until the queue holds fewer than ``capacity`` items; ``False`` at ``deadline``
        (a ``time.monotonic()`` value) or when the thread died.

        Polls (0.5 ms, doubling up to 10 ms): no lock is shared with the thread, so an
        interrupt here leaves nothing held.
        """
        pause = 0.0005
        while self.items.qsize() - self._controls_pending() >= self.capacity:
            if not self._thread.is_alive():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        return True

    def control(self, kind: str, payload: Any = None) -> None:
        """Queue a control item (``FLUSH``/``STOP``), past the capacity."""
        self._controls_put += 1
        self.items.put((kind, payload))

    def join(self, deadline: float | None) -> bool:
        """Wait for the thread to end; ``False`` if it still runs at ``deadline``."""
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread.is_alive()

    def _controls_pending(self) -> int:
        return self._controls_put - self._controls_taken

    def pending(self) -> int:
        """Hook calls queued or in progress (control items not counted)."""
        busy = self.busy
        queued = self.items.qsize() - self._controls_pending()
        return max(0, queued) + (busy is not None and busy[0] not in (FLUSH, STOP))

    def abandon(self) -> None:
        """Give up on the thread (``close`` timed out): it drops what is still queued and ends
        after the call it is in, never calling the backend again."""
        self._abandoned = True

    def forget(self) -> None:
        """In a forked child: the thread does not exist there; drop every queued item."""
        self._reset()
        self._abandoned = True

    # The thread --------------------------------------------------------------------------

    def _run(self) -> None:
        _thread_state.worker = True
        get, get_nowait = self.items.get, self.items.get_nowait
        hooks = self.backend.hooks
        failed = self.policy.failed_elsewhere
        name, where = self.name, "on its thread"
        idle_since = None
        while True:
            # Poll while calls keep coming: a put into a queue with a blocked reader wakes
            # that thread (a system call on the caller's thread); a put into a queue nobody
            # waits on is a plain append. Block only after IDLE_SECONDS without an item.
            try:
                item = self.busy = get_nowait()
                idle_since = None
            except Empty:
                now = time.monotonic()
                if idle_since is None:
                    idle_since = now
                if now - idle_since < IDLE_SECONDS:
                    time.sleep(POLL_SECONDS)
                    continue
                item = self.busy = get()
            if self._abandoned:
                return
            kind, payload = item
            if kind is STOP:
                self._controls_taken += 1
                self.busy = None
                return
            if kind is FLUSH:
                self._controls_taken += 1
                kind = "monitor_flush"
                function = hooks.get(kind)
                try:
                    if function is not None:
                        function()
                except Exception as error:
                    failed(name, kind, error, where)
                finally:
                    payload.put(True)
            else:
                function = hooks.get(kind)
                if function is not None:
                    try:
                        function(**payload)
                    except Exception as error:
                        failed(name, kind, error, where)
            self.busy = None


def fan_out(queues: Sequence[SimpleQueue[tuple[str, Any]]], item: tuple[str, Any]) -> None:
    """Put ``item`` into every queue of ``queues`` in one C-level pass.

    ``deque.extend`` drives ``map(SimpleQueue.put, ...)`` without running Python bytecode, so
    no signal handler and no other thread runs between two puts: the item is in every queue or
    in none. Capacity is the caller's business (``ThreadDispatch.queues_with_room``).
    """
    _consume(map(_put, queues, repeat(item)))


class ThreadDispatch(SyncDispatch):
    """Backends constructed in this process, each called by a worker thread of its own.

    The caller holds the monitor's lock around ``send``, ``flush`` (the part that queues) and
    ``stop``, so items reach every queue in the order their steps were assigned. With
    ``on_full="block"`` a full queue makes ``send`` wait; with ``"drop"`` the item is dropped
    for that backend, counted in ``dropped`` and warned about once per backend.

    Attributes:
        workers: one per started backend, in start order.
    """

    mode = "thread"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.workers: list[Worker] = []
        self._queues: list[SimpleQueue[tuple[str, Any]]] = []

    def start(self, specs: Sequence[BackendSpec], run: Any) -> None:
        super().start(specs, run)
        self.workers = [Worker(b, self.policy, self.capacity) for b in self.backends]
        self._queues = [worker.items for worker in self.workers]

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Queue ``hooks[hook](**kwargs)`` for every backend (all or none of them, see
        ``fan_out``); block or drop for a full queue as ``on_full`` says."""
        fan_out(self.queues_with_room(), (hook, kwargs))

    def queues_with_room(self) -> list[SimpleQueue[tuple[str, Any]]]:
        """The queues that take one more item now (``_with_room``): what ``send`` puts into,
        and what a process dispatch with some backends in threads puts into in the same
        C-level pass as its pipe writes."""
        if max(map(SimpleQueue.qsize, self._queues), default=0) < self.capacity:
            return self._queues
        return [worker.items for worker in self._with_room()]

    def _with_room(self) -> list[Worker]:
        """The workers that take one more item now, after waiting (``"block"``) or dropping
        (``"drop"``) for the full ones. A worker whose thread died gets nothing (counted)."""
        ready = []
        for worker in self.workers:
            room = worker.items.qsize() < self.capacity
            if not room and self.on_full == "drop" and worker.busy is None:
                # Idle between polls, not stuck in a hook: it drains within a poll.
                room = worker.wait_for_room(time.monotonic() + DROP_GRACE_SECONDS)
            if room or (self.on_full == "block" and worker.wait_for_room()):
                ready.append(worker)
            elif self.on_full == "block":  # the thread is gone: nothing will drain the queue
                self.undelivered[worker.name] = self.undelivered.get(worker.name, 0) + 1
            else:
                worker.dropped += 1
                self.dropped[worker.name] = worker.dropped
                if worker.dropped == 1:
                    report_drop(worker.name, f"its queue is full ({self.capacity} calls)")
        return ready

    def flush(self, lock: Any, timeout: float | None) -> None:
        with lock:
            markers = self._queue_flush()
        late = self._wait_flushed(markers, timeout)
        self.policy.deliver()
        if late:
            raise FlushTimeout(late, timeout)

    def _queue_flush(self) -> list[tuple[Worker, SimpleQueue[bool]]]:
        """Queue a flush marker behind what every queue holds now; return (worker, done)."""
        markers: list[tuple[Worker, SimpleQueue[bool]]] = [
            (worker, SimpleQueue()) for worker in self.workers
        ]
        for worker, done in markers:
            worker.control(FLUSH, done)
        return markers

    @staticmethod
    def _wait_flushed(markers: list[tuple[Worker, SimpleQueue[bool]]],
                      timeout: float | None) -> dict[str, int]:
        """Wait up to ``timeout`` seconds in all (``None``: no limit) for the markers; return
        backend name -> calls still queued or running, for each backend that was late."""
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

    def stop(self) -> None:
        for worker in self.workers:
            worker.control(STOP)

    def close(self, timeout: float | None, only: Sequence[str] | None = None, *,
              report: bool = True) -> None:
        """Let every queue drain (``timeout`` seconds per backend, at the same time), report
        what was dropped or not delivered (unless ``report`` is false: the caller does), then
        flush and close the backends whose worker ended, in reverse start order. A backend
        still busy then is left to its daemon thread, its remaining calls counted in
        ``undelivered``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stuck = set()
        for worker in self.workers:
            if not worker.join(deadline):
                stuck.add(worker.name)
                worker.abandon()
                self.undelivered[worker.name] = (
                    self.undelivered.get(worker.name, 0) + worker.pending()
                )
        if self.undelivered and report:
            report_lost(self.undelivered, f"still queued when close(timeout={timeout}) gave "
                        "up; the backend is not closed")
        if self.dropped and report:
            report_lost(self.dropped, "dropped, its queue was full (on_full='drop')")
        super().close(timeout, [b.name for b in self.backends if b.name not in stuck],
                      report=report)

    def before_fork(self) -> None:
        """Have every backend write and flush what its queue holds, within
        ``FORK_FLUSH_TIMEOUT`` seconds (not from a worker thread: it cannot wait for itself)."""
        if not in_worker():
            self._wait_flushed(self._queue_flush(), FORK_FLUSH_TIMEOUT)

    def forget(self) -> None:
        for worker in self.workers:
            worker.forget()
        self._queues = [worker.items for worker in self.workers]


#: Seconds ``before_fork`` waits for the backends to write what is queued.
FORK_FLUSH_TIMEOUT = 10.0
