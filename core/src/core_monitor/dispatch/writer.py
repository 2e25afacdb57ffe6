"""A backend's writer process: ``python -m core_monitor.dispatch.writer DATA REPLY BUSY``.

Started by ``core_monitor.dispatch.processes`` (a fresh interpreter, never ``multiprocessing``,
which would import the user's ``__main__`` again), one per backend. It reads frames
(``core_monitor.dispatch.wire``) from the pipe ``DATA``: first the start frame (the backend's
class by module path, the ``RunInfo``, the options), then one frame per hook call, in the
order logged. It answers on the pipe ``REPLY``: ready or the start failure, each hook failure,
each warning, each flush done. ``BUSY`` is a small shared memory: a flag set while a hook
runs, and the count of calls handled.

The training process's death is noticed by end of input (every copy of the pipe's write end is
closed) and by its parent process id changing. Then the writer writes what is left in the pipe,
flushes, calls the backend's ``monitor_crash`` hook, closes it and exits, within
``DRAIN_SECONDS`` (a watchdog ends it then). It ignores SIGINT (a Ctrl-C in the terminal is the
training process's business) and runs in a session of its own, so signals sent to the training
job's process group do not cut a drain short; after start-up it lowers its CPU priority (and
that of the processes its SDK started) by ``NICE``.

Reading: the pipe is read without blocking, every ``POLL_SECONDS`` while calls keep coming
(a write into a pipe nobody waits on costs the training process no wake-up), at once again
after a read of ``BUSY_BYTES`` or more, and blocking (with a look at the parent every second)
after ``IDLE_SECONDS`` without any call.
"""

from __future__ import annotations

import contextlib
import importlib
import mmap
import os
import select
import signal
import sys
import threading
import time
import warnings
from typing import Any

from .. import shutdown
from ..events import Batch
from ..media import MediaRoutes
from ..resume import backend_state
from . import wire
from .backends import Backend, new_manager, start_backend
from .wire import HANDLED, SHARED_BYTES

#: Seconds between non-blocking reads while calls keep coming.
POLL_SECONDS = 0.02
#: A read at least this large is followed by another one at once (the trainer is bursting).
BUSY_BYTES = 64 * 1024
#: Seconds without a call before the writer blocks on the pipe.
IDLE_SECONDS = 0.5
#: Bytes read at most at once.
READ_BYTES = 1 << 20
#: Seconds a writer takes at most, once the training process died, to write what is left,
#: flush and close (the watchdog then ends it): the limit of ``shutdown.EXIT_TIMEOUT``.
DRAIN_SECONDS = shutdown.EXIT_TIMEOUT
#: How much lower than the training process a writer runs (``os.nice``).
NICE = 10



class Writer:
    """The writer's state: the pipes, the backend, the frame reader."""

    def __init__(self, data_fd: int, reply_fd: int, busy_fd: int) -> None:
        self.data_fd = data_fd
        self.reply_fd = reply_fd
        self.busy = mmap.mmap(busy_fd, SHARED_BYTES) if busy_fd >= 0 else None
        self.frames = wire.Frames()
        self.backend: Backend | None = None
        self.handled = 0  # hook calls handled (replied with flushes, for the undelivered count)
        self.parent = os.getppid()
        self.replies_broken = False

    # Replies -----------------------------------------------------------------------------

    def reply(self, *message: Any) -> None:
        """Send ``message`` to the training process; silently nothing once it is gone."""
        if self.replies_broken:
            return
        frame = memoryview(wire.encode(message))
        try:
            while frame:
                frame = frame[os.write(self.reply_fd, frame):]
        except OSError:
            self.replies_broken = True

    def forward_warning(self, message: Warning | str, category: type[Warning], filename: str,
                        lineno: int, file: Any = None, line: str | None = None) -> None:
        """``warnings.showwarning`` in the writer: the training process issues it."""
        self.reply("warning", *wire.warning_parts(message, category))

    # Start -------------------------------------------------------------------------------

    def read_message(self) -> Any:
        """Block until one whole frame arrived; ``None`` at end of input."""
        while True:
            for message in self.frames:
                return message
            chunk = os.read(self.data_fd, READ_BYTES)
            if not chunk:
                return None
            self.frames.feed(chunk)

    def start(self) -> bool:
        """Construct the backend from the start frame; reply ready or the failure."""
        message = self.read_message()
        if message is None:
            return False
        _, module, qualname, name, run, options = message
        try:
            cls: Any = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            backend = start_backend(new_manager(), name, cls, run, options)
            MediaRoutes().add(name, getattr(cls, "media_kinds", ()), backend.hooks)
        except BaseException as error:
            self.reply("start_failed", wire.exception_parts(error))
            return False
        self.backend = backend
        self.reply("ready", {"state": backend_state(backend.instance)})
        return True

    # The loop ----------------------------------------------------------------------------

    def run(self) -> str | None:
        """Handle frames until the stop frame (returns ``None``) or the training process's
        death (returns what was seen)."""
        os.set_blocking(self.data_fd, False)
        active = time.monotonic()
        while True:
            try:
                chunk = os.read(self.data_fd, READ_BYTES)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                return self.death("its end of the pipe closed")
            if chunk:
                self.frames.feed(chunk)
                if self.handle_all():
                    return None
                active = time.monotonic()
                if len(chunk) >= BUSY_BYTES:
                    continue
            if os.getppid() != self.parent:
                return self.death("it is no longer this writer's parent")
            if time.monotonic() - active < IDLE_SECONDS:
                time.sleep(POLL_SECONDS)
            else:
                select.select([self.data_fd], [], [], 1.0)

    def death(self, seen: str) -> str:
        """The training process is gone: take what is left in the pipe (all of it, however
        long it takes, within the watchdog's ``DRAIN_SECONDS``)."""
        threading.Thread(target=_watchdog, daemon=True).start()
        os.set_blocking(self.data_fd, False)
        while True:
            try:
                chunk = os.read(self.data_fd, READ_BYTES)
            except BlockingIOError:
                break  # a forked copy of the write end may live on: what is there is all
            if not chunk:
                break
            self.frames.feed(chunk)
        if self.handle_all():
            return ""  # it had asked to stop after all
        return (f"the training process (pid {self.parent}) ended without closing the "
                f"monitor ({seen})")

    def handle_all(self) -> bool:
        """Handle every complete frame held; ``True`` at the stop frame."""
        for hook, kwargs in self.frames:
            if hook == "stop":
                return True
            if hook == "flush":
                self.call("monitor_flush", {})
                self.reply("flushed", kwargs["marker"], self.handled)
                continue
            self.handled += 1
            if hook == wire.WRITE_ROWS:
                hook, kwargs = "monitor_write", {"events": Batch(kwargs)}
            self.call(hook, kwargs)
        return False

    def call(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Call the backend's ``hook``; a failure is replied, never raised."""
        assert self.backend is not None
        function = self.backend.hooks.get(hook)
        if function is None:
            return
        busy = self.busy
        if busy is not None:
            busy[0] = 1
        try:
            function(**kwargs)
        except Exception as error:
            self.reply("failed", hook, wire.exception_parts(error))
        finally:
            if busy is not None:
                busy[0] = 0
                HANDLED.pack_into(busy, 8, self.handled)

    def finish(self, crash: str | None) -> None:
        """Flush, report a crash (``monitor_crash``), close; reply closed."""
        self.call("monitor_flush", {})
        if crash:
            self.call("monitor_crash", {"reason": crash})
        self.call("monitor_close", {})
        self.reply("closed", self.handled)


def _watchdog() -> None:
    time.sleep(DRAIN_SECONDS)
    os._exit(3)


def lower_priority() -> None:
    """Run this process, and the processes its SDK started, ``NICE`` lower (Linux lists
    children in ``/proc``; elsewhere only this process)."""
    try:
        os.nice(NICE)
    except (AttributeError, OSError):
        return
    level = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as children:
                pids = [int(pid) for pid in children.read().split()]
        except OSError:
            continue
        for pid in pids:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, max(level, os.getpriority(
                    os.PRIO_PROCESS, pid)))


def main(argv: list[str]) -> int:
    """Run one writer (module docstring); the exit status is 0 unless the start failed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data_fd, reply_fd, busy_fd = (int(arg) for arg in argv[:3])
    writer = Writer(data_fd, reply_fd, busy_fd)
    warnings.showwarning = writer.forward_warning
    if not writer.start():
        return 1
    lower_priority()
    crash = writer.run()
    writer.finish(crash)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
