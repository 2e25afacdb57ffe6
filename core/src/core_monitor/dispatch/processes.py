"""The writer channel (the default kind): a backend runs in a writer process of its own.

``WriterChannel`` is the training process's side of one writer: its data pipe, its control
pipe, its process, what it replied. ``WriterHost`` is what the writer channels of one monitor
share: the spool folder and the one thread reading every writer's replies. The fan-out
(``fanout.FanOut``) encodes each call once (``core_monitor.dispatch.wire``) and writes the
frame into every writer's pipe in its one C-level pass (``os.write`` mapped over the pipes by
``deque.extend``: no Python bytecode, so no signal handler and no other thread, runs between
two writes), once every pipe has room for it (one ``poll``; room is waited for, or the call
dropped for a full one, before anything is written: ``WriterChannel.make_room``). A frame of at
most ``PIPE_BUF`` bytes (4 KiB on Linux) goes into a pipe whole, so the call reaches every
writer whole or none. A larger one (an image, a row of thousands of tags) is first written
whole into a spool file (``WriterHost.spool``, a folder in ``/dev/shm``), hard-linked once per
writer, and only a small ``wire.SPOOL`` frame naming it crosses the pipes, in the same pass: an
interrupt before the pass leaves no trace of the call, one after it cannot undo it. Spool files
count by their bytes against each writer's bound (twice its pipe's size: what its pipe and its
inbox hold of small calls). When ``log()`` returns the call is in the kernel (in a pipe, and a
spool file for a large one): if the training process dies by any means, each writer still
reads it, writes it, flushes, marks the run as crashed (``monitor_crash``) and exits
(``core_monitor.dispatch.writer``), the last one removing the spool folder. No tracker SDK is
imported in the training process.

Each data pipe is the backend's bounded buffer: ``queue_size`` calls of 1 KiB (at least one
page, at most the system's largest pipe, ``/proc/sys/fs/pipe-max-size``, 1 MiB by default); the
writer's reader thread moves what arrives into an inbox of as much again, in batches
(``writer.SCHEDULE_DELAY``, at once when the pipe is half full), so the backend alone bounds
how fast a pipe drains. With ``on_full="block"`` a full pipe makes
``log()`` wait for that writer (while it lives); with ``"drop"`` the call is dropped for that
backend and counted, after a short grace (``DROP_GRACE_SECONDS``) unless the writer has been
inside one hook for longer than that (the shared memory ``wire.SHARED_BYTES``).

Flush and stop requests travel on a second pipe per writer, the control pipe, written without
waiting: they never queue behind data in a full data pipe, so ``flush(timeout=)`` and
``close(timeout=)`` keep their deadline whatever the data pipes hold. The writer places each
request after the data logged before it. The fan-out's ``stop`` marks every writer stopping
before it sends any stop request, so a writer that exits on its request is never taken for a
dead one.

Start-up: ``WriterHost.launch`` starts every writer at once (each with SIGTERM blocked until
its handler is in place) and the fan-out, by default (``Monitor(wait=False)``), returns at
once: calls wait in the pipes of writers still starting (a full one waits for room even with
``on_full="drop"``), and a start failure is reported by the reply thread like any failure, at
the caller's next call, with its original type. With ``wait`` (``Monitor(wait=True)``, or a
``resume`` other than ``"never"``) it returns when each replied ready or failed
(``STARTUP_SECONDS`` at most, naming the backend), re-raising a start failure with its original
type and message. Failures and warnings of a running writer come back on its reply pipe, read
by one thread (which also passes on the writer's stdout and stderr, a pipe of its own: a writer
never holds this process's output open), and are reported on the caller's thread at its next
call (``policy.Policy``). A writer that dies (a segfault in a native extension) or ends by
itself (SIGTERM sent to it alone) is reported once as ``WriterDied``, naming why; the others go
on. ``WriterHost.close`` waits for every writer to exit, all at once, at most ``timeout``
seconds; a writer still running then is killed with what its SDK started (its session's process
group) and its calls counted in ``undelivered``; every writer is reaped. A writer still
*starting* then (importing its SDK, starting its run: a slow start on a loaded node, or a
SIGTERM soon after ``Monitor()``) is not killed, since that would lose every call it holds
while nothing is wrong with it: it has the stop request, writes everything once started and
exits by itself (once this process has ended, within ``wire.START_SECONDS`` +
``wire.DRAIN_SECONDS`` at most).

Termination (``core_monitor.shutdown``): on SIGTERM this process closes its monitors, and the
stop request names the signal (``shutdown.terminating``): each writer writes everything logged,
then records the run's end through ``monitor_crash``. Writers run in sessions of their own, so
``kill -TERM -- -PGID`` reaches only this process; a scheduler that signals every process of
the job (Slurm) reaches the writers too, and each keeps serving until the stop request comes
(``writer.TERM_SECONDS`` at most), SIGTERM being blocked in what its SDK starts. A writer whose
training process dies ends within ``wire.DRAIN_SECONDS`` even when stuck inside a hook
(counted from the end of its start, when it was still starting: ``wire.START_SECONDS``).

A backend class that a fresh interpreter might not import by module path (defined in
``__main__``, a notebook cell, a test module or function: anything but an installed
distribution or a folder on ``PYTHONPATH``) or whose options do not pickle gets a thread
channel instead (``why_not_in_a_process``; ``threads.ThreadChannel``), with one INFO log
line, while its neighbours keep their writers. Where no writer can be started (no
``fork``/``exec``, no pipes) every backend gets a thread channel, with one warning.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
import pickle
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from ..errors import WriterDied
from ..plugins import installed_plugins, packages_distributions
from ..run import RunInfo
from . import wire
from .channel import FULL, GONE, ROOM, BackendSpec, Channel
from .policy import Policy
from .wire import (
    BUSY_SINCE,
    DRAIN_SECONDS,
    HANDLED,
    SHARED_BYTES,
    SPOOL_READ,
    SPOOL_READ_AT,
    START_SECONDS,
)

logger = logging.getLogger("core_monitor")

#: Seconds a writer has to construct its backend and reply (an SDK's import and start).
STARTUP_SECONDS = 120.0
#: Bytes of pipe per call of ``queue_size`` (a 10-scalar call is about 300 bytes).
BYTES_PER_CALL = 1024
#: Seconds a full pipe of an idle writer gets to drain before a call is dropped.
DROP_GRACE_SECONDS = 0.05
#: Seconds of the first nap while waiting for a writer to read its spool files.
SPOOL_NAP_SECONDS = 0.0001
#: The largest frame a pipe takes whole in one write (4 KiB on Linux); larger calls are spooled.
PIPE_BUF = getattr(select, "PIPE_BUF", 512)
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux; in the fcntl module from Python 3.10)


class WriterChannel(Channel):
    """The training process's side of one writer: its pipes, its process, what it replied.

    Args:
        spec: the backend to start there.
        run: the run it starts.
        capacity: ``queue_size``: the data pipe holds ``capacity`` KiB (``BYTES_PER_CALL``).
        index: its place among the monitor's writers (the suffix of its spool links).
        spool: the spool folder (``WriterHost.spool``).
        journal: ``(the run's journal folder, the seq of the first call it gets)``: the
            writer moves the backend's cursor (``core_monitor.journal``); a third item, a
            writer started again (``WriterHost.relaunch``): the seq it first reads from the
            journal; ``None``: no journal.

    Attributes:
        name: the backend's name.
        fd: the write end of the data pipe (non-blocking), or ``-1`` once closed.
        process: the ``subprocess.Popen`` of the writer.
        ready: ``None`` while starting, then ``True`` or the start failure (an exception).
        facts: what the backend told at its start (``FanOut.facts``).
        handled: calls the writer reported done; ``skipped``: calls it never got.
        flushed: the last flush marker the writer answered.
        dead: the writer ended without being asked to (or was killed), after its start.
        ended: the writer's process exited (its reply pipe closed), whatever the reason.
        sending: whether the fan-out still writes to it (``False`` once it is found gone, and
            from ``close`` on).

    Raises:
        OSError: a pipe, the shared memory or the process could not be made.
    """

    kind: ClassVar[str] = "process"

    def __init__(self, spec: BackendSpec, run: RunInfo, capacity: int, index: int,
                 spool: str, journal: tuple[str, int] | tuple[str, int, int] | None = None,
                 ) -> None:
        super().__init__(spec.name)
        self.spec, self.run, self.capacity = spec, run, capacity  # to start it again
        self.full = f"its pipe is full (queue_size={capacity})"
        self.sending = True  # among the fan-out's live writers (the pipe is written to)
        self.marker = 0  # the last flush marker sent
        self.index = index  # its place in start order: the suffix of its spool links
        self.spooled = 0  # bytes of spool files sent to it (wire.SPOOL_READ: bytes it read)
        self.ready: bool | BaseException | None = None
        self.facts: dict[str, Any] = {}
        self.handled = self.flushed = 0
        self.dead = self.stopping = False
        self.ended = False  # its reply pipe closed: the process exited, whatever the reason
        self.ending: str | None = None  # why the writer said it ends by itself, if it did
        self.changed = threading.Condition()
        start = wire.encode(("start", spec.cls.__module__, spec.cls.__qualname__, spec.name,
                             run, dict(spec.options), spool, index, journal))
        data_read, self.fd = os.pipe()
        control_read, self.control_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        self.output_fd, output_write = os.pipe()
        shared_fd = (os.memfd_create("core_monitor-shared") if hasattr(os, "memfd_create")
                     else -1)
        try:
            if shared_fd >= 0:
                os.ftruncate(shared_fd, mmap.PAGESIZE)
            self.busy = mmap.mmap(shared_fd, SHARED_BYTES) if shared_fd >= 0 else None
            #: The bytes of spool files the writer may hold unread: what its pipe and its
            #: inbox hold of small calls (twice the pipe's size).
            self.bound = 2 * _resize(self.fd, capacity * BYTES_PER_CALL)
            # Its own session: a Ctrl-C (SIGINT to the terminal's process group) is the
            # training process's business. Its own output pipe: it never holds the training
            # process's stdout/stderr (a shell or CI step waiting on them would wait for it).
            # Started with SIGTERM blocked (a signal mask is inherited): one that comes
            # while it imports waits for its handler (its reader thread unblocks it).
            with _sigterm_blocked():
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "core_monitor.dispatch.writer",
                     str(data_read), str(control_read), str(reply_write), str(shared_fd),
                     str(os.getpid())],
                    pass_fds=[fd for fd in (data_read, control_read, reply_write, shared_fd)
                              if fd >= 0],
                    stdin=subprocess.DEVNULL, stdout=output_write, stderr=output_write,
                    start_new_session=True,
                )
        finally:
            for fd in (data_read, control_read, reply_write, output_write, shared_fd):
                if fd >= 0:
                    os.close(fd)
        write_all(self.fd, [start])
        os.set_blocking(self.fd, False)
        os.set_blocking(self.control_fd, False)

    def wait_ready(self, deadline: float) -> bool | BaseException:
        """Block until the writer replied ready or failed, or ``deadline`` passed."""
        with self.changed:
            while self.ready is None and not self.dead:
                left = deadline - time.monotonic()
                if left <= 0:
                    return TimeoutError(
                        f"backend {self.name!r}: its writer process did not start within "
                        f"{STARTUP_SECONDS:.0f} s (core_monitor.dispatch.processes."
                        "STARTUP_SECONDS); it was stopped")
                self.changed.wait(min(left, 0.5))
            if self.ready is None:
                return WriterDied("WriterDied", f"backend {self.name!r}: its writer process "
                                  f"ended while starting ({self.exit_description()})")
            return self.ready

    def idle(self) -> bool:
        """Whether a full pipe may still drain soon: the writer is between calls, or inside a
        hook that started less than ``DROP_GRACE_SECONDS`` ago (a hung hook drops at once)."""
        busy = self.busy
        if busy is None or busy[0] == 0:
            return True
        return time.monotonic() - BUSY_SINCE.unpack_from(busy, 24)[0] < DROP_GRACE_SECONDS

    def spool_room(self, size: int) -> bool:
        """Whether a spool file of ``size`` bytes (0: none) fits the writer's bound: the bytes
        of spool files it has not read yet, plus ``size``, at most ``bound``; a file larger
        than the bound when it holds none (else such a call could never be sent)."""
        if not size or self.busy is None:
            return True
        held = self.spooled - SPOOL_READ.unpack_from(self.busy, SPOOL_READ_AT)[0]
        return held <= 0 or held + size <= self.bound

    def room(self, size: int) -> bool:
        """Whether a frame of at most ``PIPE_BUF`` bytes can be written into the pipe now (one
        free page of the pipe takes it whole), naming a spool file of ``size`` bytes."""
        return bool(select.select([], [self.fd], [], 0)[1]) and self.spool_room(size)

    def wait_room(self, size: int, deadline: float | None, *, starting: bool = False) -> bool:
        """Wait for ``room(size)`` until ``deadline`` (``None``: no limit), while the writer
        lives (and, with ``starting``, while it is still starting); whether there is room.
        Nothing is written meanwhile: an interrupt here leaves no trace of the call."""
        nap = SPOOL_NAP_SECONDS
        while True:
            if self.room(size):
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if (self.process.poll() is not None or (left is not None and left <= 0)
                    or (starting and self.ready is not None)):
                return False
            wait = 0.1 if left is None else min(left, 0.1)
            if self.spool_room(size):
                select.select([], [self.fd], [], wait)
            else:  # the writer reads spool files as it handles them: nothing to select on,
                # so naps growing from 0.1 ms to 2 ms (a writer keeping up is not kept waiting)
                time.sleep(min(wait, nap))
                nap = min(nap * 2, 0.002)

    def make_room(self, size: int, on_full: str) -> str:
        """Room for a frame naming a spool file of ``size`` bytes (``room``), else as
        ``on_full`` says: ``"block"`` waits while the writer lives; ``"drop"`` waits while it
        is still starting (what is logged behind ``Monitor(wait=False)`` is never dropped),
        then gives a writer not stuck inside a hook ``DROP_GRACE_SECONDS``; ``FULL`` after
        that, ``GONE`` when the process ended. ``"detach"`` (a backend with a budget) waits
        for nothing: ``FULL`` at once."""
        if self.room(size):
            return ROOM
        if on_full == "detach":
            return FULL if self.process.poll() is None else GONE
        if on_full == "block":
            if self.wait_room(size, None):
                return ROOM
        else:
            if self.ready is None and self.wait_room(size, None, starting=True):
                return ROOM
            if self.idle() and self.wait_room(size, time.monotonic() + DROP_GRACE_SECONDS):
                return ROOM
            if self.process.poll() is None:
                return FULL
        return GONE

    def counts_gone(self) -> bool:
        return not self.dead and self.ready is True

    def request_flush(self) -> int | None:
        """A flush request on the control pipe (never behind data in a full data pipe: the
        writer places it after every byte its data pipe held when it read the request); the
        marker to wait for, ``0`` for a writer no longer sent to, ``None`` when the request
        could not be written."""
        if not self.sending:
            return 0
        self.marker += 1
        return self.marker if self.control(("flush", {"marker": self.marker})) else None

    def wait_flushed(self, ticket: int | None, deadline: float | None) -> bool:
        """Wait for the writer's answer to flush ``ticket``, until ``deadline``. A writer that
        will never answer is not waited for: one that failed to start (its failure was
        reported as that; it holds nothing), or whose process has ended for any reason (what
        it held is counted at ``close``). Whether nothing is late."""
        if ticket is None:
            return False
        with self.changed:
            while self.flushed < ticket and not self.answerless():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.changed.wait(0.5 if left is None else min(left, 0.5))
        return True

    def answerless(self) -> bool:
        """Whether the writer will answer no more requests: it failed to start, or its process
        ended (its reply pipe closed, or the process is reaped)."""
        return (self.dead or self.ended or isinstance(self.ready, BaseException)
                or self.process.poll() is not None)

    def pending(self, sent: int) -> int:
        """Calls sent to this writer (``sent`` in all, less ``skipped``) it has not reported
        done."""
        return max(0, sent - self.skipped - self.calls_handled())

    def request_stop(self, reason: str | None) -> None:
        """The stop request, on the control pipe, never waiting (``stopping`` is set by the
        fan-out for every writer first)."""
        self.control(("stop", {"reason": reason}))

    def forget(self) -> None:
        """Close the inherited pipes: the child neither writes to the writer nor keeps it
        alive; it never waits for or kills it."""
        for fd in (self.fd, self.control_fd, self.reply_fd, self.output_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.control_fd = -1
        self.sending = False

    def stop_now(self) -> None:
        """Kill the writer and reap it."""
        self.stopping = True
        self.close_pipe()
        self.kill()
        self.process.wait()

    def control(self, message: tuple[str, dict[str, Any]]) -> bool:
        """Write a control frame (flush, stop) into the control pipe, never waiting: it holds
        only control frames, so it is full only when the writer has not read hundreds of
        them (it is hung). Whether the frame was written."""
        if self.control_fd < 0:
            return False
        try:
            return os.write(self.control_fd, wire.encode(message)) > 0
        except OSError:
            return False

    def calls_handled(self) -> int:
        """Calls the writer has handled: counted live in the shared memory, else as last
        replied."""
        if self.busy is not None:
            return max(self.handled, HANDLED.unpack_from(self.busy, 8)[0])
        return self.handled

    def close_pipe(self) -> None:
        """Close the data and control pipes' write ends: the writer sees the end of input."""
        for name in ("fd", "control_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def kill(self) -> None:
        """SIGKILL the writer and what its SDK started (its session's process group)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                with contextlib.suppress(OSError):
                    self.process.kill()

    def exit_description(self) -> str:
        """How the process ended, e.g. ``"killed by SIGSEGV"`` or ``"exit status 1"``."""
        code = self.process.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"


class WriterHost:
    """What the writer channels of one fan-out share: the spool folder their large calls cross
    through, and the thread reading every writer's replies and output.

    Args:
        policy: the fan-out's failure policy (failures and warnings replied by a writer).

    Attributes:
        writers: the writer channels launched, in start order.
        spool: the spool folder (calls larger than ``PIPE_BUF``) while writers run, else
            ``None``.
        waited: whether the fan-out waited for the writers' start (their start failures are
            then reported by the fan-out itself, not by the reply thread).
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.writers: list[WriterChannel] = []
        self.spool: str | None = None
        self.waited = True
        #: A writer died since the fan-out last looked (set by the reply thread).
        self.died = False
        self._spools = 0  # spool files written (their names)
        self._selector: selectors.BaseSelector | None = None
        self._reader: threading.Thread | None = None

    def launch(self, specs: Sequence[BackendSpec], run: RunInfo,
               capacity: int | dict[str, int], journal: tuple[str, int] | None = None) -> None:
        """Start every writer of ``specs`` at once, and the thread reading their replies
        (``capacity``: one for all, or per backend name; ``journal``: as ``WriterChannel``
        takes it).

        Raises:
            OSError: a pipe or a process could not be made (the caller stops what started).
        """
        if not specs:
            return
        self._selector = selectors.DefaultSelector()
        self.spool = tempfile.mkdtemp(prefix="core_monitor-spool-", dir=_spool_root())
        for index, spec in enumerate(specs):
            writer = WriterChannel(spec, run, capacity if isinstance(capacity, int)
                                   else capacity[spec.name], index, self.spool, journal)
            self.writers.append(writer)
            self._selector.register(writer.reply_fd, selectors.EVENT_READ, (writer, "reply"))
            self._selector.register(writer.output_fd, selectors.EVENT_READ, (writer, "output"))
        self._reader = threading.Thread(target=self._read_replies, daemon=True,
                                        name="core_monitor:replies")
        self._reader.start()

    def relaunch(self, dead: WriterChannel, journal: tuple[str, int, int]) -> WriterChannel:
        """Start a writer again in place of ``dead`` (its process ended), for the same backend,
        run and spool links; ``journal``: ``(folder, the seq of the first call its pipe gets,
        the seq it first reads from the journal: its backend's cursor)``. Its replies are
        read by the reply thread (started again when it had ended).

        Raises:
            OSError: a pipe or the process could not be made.
        """
        assert self.spool is not None and self._selector is not None
        writer = WriterChannel(dead.spec, dead.run, dead.capacity, dead.index, self.spool,
                               journal)
        self.writers[self.writers.index(dead)] = writer
        self._selector.register(writer.reply_fd, selectors.EVENT_READ, (writer, "reply"))
        self._selector.register(writer.output_fd, selectors.EVENT_READ, (writer, "output"))
        if self._reader is None or not self._reader.is_alive():
            self._reader = threading.Thread(target=self._read_replies, daemon=True,
                                            name="core_monitor:replies")
            self._reader.start()
        return writer

    def spool_name(self) -> str:
        """The name of the next spool file."""
        self._spools += 1
        return str(self._spools)

    # The reply thread --------------------------------------------------------------------

    def _read_replies(self) -> None:
        """The reply thread: each writer's replies, and its output (stdout and stderr, passed
        on to this process's ``sys.stderr``), until every writer ended."""
        selector = self._selector
        assert selector is not None
        frames: dict[int, wire.Frames] = {}
        while selector.get_map():
            for key, _ in selector.select():
                writer, kind = key.data
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    if kind == "reply":
                        self._ended(writer)
                    continue
                if kind == "output":
                    _pass_on(chunk)
                    continue
                frames.setdefault(key.fd, wire.Frames()).feed(chunk)
                for message in frames[key.fd]:
                    self._on_reply(writer, message)

    def _on_reply(self, writer: WriterChannel, message: tuple[Any, ...]) -> None:
        kind = message[0]
        strict = self.policy.strict
        if kind == "failed":
            error = wire.rebuild_exception(message[2], strict=strict)
            self.policy.failed_elsewhere(writer.name, message[1], error,
                                         "in its writer process")
        elif kind == "warning":
            self.policy.warn_later(message[1], wire.warning_category(message[2], message[3]))
        elif kind in ("flushed", "closed"):
            with writer.changed:
                if kind == "flushed":
                    writer.flushed = message[1]
                writer.handled = message[-1]
                writer.changed.notify_all()
        elif kind == "ending":
            writer.ending = message[1]
        elif kind == "ready":
            with writer.changed:
                writer.facts.update(message[1])
                writer.ready = True
                writer.changed.notify_all()
        elif kind == "start_failed":
            error = wire.rebuild_exception(message[1], strict=True)
            with writer.changed:
                writer.ready = error
                writer.changed.notify_all()
            if not self.waited:  # reported at the caller's next call, its original type
                self.policy.failed_elsewhere(writer.name, "start", error,
                                             "in its writer process")

    def _ended(self, writer: WriterChannel) -> None:
        """The writer's reply pipe closed: it exited. Unless asked to, that is a failure."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            writer.process.wait(timeout=5)
        with writer.changed:
            writer.ended = True
            writer.dead = not writer.stopping and writer.ready is True
            writer.changed.notify_all()
        if writer.dead:
            self.died = True  # the fan-out may start it again (``relaunch``)
        if not self.waited and not writer.stopping and writer.ready is None:
            error = WriterDied("WriterDied", f"backend {writer.name!r}: its writer process "
                               f"ended while starting ({writer.exit_description()})")
            self.policy.failed_elsewhere(writer.name, "start", error, "in its writer process")
        if writer.dead:
            why = writer.exit_description() + (f": {writer.ending}" if writer.ending else "")
            error = WriterDied("WriterDied", (
                f"backend {writer.name!r}: its writer process ended unexpectedly ({why}); "
                "calls after its last flush may be lost, the other backends carry on"))
            self.policy.failed_elsewhere(writer.name, "its writer process", error,
                                         "in its writer process")

    # The end -----------------------------------------------------------------------------

    def close(self, deadline: float | None, timeout: float | None, sent: int, *,
              patient: bool = False) -> dict[str, int]:
        """End every writer: close its pipes (its end of input), wait for it to exit, all
        at once, until ``deadline``; kill one still running then, unless it is still starting
        (module docstring: it goes on by itself) or, with ``patient`` (the core's own exit
        limit: ``shutdown.close_all``), still making progress (``wire.Progress``); remove the
        spool folder. Every writer is reaped. Backend name -> calls of the ``sent`` that never
        reached its backend (a writer killed, or dead)."""
        lost: dict[str, int] = {}
        starting: list[str] = []  # writers left to finish their start and write by themselves
        for writer in self.writers:
            writer.stopping = True
            writer.close_pipe()
            writer.sending = False
        for writer in self.writers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                writer.process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                if writer.ready is None and writer.process.poll() is None:
                    starting.append(writer.name)  # module docstring: it goes on by itself
                    continue
                if patient and _wait_while_progressing(writer):
                    continue
                writer.stop_now()
                pending = writer.pending(sent)
                if pending:
                    lost[writer.name] = lost.get(writer.name, 0) + pending
                    logger.error("backend %r: its writer process did not finish within "
                                 "close(timeout=%s) and was killed", writer.name, timeout)
                else:  # every call was written: only the SDK's own finish was cut short
                    logger.warning(
                        "backend %r: every call was written, nothing logged was lost; its "
                        "writer process was still finishing the run in its SDK when "
                        "close(timeout=%s) ran out and was stopped (the run may not be marked "
                        "finished)", writer.name, timeout)
        if starting:
            logger.warning(
                "backend(s) %s: the writer process was still starting when close(timeout=%s) "
                "ran out; it writes everything logged once started, then exits by itself "
                "(at most %.0f s after this process ends)", ", ".join(map(repr, starting)), timeout,
                START_SECONDS + DRAIN_SECONDS)
            self.remove_spool(keep=starting)  # their links: they read them, then the folder
        else:
            self.remove_spool()  # every writer has ended: what is left there is nobody's
        if self._reader is not None:  # it passes on a starting writer's output until its end
            self._reader.join(timeout=10 if not starting or deadline is None
                              else max(0.0, deadline - time.monotonic()))
        for writer in self.writers:
            held = writer.pending(sent)
            if writer.dead and held:  # what it held when it died, and what was sent after
                lost[writer.name] = lost.get(writer.name, 0) + held
        return lost

    def abandon(self) -> None:
        """Kill and reap every writer launched (writers cannot be started here after all)."""
        for writer in self.writers:
            writer.stop_now()
        self.writers = []
        self.remove_spool()

    def remove_spool(self, keep: Sequence[str] = ()) -> None:
        """Remove the spool folder with what a writer that died or was killed left in it; with
        ``keep`` (writers left to finish by themselves), only the links no such writer reads:
        each of them removes its own links, and the last one the folder (``writer.py``)."""
        if self.spool is None:
            return
        if not keep:
            shutil.rmtree(self.spool, ignore_errors=True)
        else:
            kept = {f".{writer.index}" for writer in self.writers if writer.name in keep}
            with contextlib.suppress(OSError):
                for entry in os.scandir(self.spool):
                    if os.path.splitext(entry.name)[1] not in kept:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        self.spool = None

    def forget(self) -> None:
        """In a forked child: close the inherited pipes of every writer (``forget``); the
        spool folder is the parent's (its writers read it, its close removes it)."""
        for writer in self.writers:
            writer.forget()
        self.writers = []
        self.spool = None


def _wait_while_progressing(writer: WriterChannel) -> bool:
    """Past the core's exit limit: wait for ``writer`` while it makes progress (``wire.Progress``:
    calls handled moving, or a closing hook running for less than ``wire.CLOSE_HOOK_SECONDS``);
    whether it exited. The platform's own SIGKILL (Slurm's ``KillWait``, Kubernetes's grace
    period, 30 s by default) may come first: the writer then dies of it, as it would anyway."""
    progress = wire.Progress(writer.busy)
    while not progress.stalled():
        try:
            writer.process.wait(timeout=0.25)
            return True
        except subprocess.TimeoutExpired:
            continue
    return writer.process.poll() is not None


@contextlib.contextmanager
def _sigterm_blocked() -> Any:
    """Block SIGTERM on this thread meanwhile (a SIGTERM that comes is delivered after)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        if signal.SIGTERM not in previous:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _pass_on(chunk: bytes) -> None:
    """A writer's output (an SDK's messages) to this process's ``sys.stderr``."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(Exception):
        stream.write(chunk.decode(errors="replace"))
        stream.flush()


def nothing(**kwargs: Any) -> None:
    """Stands for a hook that runs in the writer process (``MediaRoutes`` needs a callable)."""


def _resize(fd: int, size: int) -> int:
    """Make the pipe hold ``size`` bytes (rounded to pages), within what the system allows;
    the size it has then, in bytes."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the default size
        return 1 << 16
    size = max(mmap.PAGESIZE, min(size, _pipe_max_size()))
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), size)
    try:
        return int(fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", _F_SETPIPE_SZ + 1)))
    except OSError:
        return 1 << 16


@functools.lru_cache(maxsize=1)
def _pipe_max_size() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size") as limit:
            return int(limit.read())
    except (OSError, ValueError):
        return 1 << 20


def write_all(fd: int, parts: list[Any], *, writer: WriterChannel | None = None) -> None:
    """Write the frame ``parts`` whole into ``fd``, waiting for room while it is full (a
    blocking pipe, the start frame; or a non-blocking one of ``writer``, while it lives).

    Raises:
        BrokenPipeError: the writer is gone.
    """
    views = [memoryview(part).cast("B") for part in parts]
    while views:
        try:
            written = os.writev(fd, views)
        except BlockingIOError:
            if writer is not None and writer.process.poll() is not None:
                raise BrokenPipeError(f"the writer of backend {writer.name!r} ended") from None
            select.select([], [fd], [], 0.1)
            continue
        while views and written >= views[0].nbytes:
            written -= views[0].nbytes
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def write_file(path: str, parts: list[Any]) -> None:
    """Create the file ``path`` (it must not exist) holding the frame ``parts``, closed.

    Raises:
        OSError: it cannot be created or written (a full disk); it is then left to the caller.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 0o600)
    try:
        views = [memoryview(part).cast("B") for part in parts]
        while views:
            written = os.writev(fd, views)
            while views and written >= views[0].nbytes:
                written -= views[0].nbytes
                views.pop(0)
            if views and written:
                views[0] = views[0][written:]
    finally:
        os.close(fd)


def _spool_root() -> str | None:
    """Where spool folders go: ``/dev/shm`` (memory, on Linux) when it is a writable folder,
    else the temporary folder (``tempfile.gettempdir()``)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def writable(fds: list[int]) -> Any:
    """A function of a timeout in seconds (0: none) listing which of the pipes ``fds`` have
    room for a frame of ``PIPE_BUF`` bytes: ``poll(2)`` once registered (a pipe is writable
    while it has a free page, which takes such a frame whole; a pipe whose writer is gone is
    listed too: writing to it fails, and the pass handles that)."""
    if not hasattr(select, "poll"):
        return lambda timeout: select.select([], fds, [], timeout)[1] if fds else []
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLOUT)
    return poller.poll


@functools.lru_cache(maxsize=1)
def _installed_packages() -> frozenset[str]:
    """Top-level packages of installed distributions, and of the modules their backend entry
    points name (an editable install's package is found that way)."""
    named = {plugin.target.split(":")[0].split(".")[0]
             for claims in installed_plugins().values() for plugin in claims if plugin.target}
    return frozenset(packages_distributions()) | named


def why_not_in_a_process(spec: BackendSpec, run: RunInfo) -> str | None:
    """Why ``spec`` cannot run in a writer process, or ``None`` when it can: its class must
    come from an installed distribution (an entry point's always does) or from a folder on
    ``PYTHONPATH``, which a fresh interpreter imports alike; a class of a script, a notebook,
    a test module or a function runs in a worker thread."""
    cls = spec.cls
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return f"its class {cls.__qualname__} is defined in {cls.__module__} (not importable)"
    if not spec.installed and cls.__module__.split(".")[0] not in _installed_packages():
        module = sys.modules.get(cls.__module__)
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
        roots = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p]
        if not any(os.path.abspath(origin).startswith(root + os.sep) for root in roots):
            return (f"its module {cls.__module__} is neither installed nor on PYTHONPATH, so "
                    "a fresh interpreter may not import it")
    return _options_problem(spec, run)


def _options_problem(spec: BackendSpec, run: RunInfo) -> str | None:
    try:
        pickle.dumps((run, dict(spec.options)), 5)
    except Exception as error:
        return f"its options cannot be sent to another process ({error})"
    return None
