"""The thread channel: one worker thread and one bounded queue per backend (every backend's
channel with ``dispatch="thread"``, and that of a backend a writer process cannot import).

The models are the standard library's ``logging.handlers.QueueListener`` (a thread that drains
a queue into handlers) and OpenTelemetry's ``BatchSpanProcessor`` (a bounded queue, counted
drops, ``force_flush(timeout)``, ``shutdown``). The fan-out (``fanout.FanOut``) puts each call
into the queue of every thread channel; each backend's worker thread takes items in order and
calls that backend's hook. So:

* calls into one backend never overlap (only its worker calls it) and come in the order logged;
* a slow or hung backend holds up only its own queue: the caller waits only when that queue is
  full (``on_full="block"``), or the newest item is dropped and counted (``on_full="drop"``);
* the queue is a ``queue.SimpleQueue`` (C, no Python-level lock): the fan-out puts one item
  into every queue (and writes every writer's pipe) with no Python bytecode in between, so
  neither a signal handler (``KeyboardInterrupt``, SIGTERM) nor another thread runs between
  two queues: each item reaches all or none, and an interrupt never leaves a lock held.

A work item is the call itself, ``(hook, kwargs)``: the worker calls ``hooks[hook](**kwargs)``,
so any hook (``monitor_write`` with a ``Batch``, ``monitor_config``, one added later) rides the
same path. ``(FLUSH, SimpleQueue)`` makes the worker call ``monitor_flush``, then put ``True``
there; ``(STOP, None)`` ends the thread. Failures go to the failure policy (``policy.Policy``).

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
from queue import Empty, SimpleQueue
from typing import Any, ClassVar

from .backends import Backend
from .channel import FULL, GONE, ROOM, Channel
from .policy import Policy

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


class ThreadChannel(Channel):
    """One backend's queue and the thread that drains it.

    Args:
        backend: the started backend it calls.
        policy: whose failure policy applies (``Policy.failed_elsewhere``).
        capacity: items the queue holds (>= 1); ``make_room`` waits or drops beyond it.

    Attributes:
        name: the backend's name.
        backend: as given; ``hooks``: its hook functions.
        items: the queue, a ``queue.SimpleQueue`` (written in C: ``put`` takes no Python-level
            lock, so an interrupt on the caller's thread can never leave one held).
        busy: the item being processed, or ``None``.
    """

    kind: ClassVar[str] = "thread"

    def __init__(self, backend: Backend, policy: Policy, capacity: int) -> None:
        super().__init__(backend.name)
        self.backend = backend
        self.hooks = backend.hooks
        self.policy = policy
        self.capacity = capacity
        self.full = f"its queue is full ({capacity} calls)"
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

    def make_room(self, size: int, on_full: str) -> str:
        """``ROOM`` when the queue takes one more item now; else, with ``"drop"``, a grace of
        ``DROP_GRACE_SECONDS`` for a worker between polls (not stuck in a hook), then ``FULL``;
        with ``"block"``, wait while the thread lives (``GONE`` when it died); with
        ``"detach"`` (a backend with a budget), ``FULL`` at once."""
        room = self.items.qsize() < self.capacity
        if on_full == "detach":
            return ROOM if room else FULL
        if not room and on_full == "drop" and self.busy is None:
            # Idle between polls, not stuck in a hook: it drains within a poll.
            room = self.wait_for_room(time.monotonic() + DROP_GRACE_SECONDS)
        if room or (on_full == "block" and self.wait_for_room()):
            return ROOM
        return GONE if on_full == "block" else FULL

    def request_flush(self) -> SimpleQueue[bool]:
        """Queue a flush marker behind what the queue holds now; the worker puts ``True`` into
        the returned queue once flushed."""
        done: SimpleQueue[bool] = SimpleQueue()
        self.control(FLUSH, done)
        return done

    def wait_flushed(self, ticket: SimpleQueue[bool], deadline: float | None) -> bool:
        flushed = False
        while not flushed and self.alive:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            with contextlib.suppress(Empty):
                flushed = ticket.get(timeout=0.5 if left is None else min(left, 0.5))
        return flushed or not ticket.empty()

    def request_stop(self, reason: str | None) -> None:
        self.control(STOP)

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

    def pending(self, sent: int = 0) -> int:
        """Hook calls queued or in progress (control items not counted)."""
        busy = self.busy
        queued = self.items.qsize() - self._controls_pending()
        return max(0, queued) + (busy is not None and busy[0] not in (FLUSH, STOP))

    def abandon(self) -> None:
        """Give up on the thread (``close`` timed out): it drops what is still queued and ends
        after the call it is in, never calling the backend again."""
        self._abandoned = True

    def forget(self) -> None:
        """In a forked child: the thread does not exist there; drop every queued item (the
        fan-out takes the new, empty queue)."""
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


#: Seconds the fan-out's ``before_fork`` waits for the thread channels to write what is queued.
FORK_FLUSH_TIMEOUT = 10.0
