"""``dispatch="process"`` (the default): each backend runs in a writer process of its own.

The training process validates each call on the caller's thread, encodes it once
(``core_monitor.dispatch.wire``) and writes the frame into every writer's pipe in one C-level
pass (``os.write`` mapped over the pipes by ``deque.extend``: no Python bytecode, so no
signal handler and no other thread, runs between two writes), once every pipe has room for it
(one ``poll``; room is waited for, or the call dropped for a full one, before anything is
written). A frame of at most ``PIPE_BUF`` bytes (4 KiB on Linux) goes into a pipe whole, so
the call reaches every writer whole or none. A larger one (an image, a row of thousands of
tags) is first written whole into a spool file (``ProcessDispatch.spool``, a folder in
``/dev/shm``), hard-linked once per writer, and only a small ``wire.SPOOL`` frame naming it
crosses the pipes, in the same pass: an interrupt before the pass leaves no trace of the call,
one after it cannot undo it. Spool files count by their bytes against each writer's bound
(twice its pipe's size: what its pipe and its inbox hold of small calls). When ``log()``
returns the call is in the kernel (in a pipe, and a spool file for a large one): if the
training process dies by any means, each writer still reads it, writes it, flushes, marks the
run as crashed (``monitor_crash``) and exits (``core_monitor.dispatch.writer``), the last one
removing the spool folder. No tracker SDK is
imported in the training process.

Each data pipe is the backend's bounded buffer: ``queue_size`` calls of 1 KiB (at least one
page, at most the system's largest pipe, ``/proc/sys/fs/pipe-max-size``, 1 MiB by default); the
writer's reader thread moves what arrives into an inbox of as much again at once, so the
backend alone bounds how fast a pipe drains. With ``on_full="block"`` a full pipe makes
``log()`` wait for that writer (while it lives); with ``"drop"`` the call is dropped for that
backend and counted, after a short grace (``DROP_GRACE_SECONDS``) unless the writer has been
inside one hook for longer than that (the shared memory ``wire.SHARED_BYTES``).

Flush and stop requests travel on a second pipe per writer, the control pipe, written without
waiting: they never queue behind data in a full data pipe, so ``flush(timeout=)`` and
``close(timeout=)`` keep their deadline whatever the data pipes hold. The writer places each
request after the data logged before it. ``stop`` marks every writer stopping before it sends
any stop request, so a writer that exits on its request is never taken for a dead one.

Start-up: ``start`` launches every writer at once (each with SIGTERM blocked until its handler
is in place) and, by default (``Monitor(wait=False)``), returns at once: calls wait in the pipes
of writers still starting (a full one waits for room even with ``on_full="drop"``), and a start
failure is reported by the reply thread like any failure, at the caller's next call, with its
original type. With ``wait`` (``Monitor(wait=True)``, or a ``resume`` other than ``"never"``) it
returns when each replied ready or failed (``STARTUP_SECONDS`` at most, naming the backend),
re-raising a start failure with its original type and message. Failures and warnings of a
running writer come back on its reply pipe, read by one thread (which also passes on the
writer's stdout and stderr, a pipe of its own: a writer never holds this process's output open),
and are reported on the caller's thread at its next call (``policy.Policy``). A writer that dies
(a segfault in a native extension) or ends by itself (SIGTERM sent to it alone) is reported once
as ``WriterDied``, naming why; the others go on. ``close`` waits for every writer to exit, all
at once, at most ``timeout`` seconds; a writer still running then is killed with what its SDK
started (its session's process group) and its calls counted in ``undelivered``; every writer is
reaped. A writer still *starting* then (importing its SDK, starting its run: a slow start on a
loaded node, or a SIGTERM soon after ``Monitor()``) is not killed, since that would lose every
call it holds while nothing is wrong with it: it has the stop request, writes everything once
started and exits by itself (once this process has ended, within ``wire.START_SECONDS`` +
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
distribution or a folder on ``PYTHONPATH``) or whose options do not pickle runs in a worker
thread instead (``threads.ThreadDispatch``), with one INFO log line. Where no writer can
be started (no ``fork``/``exec``, no pipes) every backend runs in a thread, with one warning.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
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
import warnings
from collections import deque
from collections.abc import Sequence
from itertools import chain, repeat
from queue import SimpleQueue
from typing import Any

from .. import hookspecs, shutdown
from ..compat import packages_distributions
from ..errors import FlushTimeout, WriterDied
from ..events import Batch
from ..run import RunInfo
from . import wire
from .backends import hook_names
from .policy import Policy
from .strategy import BackendSpec, Dispatch
from .threads import ThreadDispatch, fan_out
from .warn import report_drop, report_lost
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
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux; in the fcntl module from Python 3.10)
_write = os.write
_put = SimpleQueue.put


class WriterProcess:
    """The training process's side of one writer: its pipes, its process, what it replied.

    Attributes:
        name: the backend's name.
        fd: the write end of the data pipe (non-blocking), or ``-1`` once closed.
        process: the ``subprocess.Popen`` of the writer.
        ready: ``None`` while starting, then ``True`` or the start failure (an exception).
        facts: what the backend told at its start (``Dispatch.facts``).
        handled: calls the writer reported done; ``skipped``: calls it never got.
        flushed: the last flush marker the writer answered.
        dead: the writer ended without being asked to (or was killed).
    """

    def __init__(self, spec: BackendSpec, run: RunInfo, capacity: int, index: int,
                 spool: str) -> None:
        self.name = spec.name
        self.index = index  # its place in start order: the suffix of its spool links
        self.spooled = 0  # bytes of spool files sent to it (wire.SPOOL_READ: bytes it read)
        self.ready: bool | BaseException | None = None
        self.facts: dict[str, Any] = {}
        self.handled = self.flushed = 0
        self.skipped = 0  # calls of the monitor's count this writer never got (dropped, lost)
        self.dead = self.stopping = False
        self.ending: str | None = None  # why the writer said it ends by itself, if it did
        self.changed = threading.Condition()
        start = wire.encode(("start", spec.cls.__module__, spec.cls.__qualname__, spec.name,
                             run, dict(spec.options), spool, index))
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
        _write_all(self.fd, [start])
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


class ProcessDispatch(Dispatch):
    """Every backend in a writer process of its own (module docstring).

    Attributes:
        writers: one per backend started in a process, in start order.
        threads: the backends that run in a worker thread instead, or ``None``.
    """

    mode = "process"

    def __init__(self, policy: Policy, capacity: int, on_full: str) -> None:
        super().__init__(policy, capacity, on_full)
        self.writers: list[WriterProcess] = []
        self.threads: ThreadDispatch | None = None
        self._fds: list[int] = []  # the live writers' pipes, in start order (the hot path)
        self._live: list[WriterProcess] = []
        self._writable = _writable([])  # which of ``_fds`` have room for a frame (a list)
        #: The folder of the spool files (calls larger than ``PIPE_BUF``), while writers run.
        self.spool: str | None = None
        self._spools = 0  # spool files written (their names)
        self._selector: selectors.BaseSelector | None = None
        self._reader: threading.Thread | None = None
        self._marker = 0
        self.sent = 0  # hook calls sent (each writer got those not in its ``skipped``)
        #: Whether ``start`` waits for every writer's answer (``Monitor(wait=True)``, and
        #: whenever the monitor needs it: ``resume`` other than ``"never"``).
        self.wait = False
        self._waited = True  # the start failures are reported by ``start`` itself

    # Start -------------------------------------------------------------------------------

    def start(self, specs: Sequence[BackendSpec], run: RunInfo) -> None:
        in_process, in_thread = [], []
        for spec in specs:
            why = _why_not_in_a_process(spec, run)
            if why is None:
                in_process.append(spec)
            else:
                logger.info("backend %r runs in a worker thread, not a writer process: %s",
                            spec.name, why)
                in_thread.append(spec)
        try:
            self._launch(in_process, run)
        except OSError as error:
            warnings.warn(f"writer processes cannot be started here ({error}); every backend "
                          "runs in a worker thread instead (dispatch='thread')",
                          RuntimeWarning, stacklevel=4)
            self._abandon_all()
            in_process, in_thread = [], list(specs)
        started = {}
        self._live = list(self.writers)
        self._fds = [writer.fd for writer in self._live]
        self._writable = _writable(self._fds)
        deadline = time.monotonic() + STARTUP_SECONDS
        self._waited = self.wait
        try:
            for writer, spec in zip(self.writers, in_process, strict=False):
                if not self.wait:  # its answer is handled by the reply thread (_on_reply)
                    started[writer.name] = (writer, spec)
                    writer.facts.setdefault("state", (False, None))
                    continue
                outcome = writer.wait_ready(deadline)
                self.policy.deliver(raising=False)  # warnings of its start, in order
                if outcome is True:
                    started[writer.name] = (writer, spec)
                    continue
                self._forget(writer)
                self._stop_writer(writer)
                self._start_failed(writer.name, outcome)  # type: ignore[arg-type]
            if in_thread:
                self.threads = threads = ThreadDispatch(self.policy, self.capacity, self.on_full)
                # One set of counts and media routes for both sides: what the Monitor shows.
                threads.dropped, threads.undelivered = self.dropped, self.undelivered
                threads.media, threads.missing = self.media, self.missing
                threads.start(in_thread, run)
        except BaseException:
            self.stop()
            self.close(None)
            raise
        self.writers = [writer for writer, _ in started.values()]
        for spec in specs:  # start order is selection order, whichever side runs it
            if spec.name in started:
                writer, _ = started[spec.name]
                self.hooks[spec.name] = hook_names(spec.cls)
                self.facts[spec.name] = writer.facts
                self.media.add(spec.name, getattr(spec.cls, "media_kinds", ()),
                               dict.fromkeys(self.hooks[spec.name], _nothing))
            elif self.threads is not None and spec.name in self.threads.hooks:
                self.hooks[spec.name] = self.threads.hooks[spec.name]
                self.facts[spec.name] = self.threads.facts[spec.name]

    def _launch(self, specs: Sequence[BackendSpec], run: RunInfo) -> None:
        """Start every writer at once, and the thread reading their replies."""
        if not specs:
            return
        self._selector = selectors.DefaultSelector()
        self.spool = tempfile.mkdtemp(prefix="core_monitor-spool-", dir=_spool_root())
        for index, spec in enumerate(specs):
            writer = WriterProcess(spec, run, self.capacity, index, self.spool)
            self.writers.append(writer)
            self._selector.register(writer.reply_fd, selectors.EVENT_READ, (writer, "reply"))
            self._selector.register(writer.output_fd, selectors.EVENT_READ, (writer, "output"))
        self._reader = threading.Thread(target=self._read_replies, daemon=True,
                                        name="core_monitor:replies")
        self._reader.start()

    # The reply thread --------------------------------------------------------------------

    def _read_replies(self) -> None:
        """The reply thread: each writer's replies, and its output (stdout and stderr, passed
        on to this process's ``sys.stderr``), until every writer ended."""
        selector = self._selector
        assert selector is not None
        frames = {writer.reply_fd: wire.Frames() for writer in self.writers}
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
                frames[key.fd].feed(chunk)
                for message in frames[key.fd]:
                    self._on_reply(writer, message)

    def _on_reply(self, writer: WriterProcess, message: tuple[Any, ...]) -> None:
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
            if not self._waited:  # reported at the caller's next call, its original type
                self.policy.failed_elsewhere(writer.name, "start", error,
                                             "in its writer process")

    def _ended(self, writer: WriterProcess) -> None:
        """The writer's reply pipe closed: it exited. Unless asked to, that is a failure."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            writer.process.wait(timeout=5)
        with writer.changed:
            writer.dead = not writer.stopping and writer.ready is True
            writer.changed.notify_all()
        if not self._waited and not writer.stopping and writer.ready is None:
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

    # Calls -------------------------------------------------------------------------------

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        self.sent += 1
        if not self._fds:  # no writer (a rank that does not write, or all in threads)
            if self.threads is not None:
                self.threads.send(hook, kwargs)
            return
        # Backends placed in worker threads get the call in the same pass as the pipes: the
        # room in their queues is settled first, as the pipes' is.
        puts = () if self.threads is None else self.threads.queues_with_room()
        # A batch travels as its rows, plain tuples (pickled in a third of the time of the
        # Batch object); the writer builds the Batch again (``wire.WRITE_ROWS``).
        if hook == "monitor_write" and type(kwargs["events"]) is Batch:
            frame = wire.encode((wire.WRITE_ROWS, kwargs["events"].rows))
            size = len(frame)
            parts = [frame]
        else:
            parts = wire.encode_parts((hook, kwargs))
            size = sum(memoryview(part).nbytes for part in parts)
            frame = b"".join(parts) if size <= _PIPE_BUF else b""
        if size <= _PIPE_BUF:
            live = self._live
            self._pass(frame, live if len(self._writable(0)) == len(live) else self._targets(0),
                        puts, (hook, kwargs))
        else:
            self._spool(parts, size, puts, (hook, kwargs))

    def _targets(self, spool: int) -> list[WriterProcess]:
        """The live writers that take a frame (naming a spool file of ``spool`` bytes) now:
        all of them while every pipe has room (one ``poll``); otherwise, for a full one,
        after waiting for room (``"block"``, or a writer still starting) or the drop grace
        (``"drop"``, a writer not stuck in a hook), or without it (dropped, counted). Nothing
        is written here, so an interrupt while waiting leaves no trace of the call; room only
        grows until the pass (only this thread, holding the monitor's lock, writes)."""
        live = self._live
        if len(self._writable(0)) == len(live) and (
                not spool or all(writer.spool_room(spool) for writer in live)):
            return live
        targets = []
        for writer in list(live):
            if writer.room(spool) or self._wait_room(writer, spool):
                targets.append(writer)
        return targets

    def _wait_room(self, writer: WriterProcess, spool: int) -> bool:
        """Wait for room in ``writer`` as ``on_full`` says; when there is none, the call is
        counted dropped (or undelivered, for a writer that is gone) and ``False`` returned."""
        if self.on_full == "block":
            if writer.wait_room(spool, None):
                return True
        else:
            # What is logged while a writer starts (behind Monitor(wait=False)) waits in its
            # pipe, never dropped; once ready, a full pipe drops after the grace, at once for a
            # writer stuck inside a hook.
            if writer.ready is None and writer.wait_room(spool, None, starting=True):
                return True
            if writer.idle() and writer.wait_room(spool,
                                                   time.monotonic() + DROP_GRACE_SECONDS):
                return True
            if writer.process.poll() is None:
                self._drop(writer)
                return False
        self._gone(writer)
        return False

    def _drop(self, writer: WriterProcess) -> None:
        """Drop the call for ``writer`` (``on_full="drop"``): counted, warned about once."""
        self.dropped[writer.name] = self.dropped.get(writer.name, 0) + 1
        writer.skipped += 1
        if self.dropped[writer.name] == 1:
            report_drop(writer.name, f"its pipe is full (queue_size={self.capacity})")

    def _pass(self, frame: bytes, targets: list[WriterProcess],
              puts: Sequence[Any] = (), item: Any = None) -> list[WriterProcess]:
        """Write ``frame`` (at most ``PIPE_BUF`` bytes) into the pipes of ``targets``, each of
        which has room for it, after putting ``item`` into the worker threads' queues
        ``puts`` (a put never fails); the writers that got it.

        The pass is atomic: ``deque.extend`` drives ``map(os.write, ...)`` in C, so no Python
        bytecode runs between two writes, hence no signal handler (Python runs handlers
        between bytecodes) and no other thread. ``os.write`` itself runs handlers only when
        the system call fails with EINTR (PEP 475), and a non-blocking write of at most
        ``PIPE_BUF`` bytes into a pipe with a free page never sleeps, so it never returns
        EINTR. Blocking signals with ``signal.pthread_sigmask`` would add nothing: it masks
        this thread only, another thread's C-level handler would still flag the signal, and
        the flag is acted on at the next bytecode, which comes after the pass either way.
        """
        fds = self._fds if targets is self._live else [writer.fd for writer in targets]
        done: deque[Any] = deque()
        try:
            if puts:
                done.extend(chain(map(_put, puts, repeat(item)), map(_write, fds, repeat(frame))))
            else:
                done.extend(map(_write, fds, repeat(frame)))
        except OSError as error:  # a writer that ended since the room was checked
            return self._resume_pass(frame, targets, len(done) - len(puts), error)
        return targets

    def _resume_pass(self, frame: bytes, targets: list[WriterProcess], at: int,
                     error: OSError) -> list[WriterProcess]:
        """The pass stopped at ``targets[at]``: its writer is gone (or, where a pipe with
        room may still refuse a frame, full). The frame goes to the others one at a time."""
        got = targets[:at]
        for offset, writer in enumerate(targets[at:]):
            if offset:
                try:
                    _write(writer.fd, frame)
                    got.append(writer)
                    continue
                except OSError as later:
                    error = later
            if isinstance(error, BlockingIOError) and writer.process.poll() is None:
                if self.on_full == "drop":
                    self._drop(writer)
                    continue
                with contextlib.suppress(OSError):
                    _write_all(writer.fd, [frame], writer=writer)
                    got.append(writer)
                    continue
            self._gone(writer)
        return got

    def _spool(self, parts: list[Any], size: int, puts: Sequence[Any], item: Any) -> None:
        """A frame larger than ``PIPE_BUF`` (media, a wide row): written whole into a file of
        the spool folder, hard-linked once per writer that takes it, all before anything is
        announced (an interrupt or a full disk meanwhile removes them: no trace of the call),
        then announced by a ``wire.SPOOL`` frame in one pass, as a small call is. The file
        lives on the disk, so it outlives a SIGKILL of this process; each writer removes its
        link once read."""
        targets = list(self._targets(size))  # a copy: a writer found gone leaves ``_live``
        if not targets:
            fan_out(puts, item)
            return
        assert self.spool is not None
        self._spools += 1
        name = str(self._spools)
        paths = [wire.spool_path(self.spool, name, writer.index) for writer in targets]
        try:
            _write_file(paths[0], parts)
            for path in paths[1:]:
                os.link(paths[0], path)
        except BaseException:
            for path in paths:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        got = self._pass(wire.encode((wire.SPOOL, {"name": name, "bytes": size})), targets,
                         puts, item)
        for writer, path in zip(targets, paths, strict=True):
            if writer in got:
                writer.spooled += size
            else:  # dropped or gone after the room check (rare): its link is nobody's
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def _gone(self, writer: WriterProcess) -> None:
        """``writer``'s process ended: count the call (unless it was reported otherwise) and
        stop sending to it."""
        if not writer.dead and writer.ready is True:  # a dead writer's calls are counted
            # once, at close; one that failed to start was reported as that failure
            self.undelivered[writer.name] = self.undelivered.get(writer.name, 0) + 1
            writer.skipped += 1
        self._forget(writer)

    def _forget(self, writer: WriterProcess) -> None:
        """Stop sending to ``writer`` (its process is gone)."""
        if writer in self._live:
            self._live.remove(writer)
            self._fds = [w.fd for w in self._live]
            self._writable = _writable(self._fds)

    def flush(self, lock: Any, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with lock:
            self._marker += 1
            marker = self._marker
            # On the control pipes: never behind data in a full data pipe. The writer places
            # it after every byte its data pipe held when it read the request.
            unsent = [writer for writer in self._live
                      if not writer.control(("flush", {"marker": marker}))]
        late: dict[str, int] = {writer.name: max(1, self._lost(writer)) for writer in unsent}
        for writer in list(self._live):
            if writer in unsent:
                continue
            with writer.changed:
                while writer.flushed < marker and not writer.dead:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        late[writer.name] = max(1, self._lost(writer))
                        break
                    writer.changed.wait(0.5 if left is None else min(left, 0.5))
        if self.threads is not None:
            try:
                self.threads.flush(_NoLock(), None if deadline is None else max(
                    0.0, deadline - time.monotonic()))
            except FlushTimeout as error:
                late.update(error.pending)
        self.policy.deliver()
        if late:
            raise FlushTimeout(late, timeout)

    def stop(self) -> None:
        """Every writer is marked stopping before any is sent the stop request (a writer that
        exits on it is then never taken for a dead one), each on its control pipe, never
        waiting. The request names SIGTERM when the process is closing on it
        (``shutdown.terminating``): the writer reports it as the run's end
        (``monitor_crash``)."""
        for writer in self.writers:
            writer.stopping = True
        reason = shutdown.terminating
        for writer in self.writers:
            writer.control(("stop", {"reason": reason}))
        if self.threads is not None:
            self.threads.stop()

    def close(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        starting: list[str] = []  # writers left to finish their start and write by themselves
        for writer in self.writers:
            writer.stopping = True
            writer.close_pipe()
        self._live, self._fds = [], []
        self._writable = _writable([])
        for writer in self.writers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                writer.process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                if writer.ready is None and writer.process.poll() is None:
                    starting.append(writer.name)  # module docstring: it goes on by itself
                    continue
                self._stop_writer(writer)
                lost = self._lost(writer)
                self.undelivered[writer.name] = self.undelivered.get(writer.name, 0) + lost
                logger.error("backend %r: its writer process did not finish within "
                             "close(timeout=%s) and was killed", writer.name, timeout)
        if starting:
            logger.warning(
                "backend(s) %s: the writer process was still starting when close(timeout=%s) "
                "ran out; it writes everything logged once started, then exits by itself "
                "(at most %.0f s after this process ends)", ", ".join(map(repr, starting)), timeout,
                START_SECONDS + DRAIN_SECONDS)
            self._remove_spool(keep=starting)  # their links: they read them, then the folder
        else:
            self._remove_spool()  # every writer has ended: what is left there is nobody's
        if self._reader is not None:  # it passes on a starting writer's output until its end
            self._reader.join(timeout=10 if not starting or deadline is None
                              else max(0.0, deadline - time.monotonic()))
        for writer in self.writers:
            if writer.dead:  # what it held when it died, and what was sent after
                lost = self._lost(writer)
                if lost:
                    self.undelivered[writer.name] = self.undelivered.get(writer.name, 0) + lost
        if self.threads is not None:
            self.threads.close(None if deadline is None else max(
                0.0, deadline - time.monotonic()), report=False)
        if self.undelivered:
            report_lost(self.undelivered, f"not written when close(timeout={timeout}) gave up "
                        "or its writer process had ended; the backend is not closed")
        if self.dropped:
            report_lost(self.dropped, "dropped, its buffer was full (on_full='drop')")
        self.policy.deliver(raising=False)
        self.policy.raise_pending()

    def _lost(self, writer: WriterProcess) -> int:
        """Calls sent to ``writer`` that it has not reported done."""
        return max(0, self.sent - writer.skipped - writer.calls_handled())

    def _stop_writer(self, writer: WriterProcess) -> None:
        """Kill ``writer`` and reap it."""
        writer.stopping = True
        writer.close_pipe()
        writer.kill()
        writer.process.wait()

    def _abandon_all(self) -> None:
        for writer in self.writers:
            self._stop_writer(writer)
        self.writers = []
        self._remove_spool()

    def _remove_spool(self, keep: Sequence[str] = ()) -> None:
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

    def before_fork(self) -> None:
        """Nothing waits in a user-space buffer here; the worker threads' part is flushed."""
        if self.threads is not None:
            self.threads.before_fork()

    def forget(self) -> None:
        """In a forked child: close the inherited pipes, so that the child neither writes to
        a writer nor keeps one alive; the child never waits for or kills the writers."""
        for writer in self.writers:
            for fd in (writer.fd, writer.control_fd, writer.reply_fd, writer.output_fd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            writer.fd = writer.control_fd = -1
        self.writers, self._live, self._fds = [], [], []
        self._writable = _writable([])
        self.spool = None  # the parent's: its writers read it, its close removes it
        if self.threads is not None:
            self.threads.forget()


class _NoLock:
    """A context manager that holds nothing (the monitor's lock is not needed twice)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


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


def _nothing(**kwargs: Any) -> None:
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


def _write_all(fd: int, parts: list[Any], *, writer: WriterProcess | None = None) -> None:
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


def _write_file(path: str, parts: list[Any]) -> None:
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


def _writable(fds: list[int]) -> Any:
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
    named = {ep.value.split(":")[0].split(".")[0]
             for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT_NAME)}
    return frozenset(packages_distributions()) | named


def _why_not_in_a_process(spec: BackendSpec, run: RunInfo) -> str | None:
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
