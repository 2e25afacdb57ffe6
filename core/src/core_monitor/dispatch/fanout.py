"""``FanOut``: the one way a ``Monitor``'s calls reach its backends, one channel per backend.

The ``Monitor`` validates a call and builds it once, ``(hook, kwargs)`` (for ``log()``,
``("monitor_write", {"events": Batch})``); the fan-out hands that call to every started
backend's channel (``channel.Channel``), in start order, in one pass:

1. room: every channel's buffer is asked for room first (``Channel.make_room``; a writer's is
   the bytes of the journal it may be behind, looked at only when the least room left,
   ``host.WriterHost.slack``, is spent): ``log()`` waits for a full one (``on_full="block"``)
   or the call is dropped for that backend and counted (``"drop"``), or a backend with a budget
   is detached, before anything is handed over, so an interrupt while waiting leaves no trace
   of the call;
2. the pass: the call is put into every thread channel's queue and its encoding (``wire``,
   encoded once) appended to the run's journal (``data``), which every writer process reads,
   by one C-level ``deque.extend`` over ``map``: no Python bytecode, hence no signal handler
   and no other thread, runs between them, so the call reaches every channel or none;
3. in-line channels are then called on the caller's thread, in start order.

The failure policy (``policy.Policy``), the counts (``dropped``, ``undelivered``), the media
routes and the monitor's lock (held by the caller around ``send``, ``flush``'s request and
``stop``) are the fan-out's, for every channel alike.

Where each backend runs is chosen per backend at ``start`` (``placement``): the mode the user
picked (``Monitor(dispatch=...)``) is the default kind of channel, ``MODE_KINDS``; a backend
class that a fresh interpreter might not import by module path gets a thread channel while its
neighbours keep their writer processes (``processes.why_not_in_a_process``), and where writer
processes cannot be started at all every backend gets a thread channel, with one warning.
``ProcessDispatch``, ``ThreadDispatch`` and ``SyncDispatch`` are the fan-out with each mode's
default placement.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import struct
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from queue import SimpleQueue
from typing import Any, ClassVar

from .. import journal as run_journal  # a module: journal imports this package's wire
from .. import shutdown
from .._stack import caller_level
from ..errors import BackendWarning, ConfigError, FlushTimeout
from ..events import Batch, Row
from ..media import MediaRoutes
from ..resume import NoRunToResume, backend_state
from ..run import RunInfo
from . import wire
from .backends import Backend, flush_confirms, hook_names, new_manager, start_backend
from .channel import FULL, GONE, ROOM, BackendSpec, Channel
from .host import WriterHost
from .policy import Policy
from .processes import BYTES_PER_CALL, WriterChannel, journal_root, nothing, why_not_in_a_process
from .sync import InlineChannel
from .threads import FORK_FLUSH_TIMEOUT, ThreadChannel, in_worker
from .warn import report_drop, report_losses
from .wire import encode_call, encode_rows

logger = logging.getLogger("core_monitor")

#: ``Monitor(dispatch=...)`` -> the kind of channel a backend gets by default.
MODE_KINDS = {"process": "process", "thread": "thread", "background": "thread",
              "sync": "inline"}

_put = SimpleQueue.put
_write = os.write
#: Bytes of a journal record's header (``core_monitor.journal.HEADER``, which cannot be read
#: here at import: the journal imports this package's wire).
RECORD_HEADER = struct.calcsize("<II")
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # an iterator's end, in C


class FanOut:
    """How one ``Monitor``'s calls reach its backends (module docstring).

    Args:
        policy: the failure policy (strict or not; the counts).
        capacity: calls each backend's buffer holds (``Monitor(queue_size=...)``).
        on_full: ``"block"`` or ``"drop"`` (``Monitor(on_full=...)``).

    Attributes:
        mode: the ``Monitor(dispatch=...)`` this fan-out stands for; its default placement is
            ``MODE_KINDS[mode]``.
        policy: as given.
        channels: one per started backend, in start order.
        media: which media kinds each started backend is sent; what the others were not sent.
        hooks: started backend name -> the hooks it implements, in start order.
        facts: started backend name -> what it told at its start: ``{"state": (resumed,
            last_step)}`` (``core_monitor.resume.backend_state``).
        missing: backend name -> the ``NoRunToResume`` it raised (``resume="must"``): it
            was not started; the ``Monitor`` raises one error naming them all.
        dropped: backend name -> calls dropped because its buffer was full (``"drop"``).
        undelivered: backend name -> calls that never reached it (``close`` gave up, or the
            backend's thread or process had died).
        sent: calls handed to the channels (each got those not in its ``skipped``).
        wait: whether ``start`` returns only once every writer process replied ready or failed
            (``Monitor(wait=...)``); the other channels always start before it returns.
    """

    mode: ClassVar[str] = "process"

    def __init__(self, policy: Policy, capacity: int, on_full: str) -> None:
        self.policy = policy
        self.capacity = capacity
        self.on_full = on_full
        self.media = MediaRoutes()
        self.channels: list[Channel] = []
        self.hooks: dict[str, frozenset[str]] = {}
        self.facts: dict[str, dict[str, Any]] = {}
        self.missing: dict[str, NoRunToResume] = {}
        self.dropped: dict[str, int] = {}
        self.undelivered: dict[str, int] = {}
        self.sent = 0
        self.wait = False
        # Fork: ``sent`` when every thread channel last finished a fork flush, and the flush
        # tickets of a fork that did not wait them out (``before_fork``).
        self._fork_flushed_at: int | None = None
        self._fork_tickets: dict[str, SimpleQueue[bool]] = {}
        #: Backend name -> its budget in bytes (``Monitor(budget=...)``); ``None`` key: the
        #: budget of every backend not named.
        self.budgets: dict[str | None, int] = {}
        #: Backend name -> the journal seq of the first call it was not sent, once its budget
        #: was spent (it is left to ``monitors sync``).
        self.detached: dict[str, int] = {}
        self._told: set[tuple[str, str]] = set()  # (backend, optional hook) warned about
        #: Why the run ends as crashed (``stop(crash=...)`` or SIGTERM); ``None``: it closes.
        self.crash: str | None = None
        self._manager = new_manager()
        self._host: WriterHost | None = None  # what the writer channels share
        # The hot path's lists, per kind, in start order:
        self._inline: list[InlineChannel] = []
        self._inline_writers: list[tuple[str, Callable[..., Any]]] = []  # (name, monitor_write)
        self._threads: list[ThreadChannel] = []
        self._queues: list[SimpleQueue[tuple[str, Any]]] = []  # the thread channels' queues
        self._live: list[WriterChannel] = []  # the writers still sent to (``WriterHost.live``)
        self._least = capacity  # the smallest thread queue's capacity (``_take``)
        #: The run's journal (``core_monitor.journal``), set by the ``Monitor`` before
        #: ``start``; ``None``: no journal.
        self.journal: run_journal.Journal | None = None
        #: The journal calls are appended to: the run's, or, for writers without one
        #: (``Monitor(journal=False)``, or the run's failed), one of the monitor's own in a
        #: temporary folder (``ephemeral``), removed at ``close``; ``None``: none.
        self.data: run_journal.Journal | None = None
        self.ephemeral = False

    @property
    def names(self) -> list[str]:
        """The started backends, in start order."""
        return list(self.hooks)

    @property
    def writers(self) -> list[WriterChannel]:
        """The writer channels, in start order."""
        return [] if self._host is None else list(self._host.writers)

    @property
    def restarts(self) -> dict[str, int]:
        """Backend name -> how many times its writer process was started again."""
        return {} if self._host is None else self._host.restarts

    @property
    def backends(self) -> list[Backend]:
        """The backends constructed in this process (in-line and thread channels)."""
        return [channel.backend for channel in self.channels
                if isinstance(channel, (InlineChannel, ThreadChannel))]

    def get(self, name: str) -> Backend:
        """The backend called ``name``, constructed in this process.

        Raises:
            KeyError: no started backend of this process has that name (it runs in a writer
                process, or was not started).
        """
        for backend in self.backends:
            if backend.name == name:
                return backend
        raise KeyError(name)

    # Start -------------------------------------------------------------------------------

    def _start_journal(self, specs: Sequence[BackendSpec], run: RunInfo) -> None:
        """Append the journal's ``START`` record (the backends, their options, the run); a
        journal that cannot be written is given up with one warning (the run goes on)."""
        assert self.journal is not None
        listed = []
        for spec in specs:
            options = dict(spec.options)
            try:
                wire.encode_parts(options)
            except Exception:  # options that do not pickle: ``monitors sync --to-option``
                options = {}
            listed.append((spec.name, spec.cls.__module__, spec.cls.__qualname__, options))
        try:
            self.journal.start(run, listed)
        except OSError as error:
            self._journal_failed(error)
            return
        self.data = self.journal

    def _journal_failed(self, error: OSError, frame: bytes | None = None) -> None:
        """The journal cannot be written (a full or read-only disk): warn once; writer
        processes go on reading a journal of the monitor's own (``_own_journal``), which gets
        ``frame`` (the call being appended) when given."""
        failed, self.data = self.data, None
        if failed is self.journal and failed is not None:
            self.journal = None
            warnings.warn(f"the run's journal in {failed.folder} cannot be written ({error}); "
                          "the backends still get every call, but what they have not "
                          "confirmed is no longer kept on disk (no `monitors sync` for this "
                          "run)", BackendWarning, stacklevel=4)
        if failed is not None:
            failed.forget()
        host = self._host
        if host is None or not host.live:
            return
        try:
            own = self._own_journal(failed)
            host.move_to(own)
            if frame is not None:
                own.append(frame)
        except OSError as again:  # no journal at all: the writers get nothing more
            logger.error("no journal can be written (%s): writer processes get no more calls",
                         again)
            for writer in list(host.live):
                self._refuse(writer, GONE)

    def _own_journal(self, failed: run_journal.Journal | None = None,
                     names: Iterable[str] = ()) -> run_journal.Journal:
        """Open a journal of the monitor's own for its writers (``data``, ``ephemeral``), in
        the temporary folder ``processes.journal_root`` names, continuing ``failed``'s
        numbering and byte count when given.

        Raises:
            OSError: it cannot be made.
        """
        folder = tempfile.mkdtemp(prefix="core_monitor-journal-", dir=journal_root())
        own = run_journal.Journal(folder, first=failed.next_seq if failed else None)
        own.total = failed.total if failed else 0
        own.names = {writer.name for writer in self._live} | set(names)
        self.data, self.ephemeral = own, True
        return own

    def placement(self, spec: BackendSpec, run: RunInfo) -> str:
        """The kind of channel ``spec`` gets: ``MODE_KINDS[mode]``, except a thread for a
        backend a writer process may not import by module path (or whose options do not
        pickle), with one INFO line naming why."""
        kind = MODE_KINDS[self.mode]
        if kind == "process":
            why = why_not_in_a_process(spec, run)
            if why is not None:
                logger.info("backend %r runs in a worker thread, not a writer process: %s",
                            spec.name, why)
                return "thread"
        return kind

    def start(self, specs: Sequence[BackendSpec], run: RunInfo) -> None:
        """Start every backend of ``specs`` for ``run``, each in the channel ``placement``
        gives it: every writer process at once (waiting for their replies only with
        ``wait``), then the backends of this process in order.

        A backend that fails to start is set aside (reported and counted as
        ``failures[name]``, hook ``"start"``) and the others run.

        Raises:
            ConfigError: raised by a backend's constructor (a bad option value), always;
                the backends already started are closed first.
            Exception: whatever a backend's start raised, when ``strict``.
        """
        kinds = {spec.name: self.placement(spec, run) for spec in specs}
        in_process = [spec for spec in specs if kinds[spec.name] == "process"]
        capacity = {spec.name: self.capacity_of(spec.name) for spec in specs}
        if self.journal is not None:
            self._start_journal(specs, run)
        if in_process:
            self._host = WriterHost(self.policy)
            try:
                if self.data is None:
                    self._own_journal(names=[spec.name for spec in in_process])
                assert self.data is not None
                self._host.launch(in_process, run,
                                  {name: calls * BYTES_PER_CALL
                                   for name, calls in capacity.items()},
                                  self.data, self.ephemeral, staggered=not self.wait)
            except OSError as error:
                warnings.warn(f"writer processes cannot be started here ({error}); every "
                              "backend runs in a worker thread instead (dispatch='thread')",
                              RuntimeWarning, stacklevel=4)
                self._host.abandon()
                self._host = None
                kinds = dict.fromkeys(kinds, "thread")
        started: dict[str, Channel] = {}
        try:
            if self._host is not None:
                self._host.take(self.wait, started, self._start_failed)
            for spec in specs:
                kind = kinds[spec.name]
                if kind == "process":
                    continue
                try:
                    backend = start_backend(self._manager, spec.name, spec.cls, run,
                                            spec.options)
                except Exception as error:
                    self._start_failed(spec.name, error)
                    continue
                started[spec.name] = (InlineChannel(backend) if kind == "inline" else
                                      ThreadChannel(backend, self.policy,
                                                    capacity[spec.name]))
        except BaseException:
            self._take([started[spec.name] for spec in specs if spec.name in started])
            self.stop()
            self.close(None)
            raise
        self._take([started[spec.name] for spec in specs if spec.name in started])
        for spec in specs:  # start order is selection order, whichever channel runs it
            channel = started.get(spec.name)
            kinds_of_media = getattr(spec.cls, "media_kinds", ())
            if isinstance(channel, WriterChannel):
                self.hooks[spec.name] = hook_names(spec.cls)
                self.facts[spec.name] = channel.facts
                self.media.add(spec.name, kinds_of_media,
                               dict.fromkeys(self.hooks[spec.name], nothing))
            elif isinstance(channel, (InlineChannel, ThreadChannel)):
                backend = channel.backend
                self.media.add(spec.name, kinds_of_media, backend.hooks)
                self.hooks[spec.name] = frozenset(backend.hooks)
                self.facts[spec.name] = {"state": backend_state(backend.instance)}

    def _take(self, channels: list[Channel]) -> None:
        """Hold ``channels`` (start order) and the hot path's lists of each kind."""
        self.channels = channels
        self._inline = [c for c in channels if isinstance(c, InlineChannel)]
        self._inline_writers = [(c.name, c.hooks["monitor_write"]) for c in self._inline
                                if "monitor_write" in c.hooks]
        self._threads = [c for c in channels if isinstance(c, ThreadChannel)]
        self._queues = [c.items for c in self._threads]
        #: The smallest thread queue's capacity: below it, no queue needs a look.
        self._least = min((c.capacity for c in self._threads), default=self.capacity)
        if self._host is not None:
            self._host.list_live(channels)
            self._live = self._host.live  # the same list: ``WriterHost`` keeps it

    def _start_failed(self, name: str, error: BaseException) -> None:
        """A backend did not start: raise (``ConfigError``, or any error when strict) or set
        it aside under the failure policy. A missing run to resume is kept in ``missing``."""
        if isinstance(error, NoRunToResume):
            self.missing[name] = error
            return
        if isinstance(error, ConfigError) or self.policy.strict:
            raise error
        self.policy.failed(name, "start", error)

    def warn_lacking(self, hook: str, consequence: str) -> None:
        """Warn once per backend that it lacks the optional ``hook``, pointing at the caller
        of the ``Monitor`` method that called this."""
        for name, hooks in self.hooks.items():
            if hook not in hooks and (name, hook) not in self._told:
                self._told.add((name, hook))
                warnings.warn(f"backend {name!r} has no {hook} hook: {consequence}",
                              BackendWarning, stacklevel=3)

    # Calls -------------------------------------------------------------------------------

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Hand ``hook(**kwargs)`` to every channel (module docstring); the hot path of
        ``Monitor.log``. The caller holds the monitor's lock.

        Raises:
            Exception: with ``strict``, what an in-line backend raised (after every channel got
                the call).
        """
        self.sent += 1
        host = self._host
        if host is not None and host.died:
            self._restart_writers()
        if self.data is not None:
            # The thread channels' room is settled first (the writers' in ``_pass``); the
            # queues and the journal get the call in one pass.
            puts = self._queues_with_room() if self._queues else ()
            self._pass(encode_call(hook, kwargs), puts, (hook, kwargs))
        elif self._queues:
            _consume(map(_put, self._queues_with_room(), repeat((hook, kwargs))))
        if self._inline:
            if hook == "monitor_write":  # log()'s hot path: no further call in between
                failed = self.policy.failed
                events = kwargs["events"]
                for name, write in self._inline_writers:
                    try:
                        write(events=events)
                    except Exception as error:
                        failed(name, hook, error)
                self.policy.raise_pending()
            else:
                self._call_inline(hook, kwargs)

    def write_rows(self, rows: tuple[Row, ...], fresh: bool) -> None:
        """``send("monitor_write", {"events": Batch(rows)})``: ``Monitor.log``'s hot path.
        With writers only (the default: no thread channel's queue, no in-line backend) the
        rows go to the journal as they are (``wire.encode_rows``), with no ``Batch`` and no
        copy built. ``fresh``: whether the rows' dicts are the monitor's own; the caller's
        are copied before a thread or in-line backend is handed them.

        Raises:
            Exception: as ``send``.
        """
        if self._queues or self._inline or self.data is None:
            if not fresh:
                rows = tuple((step, wall_time, dict(values)) for step, wall_time, values in rows)
            self.send("monitor_write", {"events": Batch(rows)})
            return
        self.sent += 1
        host = self._host
        if host is not None and host.died:
            self._restart_writers()
        self._pass(encode_rows(rows), (), None)

    def _pass(self, frame: bytes, puts: Sequence[Any], item: Any) -> None:
        """Settle the writers' room for ``frame`` (``WriterHost.settle``, once their least
        room left is spent), then put ``item`` into the thread channels' queues ``puts`` (a
        put never fails) and append ``frame`` to the journal (``data``) in one C-level pass:
        ``deque.extend`` drives ``map`` over them, so no Python bytecode, hence no signal
        handler and no other thread, runs in between (``os.write`` runs handlers only when
        its system call fails with EINTR, PEP 475, which a write to a regular file does not).
        The call reaches every channel or none; the journal counts its record even when an
        interrupt comes right after (``finally``). A journal that fails gives way to one of
        the monitor's own (``_journal_failed``)."""
        data = self.data
        assert data is not None
        if self._live:
            host = self._host
            assert host is not None
            size = len(frame) + RECORD_HEADER
            if size > host.slack:
                host.settle(size, data.next_seq, self._admit)
            host.slack -= size
        record = data.record(frame)
        done: deque[Any] = deque()
        try:
            try:
                if puts:
                    done.extend(chain(map(_put, puts, repeat(item)),
                                      map(_write, (data.fd,), (record,))))
                else:  # writers only (the default): the journal's write, still in C
                    done.extend(map(_write, (data.fd,), (record,)))
            finally:
                if len(done) > len(puts):
                    data.appended(done[-1], len(record))
        except OSError as error:
            self._journal_failed(error, frame)

    def _restart_writers(self) -> None:
        """Start again each writer whose process died (``WriterHost.restart``), in its place
        among the channels."""
        assert self._host is not None
        for dead, new in self._host.restart(self.data, self.ephemeral, self.sent):
            self.channels[self.channels.index(dead)] = new

    def _call_inline(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Call ``hook(**kwargs)`` on every in-line backend implementing it, in start order;
        then raise a strict failure, if any."""
        failed = self.policy.failed
        for channel in self._inline:
            function = channel.hooks.get(hook)
            if function is not None:
                try:
                    function(**kwargs)
                except Exception as error:
                    failed(channel.name, hook, error)
        self.policy.raise_pending()

    def capacity_of(self, name: str) -> int:
        """The calls backend ``name``'s buffer holds: its budget (``budgets``) in KiB-sized
        calls (``processes.BYTES_PER_CALL``), else ``capacity`` (``queue_size``)."""
        budget = self.budgets.get(name, self.budgets.get(None))
        return self.capacity if budget is None else max(1, budget // BYTES_PER_CALL)

    def _admit(self, channel: Channel, size: int) -> bool:
        """Whether ``channel`` takes the call (``Channel.make_room``); one it refuses is
        counted: dropped for a full buffer (warned once per backend), undelivered for a thread
        or process that is gone (a writer is then no longer sent to). A backend with a budget
        and a journal whose buffer is full is detached (``_detach``), never waited for."""
        budget = self.journal is not None and (channel.name in self.budgets
                                               or None in self.budgets)
        answer = channel.make_room(size, "detach" if budget else self.on_full)
        if answer == ROOM:
            return True
        if budget and answer == FULL:
            self._detach(channel)
        else:
            self._refuse(channel, answer)
        return False

    def _detach(self, channel: Channel) -> None:
        """``channel``'s budget is spent: it is sent nothing more; its cursor stays below this
        call (a writer skips every call from it on and caps its own), so ``monitors sync``
        delivers the rest. Warned once."""
        journal = self.journal
        assert journal is not None
        name = channel.name
        channel.gap = seq = journal.next_seq
        self.detached[name] = seq
        if isinstance(channel, WriterChannel):
            channel.skip_from(seq)
            self._unlist(channel)
        self._queues = [c.items for c in self._threads if c.name not in self.detached]
        message = (f"backend {name!r} is behind by its whole budget "
                   f"({self.capacity_of(name) * BYTES_PER_CALL} bytes unwritten): it is sent "
                   "nothing more in this run and the other backends go on; the run's journal "
                   "keeps every call, and after the run `monitors sync "
                   f"{shlex.quote(str(journal.folder))}` delivers what it lacks")
        logger.warning(message)
        warnings.warn(message, BackendWarning, stacklevel=caller_level())

    def _refuse(self, channel: Channel, answer: str) -> None:
        name = channel.name
        if self.journal is not None and channel.gap is None:
            # Its cursor never passes the first call it did not get: that call and every
            # later one stay for ``monitors sync`` (a writer caps its own at its skips).
            channel.gap = self.journal.next_seq
        if answer == FULL:
            self.dropped[name] = self.dropped.get(name, 0) + 1
            channel.skipped += 1
            if isinstance(channel, WriterChannel):
                assert self.data is not None
                channel.skip_from(self.data.next_seq)
            if self.dropped[name] == 1:
                report_drop(name, channel.full)
            return
        if channel.counts_gone():
            self.undelivered[name] = self.undelivered.get(name, 0) + 1
            channel.skipped += 1
        if isinstance(channel, WriterChannel):
            self._unlist(channel)

    def _unlist(self, writer: WriterChannel) -> None:
        """Stop sending to ``writer`` (its process is gone, or its budget spent)."""
        assert self._host is not None
        self._host.unlist(writer)

    def _queues_with_room(self) -> list[SimpleQueue[tuple[str, Any]]]:
        """The thread channels' queues that take one more item now: all of them while none is
        full, else after waiting or dropping for the full ones (``_admit``)."""
        if max(map(SimpleQueue.qsize, self._queues), default=0) < self._least:
            return self._queues
        return [channel.items for channel in self._threads
                if channel.name not in self.detached and self._admit(channel, 0)]

    # Flush, stop, close ------------------------------------------------------------------

    def flush(self, lock: Any, timeout: float | None) -> None:
        """Return once every backend wrote and flushed what was sent before; ``lock`` is held
        while the flush is requested (control pipes, queue markers; in-line backends flush
        then). Every channel is waited for at once, ``timeout`` seconds in all.

        Raises:
            FlushTimeout: at ``timeout``; ``.pending``: calls not yet written, per backend.
            Exception: with ``strict``, a backend's exception.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        journal = self.journal
        with lock:
            if self._host is not None and self._host.died:
                self._restart_writers()
            tickets = [(channel, channel.request_flush()) for channel in self.channels]
            seq = 0 if journal is None else journal.next_seq
            if self._inline:
                self._call_inline("monitor_flush", {})
            if journal is not None:
                try:
                    journal.sync()
                except OSError as error:
                    self._journal_failed(error)
        late: dict[str, int] = {}
        confirmed = []
        for channel, ticket in tickets:
            if not channel.wait_flushed(ticket, deadline):
                late[channel.name] = max(1, channel.pending(self.sent))
            elif isinstance(channel, (InlineChannel, ThreadChannel)) and flush_confirms(
                    type(channel.backend.instance)):  # a writer moves its own cursor
                confirmed.append(channel)
        self._confirm(confirmed, seq)
        self.policy.deliver()
        if late:
            raise FlushTimeout(late, timeout)

    def _confirm(self, channels: Sequence[Channel], seq: int) -> None:
        """Move the cursor of each of ``channels`` (flushed or closed in this process) to
        ``seq``, or to its first call not delivered; a backend that ever raised keeps its
        cursor (what it confirmed is not known). Then delete the segments every cursor
        passed."""
        journal = self.journal
        if journal is None:
            return
        try:
            for channel in channels:
                if not self.policy.failures.get(channel.name):
                    journal.write_cursor(channel.name, seq if channel.gap is None
                                         else min(seq, channel.gap))
            journal.collect()
        except OSError as error:
            self._journal_failed(error)

    def stop(self, crash: str | None = None) -> None:
        """Nothing is sent after this (called under the monitor's lock by ``close``). Every
        writer is marked stopping before any is sent the stop request (a writer that exits on
        it is then never taken for a dead one). The run ends as crashed when ``crash`` (why:
        an exception left the monitor's ``with``) is given or the process is closing on
        SIGTERM (``shutdown.terminating``): writers are sent the reason with the request and
        report it (``monitor_crash``) before closing; ``close`` does the same for the backends
        of this process."""
        # A writer that died just before close is taken for a death (reported, its calls
        # counted), not for an end asked for: the reply thread sees its pipe close at once.
        for writer in self.writers:
            if not writer.ended and writer.process.poll() is not None:
                with writer.changed:
                    writer.changed.wait_for(writer.has_ended, timeout=5.0)
        writers = self.writers
        for writer in writers:
            writer.stopping = True
        self.crash = crash or shutdown.terminating
        for channel in (*writers, *self._threads):
            channel.request_stop(self.crash)

    def close(self, timeout: float | None) -> None:
        """Let every channel write what it holds (``timeout`` seconds for all, at once), then
        flush and close every backend; report what was dropped or not delivered.

        Writer processes end by themselves once their pipes close (``WriterHost.close``; one
        still running at the deadline is killed, one still starting left to finish). Worker
        threads are joined; one still busy then is left to its daemon thread, its calls counted
        in ``undelivered``. The backends of this process whose channel ended are then flushed,
        then closed, each in reverse start order, even when one raises.

        Raises:
            Exception: with ``strict``, the first exception a backend raised.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self._live.clear()
        if self._host is not None:
            for name, lost in self._host.close(deadline, timeout, self.sent,
                                               patient=shutdown.exiting).items():
                self.undelivered[name] = self.undelivered.get(name, 0) + lost
            if self.ephemeral and self.data is not None:
                self.data.forget()
                if not self._host.starting:  # else the last of them removes it
                    shutil.rmtree(self.data.folder, ignore_errors=True)
                self.data = None
        stuck = set()
        for channel in self._threads:
            if not channel.join(deadline):
                stuck.add(channel.name)
                channel.abandon()
                self.undelivered[channel.name] = (
                    self.undelivered.get(channel.name, 0) + channel.pending()
                )
        backends = [b for b in self.backends if b.name not in stuck]
        # Never called again:
        self._inline, self._inline_writers, self._threads, self._queues = [], [], [], []
        hooks = ("monitor_flush", "monitor_crash", "monitor_close") if self.crash else (
            "monitor_flush", "monitor_close")
        for hook in hooks:
            for backend in reversed(backends):
                function = backend.hooks.get(hook)
                if function is None:
                    continue
                try:
                    function(**({"reason": self.crash} if hook == "monitor_crash" else {}))
                except Exception as error:
                    self.policy.failed(backend.name, hook, error)
        closed = {backend.name for backend in backends}
        journal = self.journal
        if journal is not None:
            self._confirm([c for c in self.channels if c.name in closed
                           and not isinstance(c, WriterChannel)], journal.next_seq)
        report_losses({channel.name: channel.kind for channel in self.channels},
                      self.undelivered, self.dropped, list(self.detached), timeout,
                      None if journal is None else journal.folder, list(self.hooks))
        if self.journal is not None:
            self.journal.close()
        self.policy.deliver(raising=False)
        self.policy.raise_pending()

    # Fork --------------------------------------------------------------------------------

    def before_fork(self) -> None:
        """The process is about to fork (the monitor's lock is held): leave nothing in a
        buffer of this process that the child could write a second time. Thread channels
        write and flush what they hold, within ``threads.FORK_FLUSH_TIMEOUT`` seconds (not
        from a worker thread: it cannot wait for itself); in-line backends flush (failures
        counted, never raised); writer channels hold nothing here. Forks with no call sent in
        between (a pool's workers, a DataLoader's) flush once, and a thread still flushing
        for an earlier fork is not waited for again."""
        if self._fork_flushed_at == self.sent:
            return  # a burst of forks (a pool's workers) flushes once: nothing sent since
        tickets = self._fork_tickets
        if self._threads and not in_worker():
            # A thread still flushing for an earlier fork is not waited for again (each fork
            # of a pool paid the whole timeout).
            deadline = time.monotonic() + FORK_FLUSH_TIMEOUT
            asked = []
            for channel in self._threads:
                earlier = tickets.get(channel.name)
                if earlier is None or not earlier.empty():  # none, or done since
                    tickets[channel.name] = channel.request_flush()
                    asked.append(channel)
            for channel in asked:
                if channel.wait_flushed(tickets[channel.name], deadline):
                    del tickets[channel.name]
        for inline in self._inline:
            function = inline.hooks.get("monitor_flush")
            if function is not None:
                try:
                    function()
                except Exception as error:
                    self.policy.failed(inline.name, "monitor_flush", error)
        if not tickets and not in_worker():
            self._fork_flushed_at = self.sent

    def forget(self) -> None:
        """In a forked child: let go of everything inherited, never writing to it (the pipes
        are closed, the queues emptied, the journal left to the parent)."""
        if self.data is not None:  # the parent's: never written from here
            self.data.forget()
        self.journal, self.data = None, None
        if self._host is not None:
            self._host.forget()
        for channel in self._threads:
            channel.forget()
        self._queues = [channel.items for channel in self._threads]
        self._live.clear()


class ProcessDispatch(FanOut):
    """``dispatch="process"`` (the default): every backend gets a writer channel, but one a
    fresh interpreter may not import by module path (a thread channel)."""

    mode = "process"


class ThreadDispatch(FanOut):
    """``dispatch="thread"`` (alias ``"background"``): every backend gets a thread channel."""

    mode = "thread"


class SyncDispatch(FanOut):
    """``dispatch="sync"``: every backend gets an in-line channel (the caller's thread)."""

    mode = "sync"
