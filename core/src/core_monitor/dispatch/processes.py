"""``dispatch="process"`` (the default): each backend runs in a writer process of its own.

The training process validates each call on the caller's thread, encodes it once
(``core_monitor.dispatch.wire``) and writes the frame into every writer's pipe in one C-level
pass (``os.write`` mapped over the pipes by ``deque.extend``: no Python bytecode, so no
signal handler and no other thread, runs between two writes). When ``log()`` returns the call
is in the kernel: if the training process dies by any means, each writer still reads it,
writes it, flushes, marks the run as crashed (``monitor_crash``) and exits
(``core_monitor.dispatch.writer``). No tracker SDK is imported in the training process.

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
started and exits by itself (once this process has ended, within ``writer.START_SECONDS`` +
``writer.DRAIN_SECONDS`` at most).

Termination (``core_monitor.shutdown``): on SIGTERM this process closes its monitors, and the
stop request names the signal (``shutdown.terminating``): each writer writes everything logged,
then records the run's end through ``monitor_crash``. Writers run in sessions of their own, so
``kill -TERM -- -PGID`` reaches only this process; a scheduler that signals every process of
the job (Slurm) reaches the writers too, and each keeps serving until the stop request comes
(``writer.TERM_SECONDS`` at most), SIGTERM being blocked in what its SDK starts. A writer whose
training process dies ends within ``writer.DRAIN_SECONDS`` even when stuck inside a hook
(counted from the end of its start, when it was still starting: ``writer.START_SECONDS``).

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
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from itertools import repeat
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
from .threads import ThreadDispatch
from .warn import report_drop, report_lost
from .wire import BUSY_SINCE, HANDLED, SHARED_BYTES
from .writer import DRAIN_SECONDS, START_SECONDS

logger = logging.getLogger("core_monitor")

#: Seconds a writer has to construct its backend and reply (an SDK's import and start).
STARTUP_SECONDS = 120.0
#: Bytes of pipe per call of ``queue_size`` (a 10-scalar call is about 300 bytes).
BYTES_PER_CALL = 1024
#: Seconds a full pipe of an idle writer gets to drain before a call is dropped.
DROP_GRACE_SECONDS = 0.05
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux; in the fcntl module from Python 3.10)
_write = os.write


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

    def __init__(self, spec: BackendSpec, run: RunInfo, capacity: int) -> None:
        self.name = spec.name
        self.ready: bool | BaseException | None = None
        self.facts: dict[str, Any] = {}
        self.handled = self.flushed = 0
        self.skipped = 0  # calls of the monitor's count this writer never got (dropped, lost)
        self.dead = self.stopping = False
        self.ending: str | None = None  # why the writer said it ends by itself, if it did
        self.changed = threading.Condition()
        start = wire.encode(("start", spec.cls.__module__, spec.cls.__qualname__, spec.name,
                             run, dict(spec.options)))
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
            _resize(self.fd, capacity * BYTES_PER_CALL)
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
        for spec in specs:
            writer = WriterProcess(spec, run, self.capacity)
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
        # A batch travels as its rows, plain tuples (pickled in a third of the time of the
        # Batch object); the writer builds the Batch again (``wire.WRITE_ROWS``).
        frame = (wire.encode((wire.WRITE_ROWS, kwargs["events"].rows))
                 if hook == "monitor_write" and type(kwargs["events"]) is Batch else None)
        if frame is not None and len(frame) <= _PIPE_BUF:
            done: deque[int] = deque()
            try:
                done.extend(map(_write, self._fds, repeat(frame)))
            except OSError as error:
                self._resume_send(len(done), error, [frame])
        else:
            self._send_parts(wire.encode_parts((hook, kwargs)) if frame is None else [frame])
        if self.threads is not None:
            self.threads.send(hook, kwargs)

    def _resume_send(self, at: int, error: OSError, parts: list[Any]) -> None:
        """The C pass stopped at pipe ``at`` (full, or its writer is gone): handle it, then
        write the frame to the pipes after it one at a time."""
        writers = list(self._live)
        self._one_failed(writers[at], error, parts)
        for writer in writers[at + 1:]:
            try:
                _write_all(writer.fd, parts, first=True)
            except OSError as later:
                self._one_failed(writer, later, parts)

    def _send_parts(self, parts: list[Any]) -> None:
        """A frame too large to be written atomically (media, a large batch): every pipe in
        turn, waiting for room (``"block"``) or dropping it (``"drop"``) for a full one."""
        for writer in list(self._live):
            try:
                _write_all(writer.fd, parts, first=True)
            except OSError as error:
                self._one_failed(writer, error, parts)

    def _one_failed(self, writer: WriterProcess, error: OSError, parts: list[Any]) -> None:
        # A writer still starting (writers start behind Monitor(wait=False)) is waited for:
        # what is logged before it is ready waits in its pipe, never dropped.
        if (isinstance(error, BlockingIOError) and self.on_full == "drop"
                and writer.ready is None):
            try:
                if _write_while_starting(writer, parts):
                    return
            except OSError as later:
                error = later
        if isinstance(error, BlockingIOError):
            if self.on_full == "block" or (
                    writer.idle() and _wait_writable(writer,
                                                     time.monotonic() + DROP_GRACE_SECONDS)):
                try:  # "drop" never waits past the grace: no room for the frame, dropped
                    _write_all(writer.fd, parts, first=True,
                               writer=writer if self.on_full == "block" else None)
                    return
                except OSError as later:
                    error = later
            if isinstance(error, BlockingIOError):
                self.dropped[writer.name] = self.dropped.get(writer.name, 0) + 1
                writer.skipped += 1
                if self.dropped[writer.name] == 1:
                    report_drop(writer.name, f"its pipe is full (queue_size={self.capacity})")
                return
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


def _resize(fd: int, size: int) -> None:
    """Make the pipe hold ``size`` bytes (rounded to pages), within what the system allows."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the default size
        return
    size = max(mmap.PAGESIZE, min(size, _pipe_max_size()))
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), size)


@functools.lru_cache(maxsize=1)
def _pipe_max_size() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size") as limit:
            return int(limit.read())
    except (OSError, ValueError):
        return 1 << 20


def _write_all(fd: int, parts: list[Any], *, first: bool = False,
               writer: WriterProcess | None = None) -> None:
    """Write the frame ``parts`` whole into ``fd``, waiting for room while the pipe is full.

    Raises:
        BlockingIOError: ``first`` and the pipe has no room for the frame's first byte (so
            nothing of it was written): the caller decides to wait or drop.
        BrokenPipeError: the writer is gone.
    """
    views = [memoryview(part).cast("B") for part in parts]
    while views:
        try:
            written = os.writev(fd, views)
        except BlockingIOError:
            if first and writer is None:
                raise
            if writer is not None and writer.process.poll() is not None:
                raise BrokenPipeError(f"the writer of backend {writer.name!r} ended") from None
            select.select([], [fd], [], 0.1)
            continue
        first = False
        while views and written >= views[0].nbytes:
            written -= views[0].nbytes
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def _write_while_starting(writer: WriterProcess, parts: list[Any]) -> bool:
    """Wait for room in ``writer``'s pipe while it starts (and lives); whether the frame was
    written. Once it is ready, a full pipe is the drop policy's business again."""
    while writer.ready is None and writer.process.poll() is None:
        select.select([], [writer.fd], [], 0.1)
        try:
            _write_all(writer.fd, parts, first=True)
            return True
        except BlockingIOError:
            continue
    return False


def _wait_writable(writer: WriterProcess, deadline: float) -> bool:
    """Whether ``writer``'s pipe has room again before ``deadline``."""
    left = deadline - time.monotonic()
    return left > 0 and bool(select.select([], [writer.fd], [], left)[1])


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
