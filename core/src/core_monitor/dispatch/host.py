"""``WriterHost``: what the writer channels of one fan-out share, and the fan-out's writer side.

One ``WriterHost`` per fan-out holds its writer channels (``processes.WriterChannel``, one per
backend in a writer process), in start order, and does what concerns them together:

* ``launch``: start every writer at once, taking turns to import and start their SDK when
  ``Monitor()`` does not wait for them (``start_slots``); ``take``: hand the fan-out the
  writers started (with ``wait``, once each replied ready);
* the reply thread: every writer's replies (ready, flushed, failures, warnings) and output;
* ``settle``: the writers' bounds, looked at only when the least room left (``slack``) is
  spent, so that a call costs the hot path one subtraction (the size trigger of OpenTelemetry's
  batch processor: a writer past its trigger is woken to read at once);
* ``restart``: a writer that died is started again at its backend's cursor;
* ``move_to``: the run's journal failed, the writers go on reading another;
* ``close``: every writer ends, all at once, within the deadline.

The fan-out (``fanout.FanOut``) keeps the counts and the failure policy: where a writer has
no room, ``settle`` asks the fan-out's ``admit`` (wait, drop or detach, counted there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import WriterDied
from ..run import RunInfo
from . import wire
from .channel import BackendSpec, Channel
from .policy import Policy
from .processes import STARTUP_SECONDS, WriterChannel
from .wire import DRAIN_SECONDS, START_SECONDS

if TYPE_CHECKING:  # journal imports this package's wire
    from ..journal import Journal

logger = logging.getLogger("core_monitor")

#: Times a backend's writer process is started again after dying, per monitor.
MAX_RESTARTS = 3


class WriterHost:
    """What the writer channels of one fan-out share (module docstring).

    Args:
        policy: the fan-out's failure policy (failures and warnings replied by a writer).

    Attributes:
        writers: the writer channels launched, in start order.
        live: the writers still sent to, in start order (the fan-out's hot path holds this
            same list).
        slack: bytes every live writer can still fall behind before one needs a look
            (``settle``).
        restarts: backend name -> how many times its writer process was started again.
        waited: whether the fan-out waited for the writers' start (their start failures are
            then reported by the fan-out itself, not by the reply thread).
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.writers: list[WriterChannel] = []
        self.live: list[WriterChannel] = []
        self.slack = 0
        self.restarts: dict[str, int] = {}
        self._restarted_at: dict[str, int] = {}  # the cursor of each backend's last restart
        self.waited = True
        #: A writer died since the fan-out last looked (set by the reply thread).
        self.died = False
        #: The writers ``close`` left to finish their start (and write) by themselves.
        self.starting: list[str] = []
        self._selector: selectors.BaseSelector | None = None
        self._reader: threading.Thread | None = None

    def launch(self, specs: Sequence[BackendSpec], run: RunInfo, limits: dict[str, int],
               journal: Journal, ephemeral: bool = False, staggered: bool = False) -> None:
        """Start every writer of ``specs``, each reading ``journal`` from its next call
        (``limits``: bytes each may be behind), and the thread reading their replies.

        Every process is started at once. With ``staggered`` (``Monitor()`` does not wait for
        the writers: the training loop runs while they start), at most ``start_slots()`` of
        them import and start their backend at the same time, the others waiting for a slot
        (an ``flock`` on one of that many ``memfd`` files, taken in whichever order they reach
        it), so that the loop keeps a CPU; without it (``Monitor(wait=True)``, which waits for
        every writer) all start at once.

        Raises:
            OSError: a pipe or a process could not be made (the caller stops what started).
        """
        if not specs:
            return
        self._selector = selectors.DefaultSelector()
        slots: list[int] = []
        if staggered and len(specs) > start_slots() and hasattr(os, "memfd_create"):
            with contextlib.suppress(OSError):
                for _ in range(start_slots()):
                    slots.append(os.memfd_create("core_monitor-start"))
        try:
            for at, spec in enumerate(specs):
                self._add(WriterChannel(spec, run, limits[spec.name], journal,
                                        ephemeral=ephemeral,
                                        start_slot=slots[at % len(slots)] if slots else -1))
        finally:
            for fd in slots:  # each writer holds its own copy
                os.close(fd)

    def _add(self, writer: WriterChannel, dead: WriterChannel | None = None) -> None:
        assert self._selector is not None
        if dead is None:
            self.writers.append(writer)
        else:
            self.writers[self.writers.index(dead)] = writer
        self._selector.register(writer.reply_fd, selectors.EVENT_READ, (writer, "reply"))
        self._selector.register(writer.output_fd, selectors.EVENT_READ, (writer, "output"))
        if self._reader is None or not self._reader.is_alive():
            self._reader = threading.Thread(target=self._read_replies, daemon=True,
                                            name="core_monitor:replies")
            self._reader.start()

    def relaunch(self, dead: WriterChannel, since: int, ephemeral: bool) -> WriterChannel:
        """Start a writer again in place of ``dead`` (its process ended), for the same backend
        and run, reading the journal from ``since`` (its backend's cursor). Its replies are
        read by the reply thread (started again when it had ended).

        Raises:
            OSError: a pipe or the process could not be made.
        """
        writer = WriterChannel(dead.spec, dead.run, dead.limit, dead.journal, since, ephemeral)
        self._add(writer, dead)
        return writer

    def take(self, wait: bool, started: dict[str, Channel],
             start_failed: Callable[[str, BaseException], None]) -> None:
        """Put the writers launched into ``started`` (backend name -> channel): at once
        (``wait`` false; their replies are handled by the reply thread), or once each replied
        ready; one that failed is stopped and handed to ``start_failed(name, error)``."""
        self.waited = wait
        deadline = time.monotonic() + STARTUP_SECONDS
        for writer in self.writers:
            if not wait:
                started[writer.name] = writer
                writer.facts.setdefault("state", (False, None))
                continue
            outcome = writer.wait_ready(deadline)
            self.policy.deliver(raising=False)  # warnings of its start, in order
            if outcome is True:
                started[writer.name] = writer
                continue
            writer.sending = False
            writer.stop_now()
            start_failed(writer.name, outcome)  # type: ignore[arg-type]

    def list_live(self, channels: Sequence[Channel]) -> None:
        """Send to the writers among ``channels`` (start order) that are still sent to; the
        writers launched are those."""
        self.writers = [c for c in channels if isinstance(c, WriterChannel)]
        self.live[:] = [c for c in self.writers if c.sending]
        self.slack = 0

    def unlist(self, writer: WriterChannel) -> None:
        """Stop sending to ``writer`` (its process is gone, or its budget spent)."""
        writer.sending = False
        if writer in self.live:
            self.live.remove(writer)
            self.slack = 0

    def settle(self, size: int, next_seq: int,
               admit: Callable[[WriterChannel, int], bool]) -> None:
        """Some writer may be past its trigger (``WriterChannel.trigger``: half its bound, or
        nothing for a small bound): each past its bound with a record of ``size`` bytes is
        handed to ``admit`` (the fan-out waits, drops or detaches, as ``on_full`` and its
        budget say, and counts) before anything is appended, so an interrupt while waiting
        leaves no trace of the call; each past its trigger is woken to read at once
        (the size trigger of OpenTelemetry's batch processor, besides the writer's schedule
        delay). A writer with room after a run of dropped calls is told that the run ends
        before ``next_seq`` (the journal's next record). Then ``slack`` is the least room left
        below the writers' triggers."""
        slack = None
        for writer in list(self.live):
            behind = writer.behind()
            if behind > 0 and behind + size > writer.limit:
                admitted = admit(writer, size)
            else:
                admitted = True
                if behind + size > writer.trigger:
                    writer.wake()
            if admitted:
                writer.unskip(next_seq)
            if writer.sending:
                room = writer.trigger - max(0, behind)
                slack = room if slack is None else min(slack, room)
        if any(writer.skipping is not None for writer in self.live):
            slack = 0  # a writer dropping calls is asked again at every call
        self.slack = slack or 0

    def restart(self, journal: Journal | None, ephemeral: bool,
                sent: int) -> list[tuple[WriterChannel, WriterChannel]]:
        """Start again, at its backend's cursor in ``journal``, each writer whose process died
        (an SDK's segfault, an OOM kill), at most ``MAX_RESTARTS`` times per backend: the new
        writer reads the journal from the cursor on; one that died again without its cursor
        moving is not started again (a call that kills it). ``sent``: the fan-out's count of
        calls, this one included. The death is reported once (``WriterDied``, by the reply
        thread); each restart is logged. Without the run's journal (``ephemeral``) a dead
        writer (or without any, ``journal`` ``None``) is only no longer sent to (what it is not
        sent is counted at close). The pairs
        (dead writer, writer in its place).

        Called on the caller's thread under the monitor's lock, before a call is handed over."""
        from .. import journal as run_journal  # journal imports this package's wire

        self.died = False
        replaced: list[tuple[WriterChannel, WriterChannel]] = []
        for writer in list(self.writers):
            count = self.restarts.get(writer.name, 0)
            if not writer.dead or writer.stopping:
                continue
            self.unlist(writer)  # sent nothing more; what it is not sent is counted at close
            if journal is None or ephemeral or count >= MAX_RESTARTS:
                continue
            cursor = run_journal.read_cursor(journal.folder, writer.name)
            if count and self._restarted_at.get(writer.name) == cursor:
                # It died again before confirming anything: a call that kills it (a poison
                # call) would kill every new writer; the rest is left to ``monitors sync``.
                logger.error("backend %r: its writer process died again before confirming "
                             "any call; it is not started again", writer.name)
                self.restarts[writer.name] = MAX_RESTARTS
                continue
            self._restarted_at[writer.name] = cursor
            try:
                new = self.relaunch(writer, cursor, ephemeral)
            except OSError as error:
                logger.error("backend %r: its writer process could not be started again: %s",
                             writer.name, error)
                continue
            new.skipped = sent - 1  # the calls before this one were its predecessor's
            self.restarts[writer.name] = count + 1
            self.live.append(new)
            self.slack = 0
            replaced.append((writer, new))
            logger.warning("backend %r: its writer process died (%s); started again at its "
                           "cursor (restart %d of %d)", writer.name,
                           writer.exit_description(), count + 1, MAX_RESTARTS)
        return replaced

    def move_to(self, journal: Journal) -> None:
        """The live writers go on reading ``journal`` (the run's failed: a
        ``wire.MoveJournal`` request naming its folder and next record)."""
        for writer in self.live:
            writer.journal = journal
            writer.control(wire.MoveJournal(str(journal.folder), journal.next_seq))

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
        """Handle one reply of ``writer`` (a record of ``wire``'s process boundary)."""
        strict = self.policy.strict
        if isinstance(message, wire.Failed):
            error = wire.rebuild_exception(message.error, strict=strict)
            self.policy.failed_elsewhere(writer.name, message.hook, error,
                                         "in its writer process")
        elif isinstance(message, wire.Warned):
            self.policy.warn_later(message.message,
                                   wire.warning_category(message.type_path, message.base))
        elif isinstance(message, (wire.Flushed, wire.Closed)):
            with writer.changed:
                if isinstance(message, wire.Flushed):
                    writer.flushed = message.marker
                writer.handled = message.handled
                writer.changed.notify_all()
        elif isinstance(message, wire.Ending):
            writer.ending = message.why
        elif isinstance(message, wire.Ready):
            with writer.changed:
                writer.facts.update(message.facts)
                writer.ready = True
                writer.changed.notify_all()
        elif isinstance(message, wire.StartFailed):
            error = wire.rebuild_exception(message.error, strict=True)
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
        limit: ``shutdown.close_all``), still making progress (``wire.Progress``). Every
        writer is reaped. Backend name -> calls of the ``sent`` that never reached its backend
        (a writer killed, or dead)."""
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
        self.starting = starting
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

    def forget(self) -> None:
        """In a forked child: close the inherited pipes of every writer (``forget``)."""
        for writer in self.writers:
            writer.forget()
        self.writers = []




def _wait_while_progressing(writer: WriterChannel) -> bool:
    """Past the core's exit limit: wait for ``writer`` while it makes progress (``wire.Progress``:
    calls handled moving, or a closing hook running for less than ``wire.CLOSE_HOOK_SECONDS``);
    whether it exited. The platform's own SIGKILL (Slurm's ``KillWait``, Kubernetes's grace
    period, 30 s by default) may come first: the writer then dies of it, as it would anyway."""
    progress = wire.Progress(writer.shared)
    while not progress.stalled():
        try:
            writer.process.wait(timeout=0.25)
            return True
        except subprocess.TimeoutExpired:
            continue
    return writer.process.poll() is not None




def _pass_on(chunk: bytes) -> None:
    """A writer's output (an SDK's messages) to this process's ``sys.stderr``."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(Exception):
        stream.write(chunk.decode(errors="replace"))
        stream.flush()




def start_slots() -> int:
    """Writers that import and start their backend at the same time when ``Monitor()`` does
    not wait for them (``WriterHost.launch``): the CPUs this process may run on (its affinity:
    a Slurm or cgroup cpuset), less one for the training loop, and at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus - 1)

