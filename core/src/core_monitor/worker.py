"""Background dispatch: one thread and one bounded queue per backend.

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
``(STOP, None)`` ends the thread. Failures go to the ``Dispatcher``'s policy.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # no import at run time: worker.py sits below dispatch.py
    from .dispatch import Backend, Dispatcher

#: Items each backend's queue holds by default (one item per ``log()`` call). At 10 scalars an
#: item is about 1 KB, so a full queue is about 10 MB per backend.
DEFAULT_QUEUE_SIZE = 10_000
#: What ``Monitor(on_full=...)`` accepts.
ON_FULL = ("block", "drop")
#: Seconds a worker sleeps between looks at an empty queue, while calls keep coming; at most
#: this much later than the call it is written (``flush`` and ``close`` wait for it).
POLL_SECONDS = 0.005
#: Empty looks (``POLL_SECONDS`` apart, 0.5 s in all) before a worker blocks until woken.
IDLE_POLLS = 100
#: Control items (the first element of a work item).
FLUSH = "flush"
STOP = "stop"

_thread_state = threading.local()


def in_worker() -> bool:
    """Whether the current thread is a backend's worker thread."""
    return getattr(_thread_state, "worker", False)


_put = SimpleQueue.put
_consume = deque(maxlen=0).extend  # runs an iterator to its end, in C


class Worker:
    """One backend's queue and the thread that drains it.

    Args:
        backend: the started backend it calls.
        dispatcher: whose failure policy applies (``Dispatcher.failed_in_worker``).
        capacity: items the queue holds (>= 1); ``Workers.send`` blocks or drops beyond it.

    Attributes:
        name: the backend's name.
        items: the queue, a ``queue.SimpleQueue`` (written in C: ``put`` takes no Python-level
            lock, so an interrupt on the caller's thread can never leave one held).
        dropped: items dropped because the queue was full (``on_full="drop"``).
        busy: the item being processed, or ``None``.
    """

    def __init__(self, backend: Backend, dispatcher: Dispatcher, capacity: int) -> None:
        self.backend = backend
        self.name = backend.name
        self.dispatcher = dispatcher
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
        interrupt here leaves nothing held. The queue stays nearly full meanwhile, so the
        thread never waits for the caller.
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
        failed = self.dispatcher.failed_in_worker
        name = self.name
        idle = 0
        while True:
            # Poll while calls keep coming: a put into a queue with a blocked reader wakes
            # that thread (a system call, microseconds on the caller's thread); a put into a
            # queue nobody waits on is a plain append. Block only after IDLE_POLLS empty polls.
            try:
                item = self.busy = get_nowait()
                idle = 0
            except Empty:
                idle += 1
                if idle <= IDLE_POLLS:
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
                    failed(name, kind, error)
                finally:
                    payload.put(True)
            else:
                function = hooks.get(kind)
                if function is not None:
                    try:
                        function(**payload)
                    except Exception as error:
                        failed(name, kind, error)
            self.busy = None


def fan_out(workers: Sequence[Worker], item: tuple[str, Any]) -> None:
    """Put ``item`` into every worker's queue in one C-level pass.

    ``deque.extend`` drives ``map(SimpleQueue.put, ...)`` without running Python bytecode, so
    no signal handler and no other thread runs between two puts: the item is in every queue or
    in none. Capacity is the caller's business (``Worker.wait_for_room``).
    """
    _consume(map(_put, [w.items for w in workers], repeat(item)))
