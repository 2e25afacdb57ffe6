"""The writer channel (the default kind): a backend runs in a writer process of its own.

``WriterChannel`` is the training process's side of one writer: its control pipe, its process,
what it replied. ``host.WriterHost`` is what the writer channels of one monitor share: their
start, the one thread reading every writer's replies, restarts and the end. The data path is
the run's journal (``core_monitor.journal``): the fan-out (``fanout.FanOut``) appends each call
once, encoded once (``core_monitor.dispatch.wire``), with one ``write``, and every writer reads
it from there at its own pace (``journal.Tail``), a large call (an image, a row of thousands of
tags) the same way as a small one. What a writer has not read is on disk, not in a pipe: when
``log()`` returns the call is in the journal (the page cache), so if the training process dies
by any means each writer still reads it, writes it, flushes, marks the run as crashed
(``monitor_crash``) and exits (``core_monitor.dispatch.writer``); if a writer dies, the one
started in its place reads on from its backend's cursor. Without the run's journal
(``Monitor(journal=False)``, or one that cannot be written) the writers read a journal of the
monitor's own in ``journal_root()`` (``/dev/shm``), removed at close (or by the last writer
left to finish its start). No tracker SDK is imported in the training process.

Each writer's bound is bytes of the journal it may be behind (``WriterChannel.behind``: what
was appended since it started, less what it read into its inbox, which holds as much again):
``Monitor(budget=...)``, else ``queue_size`` calls of ``BYTES_PER_CALL``. With
``on_full="block"`` a writer past it makes ``log()`` wait for it (while it lives; it is woken
at once); with ``"drop"`` the call is dropped for that backend and counted, after a short grace
(``DROP_GRACE_SECONDS``) unless the writer has been inside one hook for longer than that (the
shared memory, ``wire.SharedPage``), and the writer is told which calls to skip (a ``skip``
request before the first, an ``unskip`` before the next it gets); a backend with a budget is
detached (``fanout.FanOut.detach``), never waited for.

Flush and stop requests travel on the control pipe, written without waiting, each naming the
journal's next record: the writer places it after every call logged before it, so
``flush(timeout=)`` and ``close(timeout=)`` keep their deadline whatever a writer has left to
read. The fan-out's ``stop`` marks every writer stopping before it sends any stop request, so a
writer that exits on its request is never taken for a dead one.

Start-up: ``host.WriterHost.launch`` starts every writer at once (each with SIGTERM blocked until
its handler is in place) and the fan-out, by default (``Monitor(wait=False)``), returns at
once: calls wait in the journal for writers still starting (one past its bound is waited for
even with ``on_full="drop"``), and a start failure is reported by the reply thread like any
failure, at the caller's next call, with its original type. With ``wait``
(``Monitor(wait=True)``, or a ``resume`` other than ``"never"``) it returns when each replied
ready or failed
(``STARTUP_SECONDS`` at most, naming the backend), re-raising a start failure with its original
type and message. Failures and warnings of a running writer come back on its reply pipe, read
by one thread (which also passes on the writer's stdout and stderr, a pipe of its own: a writer
never holds this process's output open), and are reported on the caller's thread at its next
call (``policy.Policy``). A writer that dies (a segfault in a native extension) or ends by
itself (SIGTERM sent to it alone) is reported once as ``WriterDied``, naming why; the others go
on. ``host.WriterHost.close`` waits for every writer to exit, all at once, at most ``timeout``
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
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import WriterDied
from ..plugins import installed_plugins, packages_distributions
from ..run import RunInfo
from . import wire
from .channel import FULL, GONE, ROOM, BackendSpec, Channel
from .wire import SharedPage

if TYPE_CHECKING:  # journal imports this package's wire
    from ..journal import Journal

logger = logging.getLogger("core_monitor")

#: Seconds a writer has to construct its backend and reply (an SDK's import and start).
STARTUP_SECONDS = 120.0
#: Bytes of pipe per call of ``queue_size`` (a 10-scalar call is about 300 bytes).
BYTES_PER_CALL = 1024
#: Seconds a full pipe of an idle writer gets to drain before a call is dropped.
DROP_GRACE_SECONDS = 0.05
#: Bytes below which a writer's bound is small: it is woken to read at every call (a writer
#: reading late by its schedule delay would make the training process wait, or drop calls).
SMALL_BOUND = 64 * 1024
#: Seconds of the first nap while waiting for a writer to read (``WriterChannel.wait_room``).
FIRST_NAP_SECONDS = 0.0001
#: The ``wire.Wake`` request, encoded once (it may go with every call to a writer with a small
#: bound).
_WAKE = wire.encode(wire.Wake())
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux; in the fcntl module from Python 3.10)


class WriterChannel(Channel):
    """The training process's side of one writer: its pipes, its process, what it replied.

    Args:
        spec: the backend to start there.
        run: the run it starts.
        limit: bytes of the journal the writer may be behind (``Monitor(budget=...)``, or
            ``queue_size`` calls of ``BYTES_PER_CALL``) before a call waits, is dropped or
            detaches it (``make_room``).
        journal: the journal the writer reads (``core_monitor.journal.Journal``).
        since: for a writer started again (``host.WriterHost.relaunch``), the seq it first reads
            (its backend's cursor); ``None``: the journal's next call.
        ephemeral: the journal is the monitor's own (``Monitor(journal=False)``).
        start_slot: a ``memfd`` the writer takes an ``flock`` on before it imports and starts
            its backend (``host.WriterHost.launch``: writers sharing one start one after another),
            or -1 (none: it starts at once).

    Attributes:
        name: the backend's name.
        process: the ``subprocess.Popen`` of the writer.
        ready: ``None`` while starting, then ``True`` or the start failure (an exception).
        facts: what the backend told at its start (``FanOut.facts``).
        handled: calls the writer reported done; ``skipped``: calls it never got.
        flushed: the last flush marker the writer answered.
        dead: the writer ended without being asked to (or was killed), after its start.
        ended: the writer's process exited (its reply pipe closed), whatever the reason.
        sending: whether the fan-out still sends to it (``False`` once it is found gone, and
            from ``close`` on).
        skipping: the seq of the first call of the current run of calls dropped for it.

    Raises:
        OSError: a pipe, the shared memory or the process could not be made.
    """

    kind: ClassVar[str] = "process"

    def __init__(self, spec: BackendSpec, run: RunInfo, limit: int, journal: Journal,
                 since: int | None = None, ephemeral: bool = False,
                 start_slot: int = -1) -> None:
        super().__init__(spec.name)
        limit = max(limit, mmap.PAGESIZE)  # as a pipe's was: a page at least
        self.spec, self.run, self.limit = spec, run, limit  # to start it again
        #: Bytes behind past which the writer is woken to read at once (``host.WriterHost.settle``).
        self.trigger = 0 if limit < SMALL_BOUND else limit // 2
        self.full = f"it is {limit} bytes behind (its budget or queue_size)"
        self.journal = journal
        #: The journal's byte count when this writer started: it reads from there on.
        self.base_bytes = journal.total
        self.sending = True
        self.skipping: int | None = None
        self.woken_at = -2  # the bytes it had read when last woken (``wake``)
        self.marker = 0  # the last flush marker sent
        self.ready: bool | BaseException | None = None
        self.facts: dict[str, Any] = {}
        self.handled = self.flushed = 0
        self.dead = self.stopping = False
        self.ended = False  # its reply pipe closed: the process exited, whatever the reason
        self.ending: str | None = None  # why the writer said it ends by itself, if it did
        self.changed = threading.Condition()
        start = wire.encode(wire.Start(spec.cls.__module__, spec.cls.__qualname__, spec.name,
                                       run, dict(spec.options), str(journal.folder),
                                       journal.next_seq, since, ephemeral, limit, start_slot))
        control_read, self.control_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        self.output_fd, output_write = os.pipe()
        shared_fd = (os.memfd_create("core_monitor-shared") if hasattr(os, "memfd_create")
                     else -1)
        try:
            if shared_fd >= 0:
                os.ftruncate(shared_fd, mmap.PAGESIZE)
            self.shared = SharedPage.open(shared_fd)
            # Its own session: a Ctrl-C (SIGINT to the terminal's process group) is the
            # training process's business. Its own output pipe: it never holds the training
            # process's stdout/stderr (a shell or CI step waiting on them would wait for it).
            # Started with SIGTERM blocked (a signal mask is inherited): one that comes
            # while it imports waits for its handler (its reader thread unblocks it).
            with _sigterm_blocked():
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "core_monitor.dispatch.writer",
                     str(control_read), str(reply_write), str(shared_fd), str(os.getpid())],
                    pass_fds=[fd for fd in (control_read, reply_write, shared_fd, start_slot)
                              if fd >= 0],
                    stdin=subprocess.DEVNULL, stdout=output_write, stderr=output_write,
                    start_new_session=True,
                )
        finally:
            for fd in (control_read, reply_write, output_write, shared_fd):
                if fd >= 0:
                    os.close(fd)
        os.write(self.control_fd, start)  # into an empty pipe: whole, at once
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
        """Whether a writer behind may still catch up soon: it is between calls, or inside a
        hook that started less than ``DROP_GRACE_SECONDS`` ago (a hung hook drops at once)."""
        shared = self.shared
        if shared is None or not shared.busy:
            return True
        return time.monotonic() - shared.busy_since < DROP_GRACE_SECONDS

    def behind(self) -> int:
        """Bytes of the journal appended since this writer started that it has not read."""
        read = self.shared.read_bytes if self.shared is not None else 0
        return self.journal.total - self.base_bytes - read

    def wake(self) -> None:
        """Ask the writer to read the journal at once (a ``wake`` request), unless it was
        asked since it last read (the request is still in its pipe, or it is busy)."""
        read = self.shared.read_bytes if self.shared is not None else -1
        if read < 0 or read != self.woken_at:
            self.woken_at = read
            self.send(_WAKE)

    def room(self, size: int) -> bool:
        """Whether a record of ``size`` bytes keeps the writer within its ``limit`` (a record
        larger than the limit fits a writer that has read everything)."""
        behind = self.behind()
        return behind <= 0 or behind + size <= self.limit

    def wait_room(self, size: int, deadline: float | None, *, starting: bool = False) -> bool:
        """Wait for ``room(size)`` until ``deadline`` (``None``: no limit), while the writer
        lives (and, with ``starting``, while it is still starting); whether there is room.
        The writer is asked to read at once (a ``wake`` request); naps grow from 0.1 ms to
        2 ms. Nothing is appended meanwhile: an interrupt here leaves no trace of the call."""
        nap = FIRST_NAP_SECONDS
        self.wake()
        while True:
            if self.room(size):
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if (self.process.poll() is not None or (left is not None and left <= 0)
                    or (starting and self.ready is not None)):
                return False
            time.sleep(min(nap, 0.1 if left is None else max(left, 0.0)))
            nap = min(nap * 2, 0.002)

    def make_room(self, size: int, on_full: str) -> str:
        """Room for a record of ``size`` bytes (``room``), else as ``on_full`` says:
        ``"block"`` waits while the writer lives; ``"drop"`` waits while it is still starting
        (what is logged behind ``Monitor(wait=False)`` is never dropped), then gives a writer
        not stuck inside a hook ``DROP_GRACE_SECONDS``; ``FULL`` after that, ``GONE`` when the
        process ended. ``"detach"`` (a backend with a budget) waits for nothing: ``FULL`` at
        once."""
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

    def skip_from(self, seq: int) -> None:
        """Calls from the journal's record ``seq`` on are not for this writer (dropped for
        it, or its budget spent): a ``skip`` request, once per run of skipped calls."""
        if self.skipping is None:
            self.skipping = seq
            self.control(wire.Skip(seq))

    def unskip(self, to: int) -> None:
        """The current run of skipped calls (``skip_from``) ends before the journal's record
        ``to``: an ``unskip`` request; nothing when no call is skipped."""
        if self.skipping is not None:
            self.control(wire.Unskip(to))
            self.skipping = None

    def request_flush(self) -> int:
        """A flush request on the control pipe, naming the journal's next record (the writer
        places it after every call logged before it); the marker to wait for, ``0`` for a
        writer no longer sent to. A request that cannot be written (the writer ended, e.g.
        after its start failed, or it is hung with its pipe full) still gives the marker:
        ``wait_flushed`` returns once the writer is known to answer no more (its failure
        reported as that), or is late at the deadline."""
        if not self.sending:
            return 0
        self.marker += 1
        self.control(wire.Flush(self.marker, self.journal.next_seq))
        return self.marker

    def wait_flushed(self, ticket: int, deadline: float | None) -> bool:
        """Wait for the writer's answer to flush ``ticket``, until ``deadline``. A writer that
        will never answer is not waited for: one that failed to start (its failure was
        reported as that; it holds nothing), or whose process has ended for any reason (what
        it held is counted at ``close``). Whether nothing is late."""
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
        self.control(wire.Stop(reason, self.journal.next_seq))

    def forget(self) -> None:
        """Close the inherited pipes: the child neither writes to the writer nor keeps it
        alive; it never waits for or kills it."""
        for fd in (self.control_fd, self.reply_fd, self.output_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.control_fd = -1
        self.sending = False

    def stop_now(self) -> None:
        """Kill the writer and reap it."""
        self.stopping = True
        self.close_pipe()
        self.kill()
        self.process.wait()

    def control(self, request: tuple[Any, ...]) -> bool:
        """Write ``request`` (a record of ``wire``'s process boundary: ``wire.Flush``,
        ``wire.Stop``, ...) into the control pipe, never waiting: it holds only requests, so it
        is full only when the writer has not read hundreds of them (it is hung). Whether it
        was written."""
        return self.send(wire.encode(request))

    def send(self, frame: bytes) -> bool:
        """Write an encoded request into the control pipe (``control``)."""
        if self.control_fd < 0:
            return False
        try:
            return os.write(self.control_fd, frame) > 0
        except OSError:
            return False

    def calls_handled(self) -> int:
        """Calls the writer has handled: counted live in the shared memory, else as last
        replied."""
        if self.shared is not None:
            return max(self.handled, self.shared.handled)
        return self.handled

    def close_pipe(self) -> None:
        """Close the control pipe's write end: the writer sees the end of input."""
        fd, self.control_fd = self.control_fd, -1
        if fd >= 0:
            os.close(fd)

    def kill(self) -> None:
        """SIGKILL the writer and what its SDK started (its session's process group)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                with contextlib.suppress(OSError):
                    self.process.kill()

    def has_ended(self) -> bool:
        """Whether the reply thread saw the process end (its reply pipe closed)."""
        return self.ended

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


def nothing(**kwargs: Any) -> None:
    """Stands for a hook that runs in the writer process (``MediaRoutes`` needs a callable)."""


def journal_root() -> str | None:
    """Where a monitor's own journal goes (``Monitor(journal=False)``, or the run's failed):
    ``/dev/shm`` (memory, on Linux) when it is a writable folder, else the temporary folder
    (``tempfile.gettempdir()``)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


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
