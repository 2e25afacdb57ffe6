"""A backend's writer process: ``python -m core_monitor.dispatch.writer CONTROL REPLY SHARED
PARENT``.

Started by ``core_monitor.dispatch.processes`` (a fresh interpreter, never ``multiprocessing``,
which would import the user's ``__main__`` again), one per backend. The first frame
(``core_monitor.dispatch.wire``) on the pipe ``CONTROL`` is the start frame: the backend's
class by module path, the ``RunInfo``, the options, and the journal to read
(``core_monitor.journal``: its folder, the seq of the first call for this writer, the seq to
read from when it was started again at its backend's cursor, whether the journal is the
monitor's own, and the bytes it may hold). The calls are the journal's records, in the order
logged, whatever their size. Flush and stop requests follow on ``CONTROL``, each naming the
journal's next record, and so do ``skip``/``unskip`` (calls dropped for this backend) and
``journal`` (the monitor's journal failed: read on in another from a seq on). It answers on
the pipe ``REPLY``: ready or the start failure, each hook failure, each warning, each flush
done. ``SHARED`` is a small shared memory (``wire.SharedPage``): whether a hook runs and
since when, the calls handled, the bytes of the journal read.

Two threads:

* the reader follows the journal in batches (OpenTelemetry's batch processor): every
  ``SCHEDULE_DELAY`` seconds while calls come (``IDLE_DELAY`` once none came for
  ``IDLE_AFTER``), and at once when a request or SIGTERM comes on ``CONTROL``, it reads the
  whole records appended since into an in-memory inbox (as many bytes as the training
  process lets the writer be behind), so the writer wakes once per batch, not once per call;
  it places a flush or stop request in the inbox after every call logged before it; and it
  watches the training process (its parent) and SIGTERM;
* the main thread constructs the backend, then takes the inbox in order and calls the hooks.

How it ends:

* a stop request: everything logged before it is written, then flush and close (with
  ``monitor_crash`` first when the request carries a reason: the training process is closing
  on SIGTERM);
* the training process's death (end of ``CONTROL``, or the parent process id changing): every
  whole record of the journal is written, then flush, ``monitor_crash`` (the reason), close;
* SIGTERM (a scheduler's preemption signals every process of the job): the writer keeps
  serving the training process, which is closing its monitor on the same signal; if no stop
  request came within ``TERM_SECONDS``, it writes what the journal holds and ends as after a
  death, the reason naming SIGTERM. SIGTERM is blocked on the main thread, hence in every
  thread and process the SDK starts (wandb's service is a Go program, which unblocks it: it
  dies of a job-wide SIGTERM with what it had not written, the wandb backend raises
  ``TrackerLost``, and ``Writer.start_again`` continues the run from the journal).

A hook that raises ``core_monitor.TrackerLost`` (the tracker's own process lost what it held)
has its backend started again in this process (``Writer.start_again``); a writer started again
by the training process after its predecessor died reads the backend's storage first
(``Writer.continued``): in both, the calls past the cursor that the storage holds are not
handed over again (``core_monitor.stored``).

The reader thread ends the process (``os._exit(3)``) ``DRAIN_SECONDS`` after a death or SIGTERM
was seen, even when the main thread is stuck inside a hook, but never while it makes progress
(``wire.Progress``: its count of calls handled moved within ``wire.PROGRESS_SECONDS``, or a
closing hook has run for less than ``wire.CLOSE_HOOK_SECONDS``); seen while the backend was still
starting, ``DRAIN_SECONDS`` after the start ended (a start gets ``START_SECONDS`` more). The
writer ignores SIGINT (a Ctrl-C in the terminal is the training process's business), runs in a
session of its own, writes its output to pipes of its own (forwarded by the training process),
and after start-up lowers its CPU priority (and that of the processes its SDK started) by
``NICE``, and so the scheduling groups of their sessions (Linux autogroup: ``lower_groups``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import importlib
import mmap
import os
import select
import signal
import sys
import threading
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

from .. import journal as jr
from ..errors import BackendWarning, TrackerLost
from ..journal import hold, write_cursor
from ..media import MediaRoutes
from ..resume import backend_state
from . import wire
from .backends import Backend, flush_confirms, new_manager, start_backend
from .wire import DRAIN_SECONDS, START_SECONDS, SharedPage

#: Bytes of records the inbox holds at most (the journal holds the rest, on disk).
INBOX_BYTES = 1 << 20
#: Seconds the reader lets calls gather in the journal before it reads them again once it found
#: some (OpenTelemetry's ``BatchSpanProcessor``: a schedule delay): the writer wakes once per
#: batch, not once per call, so its CPU does not compete with the trainer call by call. A flush
#: or stop request, a wake request (the training process waits for room) or SIGTERM is read
#: at once, and the journal read right after.
SCHEDULE_DELAY = 0.02
#: Seconds between two reads of the journal once nothing came in ``IDLE_AFTER`` seconds (an
#: idle trainer costs a writer a few wake-ups a second); the first call after an idle spell
#: reaches the backend this late at most.
IDLE_DELAY = 0.1
IDLE_AFTER = 1.0
#: Seconds after SIGTERM that the writer waits for the training process's stop request before
#: it ends by itself (the training process closes its monitor on the same signal).
TERM_SECONDS = 5.0
#: Seconds between the reader thread's looks at the parent process and the clock while the
#: inbox is full.
WATCH_SECONDS = 0.25
#: How much lower than the training process a writer runs (``os.nice``).
NICE = 10
#: Times a writer starts its backend again after ``TrackerLost`` (``Writer.start_again``).
TRACKER_RESTARTS = 3
#: What the reader writes into its own wake-up pipe (a signal writes its number).
_WAKE = b"\0"


class Inbox:
    """What the reader thread hands the main thread, in order: ``("call", (seq, frame))``,
    ``("control", message)``, ``("start", message)`` and ``("end", reason)`` items, at most
    ``limit`` bytes of calls."""

    def __init__(self, limit: int) -> None:
        self.items: deque[tuple[str, Any]] = deque()
        self.bytes = 0
        self.limit = limit
        self.changed = threading.Condition()

    def put(self, kind: str, value: Any) -> None:
        with self.changed:
            self.items.append((kind, value))
            self.changed.notify_all()

    def put_calls(self, calls: list[tuple[int, bytes]]) -> None:
        with self.changed:
            self.items.extend(("call", call) for call in calls)
            self.bytes += sum(len(frame) for _, frame in calls)
            self.changed.notify_all()

    def room(self) -> int:
        return max(0, self.limit - self.bytes)

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
    """The writer's state: the pipes, the journal it reads, the backend, the inbox."""

    def __init__(self, control_fd: int, reply_fd: int, shared_fd: int,
                 parent: int | None = None) -> None:
        self.control_fd = control_fd
        self.reply_fd = reply_fd
        self.shared = SharedPage.open(shared_fd)
        self.backend: Backend | None = None
        #: ``(name, class, RunInfo, options)`` the backend was started with.
        self.spec: tuple[str, Any, Any, dict[str, Any]] | None = None
        self.tracker_restarts = 0  # times the backend was started again (``TrackerLost``)
        self.crashed: str | None = None  # the reason ``monitor_crash`` was told, once it was
        self.current: int | None = None  # the seq of the call being handled, if any
        self.flush_confirms = True  # backends.flush_confirms of the backend's class
        self.handled = 0  # hook calls handled (the undelivered count of a killed writer)
        # The training process, as it named itself: it may have died (and this writer been
        # re-parented) before this line runs, writers starting behind Monitor().
        self.parent = os.getppid() if parent is None else parent
        self.replies_broken = False
        self.reply_lock = threading.Lock()
        self.inbox = Inbox(INBOX_BYTES)
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        #: Why the writer ends without a stop request (set by the reader thread), if it does.
        self.ending: str | None = None
        self.deadline: float | None = None  # when the reader thread ends the process
        self.started = False  # the start ended (ready or failed): the drain limit applies
        self.backlog: list[tuple[str, Any]] = []  # inbox items that came with the start frame
        self.orphaned = False  # the training process died
        # The run's journal (``core_monitor.journal``), which the reader thread follows
        # (``tail``) from ``since`` (the backend's cursor, for a writer started again) or
        # ``base`` (the first call this writer is for: records before it were the backend's
        # predecessor's, and are handled without being counted). The cursor moves to
        # ``next_seq`` after a flush or close that raised nothing, never past ``cap`` (the
        # first call it did not get, or the first that raised).
        self.journal: str | None = None
        self.ephemeral = False  # a journal of the monitor's own (``Monitor(journal=False)``)
        self.tail: jr.Tail | None = None
        self.base = 0
        self.next_seq = 0
        self.cap: int | None = None
        #: Started again at the backend's cursor (``since``): the calls past it its storage
        #: already holds (not handed over again), and the points of the one stored in part.
        self.since: int | None = None
        self.start_slot = -1  # the memfd to flock before starting (``take_start_slot``)
        self.cursor_lock: int | None = None  # the descriptor holding the cursor's lock
        self.stored: set[int] = set()
        self.held: dict[int, Any] = {}
        self.skips: list[list[int | None]] = []  # [from, to) ranges of calls not for it
        self.moves: list[wire.MoveJournal] = []  # journals to go on in, from a seq on
        self.moved_bytes = 0  # bytes read in journals left behind

    # Replies -----------------------------------------------------------------------------

    def reply(self, message: tuple[Any, ...]) -> None:
        """Send ``message`` (a reply record of ``wire``'s process boundary: ``wire.Ready``,
        ``wire.Flushed``, ...) to the training process; silently nothing once it is gone."""
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
        self.reply(wire.Warned(*wire.warning_parts(message, category)))

    # The reader thread ---------------------------------------------------------------------

    def read_forever(self) -> None:
        """The reader thread (module docstring); never returns before the process ends."""
        if hasattr(signal, "pthread_sigmask"):  # started with it blocked (processes.py)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.set_blocking(self.control_fd, False)
        controls = wire.Frames()
        control_open = True
        waiting: list[Any] = []  # flush and stop requests, placed once the journal reached them
        pending_end: str | None = None  # why the writer ends, placed once the journal is read
        term_at: float | None = None
        stopped = False  # a stop request came: the training process waits for this writer
        progress: wire.Progress | None = None  # looked at once the drain limit passed
        found_at = time.monotonic()  # when the journal last had calls
        while True:
            watch = [self.wake_read] + ([self.control_fd] if control_open else [])
            now = time.monotonic()
            if waiting or pending_end is not None:
                delay = 0.0 if self.inbox.room() else WATCH_SECONDS
            elif not self.inbox.room():
                delay = WATCH_SECONDS
            else:
                delay = SCHEDULE_DELAY if now - found_at < IDLE_AFTER else IDLE_DELAY
            ready = select.select(watch, [], [], delay)[0]
            now = time.monotonic()
            if self.wake_read in ready:
                woken = os.read(self.wake_read, 64)
                if signal.SIGTERM in woken and term_at is None:
                    term_at = now
                    self.deadline = now + TERM_SECONDS + DRAIN_SECONDS
            # The journal first, then the control pipe: a skip is written before the first
            # call it covers is appended, so every skip of a call read is known here. The end
            # is placed after a read that began once it was known and found nothing more.
            end_known = pending_end is not None
            calls = self.read_journal()
            if control_open:
                control_open = self.read_control(controls, waiting)
                stopped = stopped or any(type(request) is wire.Stop for request in waiting)
            if calls:
                found_at = now
                self.hand_over(calls)
            if waiting and self.tail is not None:
                placed = [r for r in waiting if r.seq <= self.tail.seq]
                for request in placed:  # after everything logged before it
                    self.inbox.put("control", request)
                waiting = [r for r in waiting if r not in placed]
            if stopped and self.deadline is None and os.getppid() != self.parent:
                self.deadline = now + DRAIN_SECONDS  # it died while closing the monitor
            if self.ending is None and not stopped:
                if not control_open:
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
            if end_known and pending_end is not None and not calls and self.inbox.room():
                self.inbox.put("end", pending_end)  # every whole record was read
                pending_end = None
            if self.deadline is not None and now >= self.deadline and (
                    self.started or now >= self.deadline + START_SECONDS):
                if progress is None:
                    progress = wire.Progress(self.shared if self.started else None)
                if progress.stalled():  # not while it still handles calls or closes
                    os._exit(3)  # stuck in a hook (or in the start) past the drain limit

    def read_control(self, controls: wire.Frames, waiting: list[Any]) -> bool:
        """Read the control pipe: the start frame (opens the journal), flush and stop requests
        (into ``waiting``), skips and journal moves (at once: they concern calls not read
        yet); ``False`` at its end."""
        while True:
            try:
                chunk = os.read(self.control_fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            controls.feed(chunk)
            for request in controls:
                if type(request) is wire.Start:
                    self.open_journal(request)
                    self.inbox.put("start", request)
                elif type(request) is wire.Skip:  # calls from ``first`` on are not for it
                    self.skips.append([request.first, None])
                    self.inbox.put("control", request)  # caps its cursor, in order
                elif type(request) is wire.Unskip:  # ... up to ``to``
                    if self.skips and self.skips[-1][1] is None:
                        self.skips[-1][1] = request.to
                elif type(request) is wire.MoveJournal:  # the monitor's journal failed
                    self.moves.append(request)
                elif type(request) in (wire.Flush, wire.Stop):
                    waiting.append(request)
                # ``wire.Wake``: nothing to do, the journal is read right after

    def open_journal(self, start: wire.Start) -> None:
        """Follow the journal the start request names, from the cursor or the first call."""
        folder, self.base, since = start.folder, start.first, start.since
        self.ephemeral, limit, self.start_slot = start.ephemeral, start.limit, start.start_slot
        # What this writer holds beyond what the training process counts it behind (its
        # limit again, as a pipe and its reader's buffer were before the journal).
        self.inbox.limit = min(INBOX_BYTES, limit + mmap.PAGESIZE)
        self.journal = folder
        self.next_seq = self.base
        self.since = since
        self.tail = jr.Tail(folder, self.base if since is None else since)

    def read_journal(self) -> list[tuple[int, bytes]]:
        """The whole records appended since the last read, as much as the inbox takes; the
        bytes read past are counted in the shared memory (the training process's bound)."""
        tail = self.tail
        if tail is None:
            return []
        room = self.inbox.room()
        if not room:
            return []
        calls = tail.take(room)
        if self.moves and tail.seq >= self.moves[0].seq:
            move = self.moves.pop(0)
            self.moved_bytes += tail.bytes
            tail.close()
            self.journal = move.folder
            self.tail = jr.Tail(move.folder, move.seq)
            tail = self.tail
            calls += tail.take(room)
        if self.shared is not None:
            self.shared.read_bytes = tail.bytes + self.moved_bytes
        return calls

    def hand_over(self, calls: list[tuple[int, bytes]]) -> None:
        """Put the calls meant for this writer into the inbox: not those a skip range covers."""
        if self.skips:
            calls = [(seq, frame) for seq, frame in calls if not self.skipped(seq)]
        self.inbox.put_calls(calls)

    def skipped(self, seq: int) -> bool:
        """Whether call ``seq`` lies in a skip range (a call dropped for this writer)."""
        for first, end in self.skips:
            if first is not None and first <= seq and (end is None or seq < end):
                return True
        return False

    def death(self, seen: str) -> str:
        """What ``monitor_crash`` is told when the training process is gone."""
        self.orphaned = True
        return (f"the training process (pid {self.parent}) ended without closing the monitor "
                f"({seen})")

    # Start -------------------------------------------------------------------------------

    def read_start(self) -> wire.Start | None:
        """Block until the start request (``wire.Start``) arrived; ``None`` when the training
        process ended first. What came with it waits in ``backlog``."""
        while True:
            items = self.inbox.take(1.0)
            for at, (kind, value) in enumerate(items):
                if kind == "start":
                    self.backlog = items[at + 1:]
                    return value
                if kind == "end":
                    return None

    def start(self) -> bool:
        """Construct the backend the start request names; reply ready or the failure."""
        message = self.read_start()
        if message is None:
            return False
        module, qualname, name = message.module, message.qualname, message.name
        run, options = message.run, message.options
        with contextlib.suppress(OSError):  # held until this process ends: no sync beside
            self.cursor_lock = hold(self.journal or "", name)
        slot = self.take_start_slot()
        began = time.monotonic()
        try:
            cls: Any = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            if self.since is not None and self.journal is not None:
                run = self.continued(run, name, options)
            backend = start_backend(new_manager(), name, cls, run, options)
            MediaRoutes().add(name, getattr(cls, "media_kinds", ()), backend.hooks)
            ended = time.monotonic()  # before the slot is let go
        except BaseException as error:
            self.reply(wire.StartFailed(wire.exception_parts(error)))
            return False
        finally:
            if slot >= 0:
                os.close(slot)  # the next writer starts
        self.backend = backend
        self.spec = (name, cls, run, options)
        self.flush_confirms = flush_confirms(cls)
        # ``started``: when the start began and ended (``time.monotonic()``, system-wide on
        # Linux), after the wait for a start slot.
        self.reply(wire.Ready({"state": backend_state(backend.instance),
                               "started": (began, ended)}))
        return True

    def take_start_slot(self) -> int:
        """Wait for this writer's start slot (``host.WriterHost.launch``: an ``flock`` on
        a ``memfd`` shared with the writers started after it); the descriptor holding it, or
        -1 when it has none (or the lock cannot be taken: it starts at once)."""
        inherited, self.start_slot = self.start_slot, -1
        if inherited < 0:
            return -1
        try:  # an open file of its own: flock excludes per open file, not per file
            fd = os.open(f"/proc/self/fd/{inherited}", os.O_RDONLY)
        except OSError:
            return -1
        finally:
            os.close(inherited)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return -1
        return fd

    def start_again(self, hook: str, kwargs: dict[str, Any], error: TrackerLost) -> bool:
        """The backend's tracker lost what it was handed (``TrackerLost``): start the backend
        again in this process, continuing its run (``continued``: ``resume="allow"``, and
        the calls past the cursor its storage holds are not handed over again), hand it the
        calls from its cursor up to this one, then call ``hook`` again. At most
        ``TRACKER_RESTARTS`` times; each is reported (``BackendWarning``). A ``monitor_close``
        after the lost instance was told ``monitor_crash`` is preceded by that crash again, so
        the run still ends as crashed. Whether ``hook`` returned without raising."""
        assert self.spec is not None
        name, cls, run, options = self.spec
        if self.journal is None or self.tracker_restarts >= TRACKER_RESTARTS:
            self.reply(wire.Failed(hook, wire.exception_parts(error)))
            return False
        self.tracker_restarts += 1
        self.reply(wire.Warned(*wire.warning_parts(
            f"backend {name!r}: {error}; started again at its cursor, continuing the run "
            f"(restart {self.tracker_restarts} of {TRACKER_RESTARTS})", BackendWarning)))
        cursor = jr.read_cursor(self.journal, name)
        try:
            again = self.continued(run, name, options, cursor)
            backend = start_backend(new_manager(), name, cls, again, options)
            MediaRoutes().add(name, getattr(cls, "media_kinds", ()), backend.hooks)
        except Exception as failure:
            self.reply(wire.Failed(hook, wire.exception_parts(failure)))
            return False
        self.backend = backend
        upto = self.next_seq if self.current is None else self.current
        for seq, past, past_kwargs in jr.calls(self.journal, cursor):
            if seq >= upto:
                break
            if past in (jr.START, jr.CLOSE) or self.skipped(seq) or seq in self.stored:
                continue
            if seq in self.held:
                from ..stored import without

                past_kwargs = {**past_kwargs,
                               "events": without(past_kwargs["events"], self.held[seq])}
            if not self.call(past, past_kwargs):
                self.capped(seq)
        if hook == "monitor_close" and self.crashed is not None:
            # The lost instance had marked the run crashed: the new one ends it crashed too.
            self.call("monitor_crash", {"reason": self.crashed})
        if self.current in self.stored:  # it reached the storage before the tracker was lost
            return True
        if self.current in self.held:
            from ..stored import without

            kwargs = {**kwargs, "events": without(kwargs["events"], self.held[self.current])}
        return self.call(hook, kwargs)

    def continued(self, run: Any, name: str, options: dict[str, Any],
                  cursor: int | None = None) -> Any:
        """A writer started again at its backend's cursor: the run it continues
        (``resume="allow"``, as ``monitors sync`` does), after reading the backend's storage
        for the calls past the cursor that its dead predecessor stored already
        (``core_monitor.stored``): those are not handed over again."""
        from ..stored import already_stored

        assert self.journal is not None
        since = self.since if cursor is None else cursor
        assert since is not None
        run = dataclasses.replace(run, resume="allow", resumed=False, last_step=None)
        self.stored, self.held = already_stored(Path(self.journal), name, run, options, since)
        return run

    # The main loop ------------------------------------------------------------------------

    def run(self) -> str | None:
        """Handle the inbox until a stop request (returns ``None``, or the reason it carries)
        or the training process's death or SIGTERM (returns what was seen)."""
        items, self.backlog = self.backlog, []
        while True:
            for kind, value in items:
                if kind == "call":
                    self.handle(*value)
                elif kind == "control":
                    if type(value) is wire.Stop:
                        return value.reason
                    if type(value) is wire.Skip:
                        self.capped(value.first)
                        continue
                    if self.call("monitor_flush", {}) and self.flush_confirms:
                        self.confirm()
                    self.reply(wire.Flushed(value.marker, self.handled))
                elif kind == "end":
                    return value
            if items:
                with contextlib.suppress(OSError):
                    os.write(self.wake_write, _WAKE)  # room in the inbox again
            items = self.inbox.take(1.0)

    def handle(self, seq: int, frame: bytes) -> None:
        """Call the hook record ``seq`` holds; one before ``base`` (a predecessor's, read
        again from the cursor) is not counted as handled."""
        hook, kwargs = jr.decode(frame)
        if hook in (jr.START, jr.CLOSE):  # the journal's own records: no call
            return
        self.current = seq
        if seq >= self.base:
            self.handled += 1
        elif seq in self.stored:  # its predecessor stored it: not again
            self.next_seq = max(self.next_seq, seq + 1)
            return
        elif seq in self.held:  # stored in part: only the points the storage lacks
            from ..stored import without

            kwargs = {**kwargs, "events": without(kwargs["events"], self.held[seq])}
        if not self.call(hook, kwargs) and hook not in ("monitor_flush", "monitor_close"):
            self.capped(seq)
        self.next_seq = max(self.next_seq, seq + 1)
        self.current = None

    def capped(self, seq: int) -> None:
        """The cursor never passes ``seq`` (a call not delivered)."""
        self.cap = seq if self.cap is None else min(self.cap, seq)

    def confirm(self) -> None:
        """Move the backend's cursor past every call handled (the backend's flush or close
        just returned without raising); never past ``cap``. A cursor that cannot be written
        is left as it was (``monitors sync`` delivers those calls again)."""
        if self.journal is None or self.backend is None:
            return
        seq = self.next_seq
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
            shared.busy_since = time.monotonic()
            shared.busy = True
        try:
            function(**kwargs)
            return True
        except TrackerLost as error:
            return self.start_again(hook, kwargs, error)
        except Exception as error:
            self.reply(wire.Failed(hook, wire.exception_parts(error)))
            return False
        finally:
            if shared is not None:
                shared.busy = False
                shared.handled = self.handled

    def finish(self, crash: str | None) -> None:
        """Flush (confirming, as at any flush), report a crash (``monitor_crash``), close
        (confirming); reply closed. The shared memory says so meanwhile
        (``wire.SharedPage.finishing``): an exit limit that passes lets these hooks run for
        ``wire.CLOSE_HOOK_SECONDS`` each (``wire.Progress``)."""
        if self.shared is not None:
            self.shared.finishing = True
        flushed = self.call("monitor_flush", {})
        if flushed and self.flush_confirms:  # a tracker lost in close replays only the rest
            self.confirm()
        if crash:
            self.call("monitor_crash", {"reason": crash})
            self.crashed = crash
        if self.call("monitor_close", {}) and flushed:
            self.confirm()
        self.reply(wire.Closed(self.handled))
        self.leave_journal()

    def leave_journal(self) -> None:
        """A journal of the monitor's own (``Monitor(journal=False)``) whose training process
        is gone: removed by the last of its writers to end (no other one holds its cursor's
        lock once this one let its own go)."""
        if not (self.ephemeral and self.journal and self.backend is not None
                and (self.orphaned or os.getppid() != self.parent)):
            return
        # Its own lock goes first: of two writers ending at once, each would otherwise see
        # the other's lock held and neither remove the journal.
        if self.cursor_lock is not None and self.cursor_lock >= 0:
            with contextlib.suppress(OSError):
                os.close(self.cursor_lock)
            self.cursor_lock = None
        jr.remove_unheld(self.journal, self.backend.name)


def lower_priority(parent: int | None = None) -> None:
    """Run this process, and the processes its SDK started, ``NICE`` lower (Linux lists
    children in ``/proc``; elsewhere only this process); on Linux, the scheduling groups of
    their sessions too (``lower_groups``), never that of ``parent``'s (the training
    process's) session."""
    try:
        os.nice(NICE)
    except (AttributeError, OSError):
        return
    level = os.getpriority(os.PRIO_PROCESS, 0)
    pids = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as found:
                pids += [int(pid) for pid in found.read().split()]
    for pid in pids:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, max(level, os.getpriority(
                os.PRIO_PROCESS, pid)))
    if parent is None or not in_autogroup("self"):
        return
    groups: dict[int, str] = {}  # session -> a /proc/<pid>/autogroup of one of its processes
    with contextlib.suppress(OSError):
        trainer = os.getsid(parent)
        for pid in (os.getpid(), *pids):  # wandb's service runs in a session of its own
            with contextlib.suppress(OSError):
                session = os.getsid(pid)
                if session != trainer:
                    groups.setdefault(session, f"/proc/{pid}/autogroup")
    if groups:
        threading.Thread(target=lower_groups, args=(list(groups.values()),), daemon=True,
                         name="core_monitor:nice").start()


def in_autogroup(pid: int | str) -> bool:
    """Whether process ``pid`` (or ``"self"``) runs in its session's scheduling group (Linux
    autogroup). ``/proc/<pid>/autogroup`` exists on every kernel built with autogroup, but it is
    empty where the session has no group of its own (it is in the kernel's default group: CI's
    machine reads so), and there is nothing to lower. (A process in a CPU cgroup other than the root
    one is shared out by its cgroup instead; its group's nice value then changes nothing, and
    lowering it does no harm.)"""
    try:
        with open(f"/proc/{pid}/autogroup") as group:
            return bool(group.read().strip())
    except OSError:
        return False


def lower_groups(paths: list[str], tries: int = 30) -> None:
    """Give each scheduling group in ``paths`` (Linux autogroup, ``/proc/<pid>/autogroup``:
    one per session) the nice value ``NICE``. Where autogroup is on
    (``/proc/sys/kernel/sched_autogroup_enabled``, most distributions' kernels), the
    scheduler first shares the CPU equally between sessions and only then by nice value
    within each: a writer, in a session of its own, would otherwise weigh as much as the whole
    training process whenever they meet on a core (man 7 sched, "The autogroup feature").
    Raising a group's nice value needs no privilege, but the kernel takes one change per
    0.1 s (``EAGAIN`` otherwise, for every process without ``CAP_SYS_ADMIN``), so writers
    started together retry: ``tries`` times, 0.1 s apart."""
    for path in paths:
        for _ in range(tries):
            try:
                with open(path, "w") as group:
                    group.write(str(NICE))
                break
            except OSError as error:
                if error.errno != errno.EAGAIN:
                    break
            time.sleep(0.1)


def _ignore_signal(signum: int, frame: Any) -> None:
    """SIGTERM's Python-level handler: nothing (the reader thread saw it on the wake-up
    pipe, where the C-level handler wrote its number, whatever the main thread is doing)."""


def main(argv: list[str]) -> int:
    """Run one writer (module docstring); the exit status is 0 unless the start failed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control_fd, reply_fd, shared_fd = (int(arg) for arg in argv[:3])
    writer = Writer(control_fd, reply_fd, shared_fd, int(argv[3]) if len(argv) > 3 else None)
    signal.signal(signal.SIGTERM, _ignore_signal)
    signal.set_wakeup_fd(writer.wake_write, warn_on_full_buffer=False)
    warnings.showwarning = writer.forward_warning
    threading.Thread(target=writer.read_forever, daemon=True,
                     name="core_monitor:reader").start()
    # SIGTERM reaches this process through the reader thread only: blocked on the main thread,
    # it is blocked in every thread and process the SDK starts from here on (a signal mask is
    # inherited across fork and exec). A scheduler signals every process of the job at once;
    # an SDK's helper that died of it would lose the calls still on their way to it (wandb's
    # service unblocks it: its backend raises TrackerLost and is started again, see
    # ``Writer.start_again``). They end when the writer closes the backend, or with the job's
    # SIGKILL.
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    started = writer.start()
    writer.started = True  # before reading the deadline: the reader sets it after, or we see it
    if writer.deadline is not None:  # the trainer died while this writer started: drain now
        writer.deadline = max(writer.deadline, time.monotonic() + DRAIN_SECONDS)
    if not started:
        return 1
    lower_priority(writer.parent)
    crash = writer.run()
    if crash:
        writer.reply(wire.Ending(crash))  # why it ends, for the report of a writer not asked to
    writer.finish(crash)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
