"""A backend's writer process: ``python -m core_monitor.dispatch.writer DATA CONTROL REPLY
SHARED``.

Started by ``core_monitor.dispatch.processes`` (a fresh interpreter, never ``multiprocessing``,
which would import the user's ``__main__`` again), one per backend. It reads frames
(``core_monitor.dispatch.wire``) from the pipe ``DATA``: first the start frame (the backend's
class by module path, the ``RunInfo``, the options), then one frame per hook call, in the
order logged; a call too large for one atomic pipe write arrives as a small frame naming a
spool file (``wire.SPOOL``), which the writer reads and removes (its own hard link of it) when
it comes to that call; a writer whose training process died also removes the spool folder
once it is empty (the last writer to finish does). Flush and stop requests arrive on the pipe
``CONTROL``, so they never wait behind data in a full ``DATA`` pipe. It answers on the pipe
``REPLY``: ready or the start failure, each hook failure, each warning, each flush done.
``SHARED`` is a small shared memory (``wire.SHARED_BYTES``): whether a hook runs and since
when, the calls handled, the bytes read from ``DATA`` and from spool files.

Two threads:

* the reader reads ``DATA`` in batches (OpenTelemetry's batch processor): once bytes arrive
  (blocking in ``select``, no polling) it lets more gather for ``SCHEDULE_DELAY`` seconds, and
  reads at once when the pipe holds ``HIGH_WATER`` of its size or a flush or stop request or
  SIGTERM comes, into an in-memory inbox of at most one pipe's worth and a page, so the writer
  wakes once per batch, not once per call, and a backend's drain rate is bounded by the
  backend; it reads ``CONTROL`` and places a flush or stop request in the inbox after every
  byte ``DATA`` held when the request was read (what was logged before the request); and it
  watches the training process (its parent) and SIGTERM;
* the main thread constructs the backend, then takes the inbox in order and calls the hooks.

How it ends:

* a stop request: everything logged before it is written, then flush and close (with
  ``monitor_crash`` first when the request carries a reason: the training process is closing
  on SIGTERM);
* the training process's death (end of ``DATA``, or the parent process id changing): what is
  left is written, then flush, ``monitor_crash`` (the reason), close;
* SIGTERM (a scheduler's preemption signals every process of the job): the writer keeps
  serving the training process, which is closing its monitor on the same signal; if no stop
  request came within ``TERM_SECONDS``, it writes what the pipe holds and ends as after a
  death, the reason naming SIGTERM. SIGTERM is blocked on the main thread, hence in every
  thread and process the SDK starts (wandb's service is a Go program, which unblocks it: it
  dies of a job-wide SIGTERM with what it had not written, and the wandb backend continues its
  run in a new service).

The reader thread ends the process (``os._exit(3)``) ``DRAIN_SECONDS`` after a death or SIGTERM
was seen, even when the main thread is stuck inside a hook, but never while it makes progress
(``wire.Progress``: its count of calls handled moved within ``wire.PROGRESS_SECONDS``, or a
closing hook has run for less than ``wire.CLOSE_HOOK_SECONDS``); seen while the backend was still
starting, ``DRAIN_SECONDS`` after the start ended (a start gets ``START_SECONDS`` more). The
writer ignores SIGINT (a Ctrl-C in the terminal is the training process's business), runs in a
session of its own, writes its output to pipes of its own (forwarded by the training process),
and after start-up lowers its CPU priority (and that of the processes its SDK started) by
``NICE``.
"""

from __future__ import annotations

import contextlib
import importlib
import mmap
import os
import select
import signal
import struct
import sys
import threading
import time
import warnings
from collections import deque
from typing import Any

from ..events import Batch
from ..journal import CLOSE, START, calls, hold, write_cursor
from ..media import MediaRoutes
from ..resume import backend_state
from . import wire
from .backends import Backend, flush_confirms, new_manager, start_backend
from .wire import (
    BUSY_SINCE,
    DRAIN_SECONDS,
    FINISHING_AT,
    HANDLED,
    READ_BYTES_AT,
    SHARED_BYTES,
    SPOOL_READ,
    SPOOL_READ_AT,
    START_SECONDS,
)

#: Bytes read at most at once.
READ_BYTES = 1 << 20
#: Seconds the reader lets calls gather in the data pipe before it reads them, when the
#: training process logs faster than that (OpenTelemetry's ``BatchSpanProcessor``: a schedule
#: delay): the writer then wakes once per batch, not once per call, so its CPU does not compete
#: with the trainer call by call. It reads at once when the pipe holds ``HIGH_WATER`` of its
#: size (the size trigger), or when a flush or stop request or SIGTERM comes (the end of the
#: pipe is seen at most this late).
SCHEDULE_DELAY = 0.02
#: The part of the data pipe's size that, once waiting in it, is read at once (looked at every
#: ``SCHEDULE_SLICE`` seconds of the delay).
HIGH_WATER = 0.5
#: Seconds between two looks at the bytes waiting in the pipe during ``SCHEDULE_DELAY``.
SCHEDULE_SLICE = 0.005
#: The smallest data pipe (bytes) whose reads are delayed: a smaller one (a small
#: ``queue_size``) holds a few calls only, and a writer reading it late would make the training
#: process wait for room, or drop calls with ``on_full="drop"``; it is read at once.
BATCH_MIN_PIPE = 64 * 1024
#: Seconds after SIGTERM that the writer waits for the training process's stop request before
#: it ends by itself (the training process closes its monitor on the same signal).
TERM_SECONDS = 5.0
#: Seconds between the reader thread's looks at the parent process and the clock.
WATCH_SECONDS = 0.25
#: How much lower than the training process a writer runs (``os.nice``).
NICE = 10
#: What the reader writes into its own wake-up pipe (a signal writes its number).
_WAKE = b"\0"


class Inbox:
    """What the reader thread hands the main thread, in order: ``("data", bytes)``,
    ``("control", message)`` and ``("end", reason)`` items, at most ``limit`` data bytes."""

    def __init__(self, limit: int) -> None:
        self.items: deque[tuple[str, Any]] = deque()
        self.bytes = 0
        self.limit = limit
        self.changed = threading.Condition()

    def put(self, kind: str, value: Any) -> None:
        with self.changed:
            self.items.append((kind, value))
            if kind == "data":
                self.bytes += len(value)
            self.changed.notify_all()

    def full(self) -> bool:
        return self.bytes >= self.limit

    def take(self, timeout: float) -> list[tuple[str, Any]]:
        """Everything held, waiting up to ``timeout`` seconds for something."""
        with self.changed:
            if not self.items:
                self.changed.wait(timeout)
            taken = list(self.items)
            self.items.clear()
            self.bytes = 0
            return taken


class Writer:
    """The writer's state: the pipes, the backend, the inbox."""

    def __init__(self, data_fd: int, control_fd: int, reply_fd: int, shared_fd: int,
                 parent: int | None = None) -> None:
        self.data_fd = data_fd
        self.control_fd = control_fd
        self.reply_fd = reply_fd
        self.shared = mmap.mmap(shared_fd, SHARED_BYTES) if shared_fd >= 0 else None
        self.frames = wire.Frames()
        self.backend: Backend | None = None
        self.flush_confirms = True  # backends.flush_confirms of the backend's class
        self.handled = 0  # hook calls handled (the undelivered count of a killed writer)
        self.read_bytes = 0
        # The training process, as it named itself: it may have died (and this writer been
        # re-parented) before this line runs, writers starting behind Monitor().
        self.parent = os.getppid() if parent is None else parent
        self.replies_broken = False
        self.reply_lock = threading.Lock()
        # A pipe's worth, and a page: the training process writes a call once the pipe has a
        # free page (what poll tells it: a call is written into every pipe or none), so the
        # last page of a full pipe may stay part empty; the inbox takes that part instead.
        self.inbox = Inbox(_pipe_size(data_fd) + mmap.PAGESIZE)
        #: Bytes waiting in the data pipe that are read at once (``HIGH_WATER``).
        self.high_water = int(_pipe_size(data_fd) * HIGH_WATER)
        #: Whether reads are delayed to gather calls (``BATCH_MIN_PIPE``).
        self.batching = _pipe_size(data_fd) >= BATCH_MIN_PIPE
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        #: Why the writer ends without a stop request (set by the reader thread), if it does.
        self.ending: str | None = None
        self.deadline: float | None = None  # when the reader thread ends the process
        self.backlog: list[tuple[str, Any]] = []  # inbox items that came with the start frame
        self.started = False  # the start ended (ready or failed): the drain limit applies
        self.spool = ""  # the training process's spool folder (the start frame names it)
        self.index = 0  # this writer's place in start order: the suffix of its spool links
        self.spool_read = 0  # bytes of spool files read (wire.SPOOL_READ_AT)
        self.orphaned = False  # the training process died: nobody else removes the spool
        # The run's journal (``core_monitor.journal``): this writer moves its backend's
        # cursor to ``base`` + the calls handled, after a flush or close that raised nothing,
        # never past ``cap`` (the first call it did not get, or the first that raised).
        self.journal: str | None = None
        self.base = 0
        self.cap: int | None = None

    # Replies -----------------------------------------------------------------------------

    def reply(self, *message: Any) -> None:
        """Send ``message`` to the training process; silently nothing once it is gone."""
        if self.replies_broken:
            return
        frame = memoryview(wire.encode(message))
        with self.reply_lock:
            try:
                while frame:
                    frame = frame[os.write(self.reply_fd, frame):]
            except OSError:
                self.replies_broken = True

    def forward_warning(self, message: Warning | str, category: type[Warning], filename: str,
                        lineno: int, file: Any = None, line: str | None = None) -> None:
        """``warnings.showwarning`` in the writer: the training process issues it."""
        self.reply("warning", *wire.warning_parts(message, category))

    # The reader thread ---------------------------------------------------------------------

    def read_forever(self) -> None:
        """The reader thread (module docstring); never returns before the process ends."""
        if hasattr(signal, "pthread_sigmask"):  # started with it blocked (processes.py)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.set_blocking(self.data_fd, False)
        os.set_blocking(self.control_fd, False)
        controls = wire.Frames()
        data_open = control_open = True
        waiting: list[Any] = []  # control requests read, placed once DATA is drained
        pending_end: str | None = None  # why the writer ends, placed once DATA is drained
        term_at: float | None = None
        stopped = False  # a stop request came: the training process waits for this writer
        progress: wire.Progress | None = None  # looked at once the drain limit passed
        while True:
            watch = [self.wake_read]
            if control_open:
                watch.append(self.control_fd)
            if data_open and not self.inbox.full():
                watch.append(self.data_fd)
            ready = select.select(watch, [], [], WATCH_SECONDS)[0]
            if (ready == [self.data_fd] and self.batching and not waiting
                    and pending_end is None and self.started):
                ready += self.gather(watch[:-1])
            now = time.monotonic()
            if self.wake_read in ready:
                woken = os.read(self.wake_read, 64)
                if signal.SIGTERM in woken and term_at is None:
                    term_at = now
                    self.deadline = now + TERM_SECONDS + DRAIN_SECONDS
            if self.control_fd in ready:
                chunk = os.read(self.control_fd, 1 << 16)
                if chunk:
                    controls.feed(chunk)
                    for request in controls:
                        stopped = stopped or request[0] == "stop"
                        waiting.append(request)
                else:
                    control_open = False
            if data_open and (self.data_fd in ready or waiting or pending_end):
                data_open = self.drain_data()
            drained = not data_open or (not self.inbox.full() and not self.more_data())
            if waiting and drained:
                for request in waiting:  # after everything logged before it
                    self.inbox.put("control", request)
                waiting = []
            if stopped and self.deadline is None and os.getppid() != self.parent:
                self.deadline = now + DRAIN_SECONDS  # it died while closing the monitor
            if self.ending is None and not stopped:
                if not data_open and not control_open:
                    self.ending = self.death("its end of the pipe closed")
                elif os.getppid() != self.parent:
                    self.ending = self.death("it is no longer this writer's parent")
                elif term_at is not None and now - term_at >= TERM_SECONDS:
                    self.ending = (
                        "the writer received SIGTERM (the job was terminated, e.g. preempted) "
                        f"and the training process did not close the monitor within "
                        f"{TERM_SECONDS:.0f} s")
                if self.ending is not None:
                    pending_end = self.ending
                    self.deadline = min(self.deadline or now + DRAIN_SECONDS,
                                        now + DRAIN_SECONDS)
            if pending_end is not None and drained:
                self.inbox.put("end", pending_end)
                pending_end = None
            if self.deadline is not None and now >= self.deadline and (
                    self.started or now >= self.deadline + START_SECONDS):
                if progress is None:
                    progress = wire.Progress(self.shared if self.started else None)
                if progress.stalled():  # not while it still handles calls or closes
                    self.leave_spool()
                    os._exit(3)  # stuck in a hook (or in the start) past the drain limit

    def gather(self, watch: list[int]) -> list[int]:
        """A call came while nothing else did: let more gather in the data pipe for
        ``SCHEDULE_DELAY`` seconds, unless it holds ``high_water`` bytes (looked at every
        ``SCHEDULE_SLICE``) or one of ``watch`` (a request, SIGTERM) is readable first; those
        of ``watch`` that are."""
        end = time.monotonic() + SCHEDULE_DELAY
        while _waiting_bytes(self.data_fd) < self.high_water:
            left = end - time.monotonic()
            if left <= 0:
                return []
            ready = select.select(watch, [], [], min(left, SCHEDULE_SLICE))[0]
            if ready:
                return ready
        return []

    def death(self, seen: str) -> str:
        """What ``monitor_crash`` is told when the training process is gone."""
        self.orphaned = True
        return (f"the training process (pid {self.parent}) ended without closing the monitor "
                f"({seen})")

    def drain_data(self) -> bool:
        """Read ``DATA`` until it is empty or the inbox full; ``False`` at its end."""
        while not self.inbox.full():
            try:
                chunk = os.read(self.data_fd, READ_BYTES)
            except BlockingIOError:
                return True
            if not chunk:
                self.inbox.put("end", None)
                return False
            self.read_bytes += len(chunk)
            if self.shared is not None:
                READ_BYTES_AT.pack_into(self.shared, 16, self.read_bytes)
            self.inbox.put("data", chunk)
        return True

    def more_data(self) -> bool:
        """Whether ``DATA`` holds bytes not read yet (or its end)."""
        return bool(select.select([self.data_fd], [], [], 0)[0])

    # Start -------------------------------------------------------------------------------

    def read_start(self) -> Any:
        """Block until the start frame arrived; ``None`` when the training process ended
        first. What arrives after it waits in ``backlog``."""
        while True:
            for message in self.frames:
                return message
            items = self.inbox.take(1.0)
            while items:
                kind, value = items.pop(0)
                if kind == "data":
                    self.frames.feed(value)
                    for message in self.frames:
                        self.backlog = items
                        return message
                elif kind == "end" and value is not None:
                    return None

    def start(self) -> bool:
        """Construct the backend from the start frame; reply ready or the failure."""
        message = self.read_start()
        if message is None:
            return False
        _, module, qualname, name, run, options, self.spool, self.index, journal = message
        since = None
        if journal is not None:
            self.journal, self.base, *replay = journal
            since = replay[0] if replay else None
            with contextlib.suppress(OSError):  # held until this process ends: no sync beside
                hold(self.journal, name)
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
        self.flush_confirms = flush_confirms(cls)
        self.reply("ready", {"state": backend_state(backend.instance)})
        if since is not None and since < self.base:
            self.replay(since)
        return True

    def replay(self, since: int) -> None:
        """A writer started again after its predecessor died: hand the backend the journal's
        calls from its cursor ``since`` up to the first call its pipe brings (``base``)."""
        assert self.journal is not None
        for seq, hook, kwargs in calls(self.journal, since):
            if seq >= self.base:
                break
            if hook not in (START, CLOSE) and not self.call(hook, kwargs):
                self.capped(seq)

    # The main loop ------------------------------------------------------------------------

    def run(self) -> str | None:
        """Handle the inbox until a stop request (returns ``None``, or the reason it carries)
        or the training process's death or SIGTERM (returns what was seen)."""
        self.handle_frames()  # those that came with the start frame
        items, self.backlog = self.backlog, []
        while True:
            for kind, value in items:
                if kind == "data":
                    self.frames.feed(value)
                    self.handle_frames()
                elif kind == "control":
                    hook, kwargs = value
                    if hook == "stop":
                        return kwargs.get("reason")
                    if hook == "gap":
                        self.capped(kwargs["seq"])
                        continue
                    if self.call("monitor_flush", {}) and self.flush_confirms:
                        self.confirm()
                    self.reply("flushed", kwargs["marker"], self.handled)
                elif value is not None:  # "end", None is only the end of DATA
                    return value
            if items:
                with contextlib.suppress(OSError):
                    os.write(self.wake_write, _WAKE)  # room in the inbox again
            items = self.inbox.take(1.0)

    def handle_frames(self) -> None:
        """Handle every complete frame held."""
        for hook, kwargs in self.frames:
            if hook == wire.SPOOL:
                hook, kwargs = self.unspool(kwargs)
            self.handled += 1
            if hook == wire.WRITE_ROWS:
                hook, kwargs = "monitor_write", {"events": Batch(kwargs)}
            self.call(hook, kwargs)

    def unspool(self, spooled: dict[str, Any]) -> tuple[str, Any]:
        """The call a ``wire.SPOOL`` frame names, read from this writer's link (removed), its
        bytes counted in the shared memory (the training process's bound); a link that
        cannot be read is reported as a failure of ``monitor_write``, and skipped."""
        try:
            call = wire.read_spool(wire.spool_path(self.spool, spooled["name"], self.index))
        except Exception as error:
            self.reply("failed", "monitor_write", wire.exception_parts(error))
            call = ("", {})  # no backend has a hook of that name
            self.capped(self.base + self.handled)  # this call's seq: not delivered
        self.spool_read += spooled["bytes"]
        if self.shared is not None:
            SPOOL_READ.pack_into(self.shared, SPOOL_READ_AT, self.spool_read)
        return call

    def capped(self, seq: int) -> None:
        """The cursor never passes ``seq`` (a call not delivered)."""
        self.cap = seq if self.cap is None else min(self.cap, seq)

    def confirm(self) -> None:
        """Move the backend's cursor past every call handled (the backend's flush or close
        just returned without raising); never past ``cap``. A cursor that cannot be written
        is left as it was (``monitors sync`` delivers those calls again)."""
        if self.journal is None or self.backend is None:
            return
        seq = self.base + self.handled
        with contextlib.suppress(OSError):
            write_cursor(self.journal, self.backend.name,
                         seq if self.cap is None else min(seq, self.cap))

    def call(self, hook: str, kwargs: dict[str, Any]) -> bool:
        """Call the backend's ``hook``; a failure is replied, never raised. Whether it
        returned without raising (or the backend lacks it)."""
        assert self.backend is not None
        function = self.backend.hooks.get(hook)
        if function is None:
            return True
        shared = self.shared
        if shared is not None:
            BUSY_SINCE.pack_into(shared, 24, time.monotonic())
            shared[0] = 1
        try:
            function(**kwargs)
            return True
        except Exception as error:
            if hook not in ("monitor_flush", "monitor_close"):
                self.capped(self.base + self.handled - 1)  # this call's seq
            self.reply("failed", hook, wire.exception_parts(error))
            return False
        finally:
            if shared is not None:
                shared[0] = 0
                HANDLED.pack_into(shared, 8, self.handled)

    def finish(self, crash: str | None) -> None:
        """Flush, report a crash (``monitor_crash``), close; reply closed. The shared memory
        says so meanwhile (``wire.FINISHING_AT``): an exit limit that passes lets these hooks
        run for ``wire.CLOSE_HOOK_SECONDS`` each (``wire.Progress``)."""
        if self.shared is not None:
            self.shared[FINISHING_AT] = 1
        flushed = self.call("monitor_flush", {})
        if crash:
            self.call("monitor_crash", {"reason": crash})
        if self.call("monitor_close", {}) and flushed:
            self.confirm()
        self.leave_spool()
        self.reply("closed", self.handled)

    def leave_spool(self) -> None:
        """When the training process is gone (nobody else removes it): remove the spool folder
        if it is empty (each writer tries as it ends; the last one's attempt succeeds)."""
        if self.spool and (self.orphaned or os.getppid() != self.parent):
            with contextlib.suppress(OSError):
                os.rmdir(self.spool)


def _pipe_size(fd: int) -> int:
    """The capacity of the pipe ``fd`` in bytes (64 KiB where it cannot be read)."""
    try:
        import fcntl

        return max(1 << 12, fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032)))
    except (ImportError, OSError):
        return 1 << 16


def _waiting_bytes(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` (``FIONREAD``); 0 where that cannot be read (the
    schedule delay then applies)."""
    try:
        import fcntl
        import termios

        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except (ImportError, OSError, AttributeError):
        return 0


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


def _ignore_signal(signum: int, frame: Any) -> None:
    """SIGTERM's Python-level handler: nothing (the reader thread saw it on the wake-up
    pipe, where the C-level handler wrote its number, whatever the main thread is doing)."""


def main(argv: list[str]) -> int:
    """Run one writer (module docstring); the exit status is 0 unless the start failed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data_fd, control_fd, reply_fd, shared_fd = (int(arg) for arg in argv[:4])
    writer = Writer(data_fd, control_fd, reply_fd, shared_fd,
                    int(argv[4]) if len(argv) > 4 else None)
    signal.signal(signal.SIGTERM, _ignore_signal)
    signal.set_wakeup_fd(writer.wake_write, warn_on_full_buffer=False)
    warnings.showwarning = writer.forward_warning
    threading.Thread(target=writer.read_forever, daemon=True,
                     name="core_monitor:reader").start()
    # SIGTERM reaches this process through the reader thread only: blocked on the main thread,
    # it is blocked in every thread and process the SDK starts from here on (a signal mask is
    # inherited across fork and exec). A scheduler signals every process of the job at once;
    # an SDK's helper that died of it would lose the calls still on their way to it (wandb's
    # service unblocks it; the wandb backend recovers). They end when the writer closes the
    # backend, or with the job's SIGKILL.
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    started = writer.start()
    writer.started = True  # before reading the deadline: the reader sets it after, or we see it
    if writer.deadline is not None:  # the trainer died while this writer started: drain now
        writer.deadline = max(writer.deadline, time.monotonic() + DRAIN_SECONDS)
    if not started:
        return 1
    lower_priority()
    crash = writer.run()
    if crash:
        writer.reply("ending", crash)  # why it ends, for the report of a writer not asked to
    writer.finish(crash)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
