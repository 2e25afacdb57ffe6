"""What crosses between the training process and a writer process: frames, errors, warnings.

A frame is ``<pickle length: u32><buffer count: u32>[<buffer length: u64> ...]``, the pickle
(protocol 5) of ``(hook, kwargs)``, then the out-of-band buffers (numpy arrays of media values,
sent without a copy into a ``bytes`` object). A 10-scalar ``log()`` call is one frame of about
300 bytes; each call's frame is the payload of one record of the run's journal
(``core_monitor.journal``), which writers read. Requests to a writer and its replies use the
same frames on pipes, each one of the records of "The process boundary" below (``Start``,
``Flush``, ..., ``Ready``, ``Flushed``, ...).

Exceptions cross as ``exception_parts`` (the pickled exception when it pickles, the traceback
text, the class's qualified name, the message) and are rebuilt by ``rebuild_exception`` with
the original class when that class's module is already imported in the training process (or
``strict``); otherwise as ``BackendError`` naming it, so that a report never imports an SDK.
"""

from __future__ import annotations

import builtins
import copyreg
import io
import mmap
import pickle
import struct
import sys
import time
import traceback
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any, NamedTuple

from .. import shutdown
from ..errors import BackendError, RemoteTraceback
from ..events import Batch, Row


def _read_only(mapping: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(mapping)


#: How ``encode_parts`` pickles what ``pickle`` cannot by itself (this module's own table:
#: the process-wide ``copyreg`` registry is left alone).
_TABLE = {**copyreg.dispatch_table,
          MappingProxyType: lambda proxy: (_read_only, (dict(proxy),))}

#: Seconds a writer takes at most, once the training process died or SIGTERM came, to write
#: what is left, flush and close (its reader thread then ends it): ``shutdown.EXIT_TIMEOUT``.
#: Here, not in ``writer``, because both sides read it: importing the ``writer`` module in the
#: training process would put it in ``sys.modules`` of every process that then runs it with
#: ``python -m`` (a second copy, and a ``RuntimeWarning`` from ``runpy`` on stderr).
DRAIN_SECONDS = shutdown.EXIT_TIMEOUT
#: Seconds past the drain limit a start (importing the SDK, starting its run) still running is
#: given when the training process died or SIGTERM came during it: writers start behind
#: ``Monitor()``, so the trainer may die while they import; the drain limit then counts from
#: the end of the start (as ``processes.STARTUP_SECONDS`` bounds a start the trainer waits for).
START_SECONDS = 120.0

class SharedPage:
    """The memory a writer shares with the training process, by field (``SIZE`` bytes, laid
    out as below; one writer writes it, the training process reads it).

    =========  ======  ===============  =========================================================
    offset     bytes   field            meaning
    =========  ======  ===============  =========================================================
    0          1       ``busy``         1 while a hook runs
    1          1       ``finishing``    1 once the writer runs its closing hooks (the final
                                        flush, ``monitor_crash``, ``monitor_close``)
    8          8       ``handled``      calls handled (what ``close`` counts as undelivered
                                        when it gives up on a hung writer)
    16         8       ``read_bytes``   bytes of the journal read (what the training process
                                        counts against the writer's bound)
    24         8       ``busy_since``   ``time.monotonic()`` at which the running hook started
                                        (system-wide on Linux: a hook stuck for longer than the
                                        drop grace makes a writer past its bound drop at once)
    =========  ======  ===============  =========================================================

    Args:
        memory: a writable buffer of at least ``SIZE`` bytes (an ``mmap`` of a ``memfd``).
    """

    SIZE = 32
    _U64 = struct.Struct("<Q")
    _F64 = struct.Struct("<d")
    __slots__ = ("memory",)

    def __init__(self, memory: Any) -> None:
        self.memory = memory

    @classmethod
    def open(cls, fd: int) -> SharedPage | None:
        """The page of the shared memory file ``fd``; ``None`` for ``fd < 0`` (none)."""
        return cls(mmap.mmap(fd, cls.SIZE)) if fd >= 0 else None

    @property
    def busy(self) -> bool:
        return bool(self.memory[0])

    @busy.setter
    def busy(self, value: bool) -> None:
        self.memory[0] = 1 if value else 0

    @property
    def finishing(self) -> bool:
        return bool(self.memory[1])

    @finishing.setter
    def finishing(self, value: bool) -> None:
        self.memory[1] = 1 if value else 0

    @property
    def handled(self) -> int:
        return self._U64.unpack_from(self.memory, 8)[0]

    @handled.setter
    def handled(self, value: int) -> None:
        self._U64.pack_into(self.memory, 8, value)

    @property
    def read_bytes(self) -> int:
        return self._U64.unpack_from(self.memory, 16)[0]

    @read_bytes.setter
    def read_bytes(self, value: int) -> None:
        self._U64.pack_into(self.memory, 16, value)

    @property
    def busy_since(self) -> float:
        return self._F64.unpack_from(self.memory, 24)[0]

    @busy_since.setter
    def busy_since(self, value: float) -> None:
        self._F64.pack_into(self.memory, 24, value)


#: Seconds a writer's count of calls handled may stand still, outside its closing hooks, before
#: an exit limit (``DRAIN_SECONDS``, the core's ``shutdown.EXIT_TIMEOUT``) that has passed ends
#: it: a writer still handling calls is not killed (``Progress``).
PROGRESS_SECONDS = 5.0
#: Seconds one closing hook (the final flush, ``monitor_crash``, ``monitor_close``: Comet's
#: ``end()`` took 10-17 s on a loaded node) may run before an exit limit that has passed ends
#: the writer. With Slurm's default ``KillWait`` (30 s) and Kubernetes's default
#: ``terminationGracePeriodSeconds`` (30 s), the platform's SIGKILL comes first.
CLOSE_HOOK_SECONDS = 60.0


class Progress:
    """Whether a writer is still making progress, read from its shared memory: its count of
    calls handled moved within ``PROGRESS_SECONDS``, or it runs its closing hooks and the one
    running started less than ``CLOSE_HOOK_SECONDS`` ago. An exit limit that has passed ends a
    writer only once ``stalled()``.

    Args:
        shared: the writer's ``SharedPage``, or ``None`` (no shared memory: always stalled,
            the limit applies as it is).
    """

    def __init__(self, shared: SharedPage | None) -> None:
        self.shared = shared
        self.handled = -1
        self.moved = time.monotonic()

    def stalled(self) -> bool:
        """Whether the writer made no progress (class docstring) by now."""
        shared = self.shared
        if shared is None:
            return True
        now = time.monotonic()
        handled = shared.handled
        if handled != self.handled:
            self.handled, self.moved = handled, now
            return False
        if shared.finishing:
            return shared.busy and now - shared.busy_since >= CLOSE_HOOK_SECONDS
        return now - self.moved >= PROGRESS_SECONDS


# The process boundary ------------------------------------------------------------------------
#
# A writer and the training process talk in frames (``encode``/``Frames``) on two pipes, each
# message one of the small records below (named tuples: they pickle as their class, which both
# sides import with this module). The calls themselves travel in the journal, not here
# (``encode_call``).
#
# ==================  ============================================================  ==========
# request             meaning (training process -> writer, control pipe)            placed
# ==================  ============================================================  ==========
# ``Start``           the backend, the run, the journal to read                     at once
# ``Wake``            read the journal now (past the size trigger)                  at once
# ``Skip``            calls from ``first`` on are not for this writer                at once
# ``Unskip``          ... up to ``to``                                              at once
# ``MoveJournal``     the run's journal failed: go on in ``folder`` from ``seq``    at once
# ``Flush``           flush, then answer ``Flushed(marker)``                        at ``seq``
# ``Stop``            nothing more comes: write everything, close, exit             at ``seq``
# ==================  ============================================================  ==========
#
# A request placed "at ``seq``" is handled after every call logged before it (the journal's
# record ``seq`` is the first one after it). Replies (writer -> training process, reply pipe):
# ``Ready``, ``StartFailed``, ``Failed``, ``Warned``, ``Flushed``, ``Closed``, ``Ending``.


class Start(NamedTuple):
    """Start the backend ``module:qualname`` as ``name`` for ``run`` with ``options``, reading
    the journal in ``folder`` (its first record ``first``; from ``since``, its backend's
    cursor, for a writer started again, else from ``first``), ``limit`` bytes behind at most
    (``ephemeral``: the monitor's own journal); ``start_slot``: the ``memfd`` to ``flock``
    before importing the backend, or -1."""

    module: str
    qualname: str
    name: str
    run: Any
    options: dict[str, Any]
    folder: str
    first: int
    since: int | None
    ephemeral: bool
    limit: int
    start_slot: int


class Wake(NamedTuple):
    """Read the journal now (the training process saw the writer past its size trigger)."""


class Skip(NamedTuple):
    """The calls from the journal's record ``first`` on are not for this writer (dropped for
    it, or its budget spent), until an ``Unskip``."""

    first: int


class Unskip(NamedTuple):
    """The calls skipped since the last ``Skip`` end before the journal's record ``to``."""

    to: int


class MoveJournal(NamedTuple):
    """The run's journal failed: read the journal in ``folder`` from its record ``seq`` on."""

    folder: str
    seq: int


class Flush(NamedTuple):
    """Flush the backend once every call before the journal's record ``seq`` is written, then
    answer ``Flushed(marker, ...)``."""

    marker: int
    seq: int


class Stop(NamedTuple):
    """Nothing more comes after the journal's record ``seq``: write everything, close the
    backend (``monitor_crash`` first when ``reason``, e.g. SIGTERM, says why) and exit."""

    reason: str | None
    seq: int


class Ready(NamedTuple):
    """The backend started; ``facts``: what it told (``{"state": (resumed, last_step),
    "started": (began, ended)}``, ``time.monotonic()`` seconds)."""

    facts: dict[str, Any]


class StartFailed(NamedTuple):
    """The backend's start raised (``exception_parts``); the writer exits."""

    error: tuple[bytes | None, str, str, str]


class Failed(NamedTuple):
    """The backend's ``hook`` raised (``exception_parts``)."""

    hook: str
    error: tuple[bytes | None, str, str, str]


class Warned(NamedTuple):
    """A warning issued in the writer (``warning_parts``), for the training process to
    issue."""

    message: str
    type_path: str
    base: str


class Flushed(NamedTuple):
    """The flush ``marker`` is done; ``handled``: calls handled so far."""

    marker: int
    handled: int


class Closed(NamedTuple):
    """The backend is closed; ``handled``: calls handled in all."""

    handled: int


class Ending(NamedTuple):
    """The writer ends by itself, and why (its training process died, or SIGTERM)."""

    why: str


#: The hook name of a frame holding a ``monitor_write`` batch as its rows (``Batch.rows``):
#: ``encode_call`` and ``decode_call`` are the only places that know it.
WRITE_ROWS = "monitor_write:rows"

HEADER = struct.Struct("<II")
LENGTH = struct.Struct("<Q")
_dumps = pickle.dumps
_pack = HEADER.pack


def encode(message: Any) -> bytes:
    """One frame holding ``message``, all in-band (the hot path: scalars, control)."""
    data = _dumps(message, 5)
    return _pack(len(data), 0) + data


def encode_parts(message: Any) -> list[Any]:
    """One frame holding ``message`` as a list of byte-likes for ``os.writev``: numpy arrays
    inside travel as out-of-band buffers, never copied into a ``bytes``; read-only mappings
    (a sanitised config) travel as ``dict`` and arrive read-only again."""
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    pickler = pickle.Pickler(out, 5, buffer_callback=buffers.append)
    pickler.dispatch_table = _TABLE
    pickler.dump(message)
    data = out.getbuffer()
    raws = [buffer.raw() for buffer in buffers]
    head = _pack(len(data), len(raws)) + b"".join(LENGTH.pack(r.nbytes) for r in raws)
    return [head, data, *raws]


def encode_call(hook: str, kwargs: dict[str, Any]) -> bytes:
    """The frame of one hook call (a journal record), encoded once for every writer. A
    ``monitor_write`` batch travels as its rows, plain tuples: pickling ``Batch.rows`` of 10
    scalars takes 0.75 us, the ``Batch`` object itself 2.7 us (its class is looked up by name
    at every dump); ``decode_call`` wraps them in a ``Batch`` again, the one shape the hook
    receives in every dispatch mode."""
    if hook == "monitor_write":
        events = kwargs["events"]
        if type(events) is Batch:
            return encode_rows(events.rows)
    return b"".join(encode_parts((hook, kwargs)))


def encode_rows(rows: tuple[Row, ...]) -> bytes:
    """The frame of ``monitor_write(events=Batch(rows))`` (``encode_call``), from the rows
    alone: ``log()``'s hot path builds no ``Batch`` for writers (``FanOut.write_rows``)."""
    data = _dumps((WRITE_ROWS, rows), 5)
    return _pack(len(data), 0) + data


def decode_call(frame: bytes) -> tuple[str, Any]:
    """The ``(hook, kwargs)`` of a frame ``encode_call`` made."""
    frames = Frames()
    frames.feed(frame)
    hook, kwargs = next(iter(frames))
    if hook == WRITE_ROWS:
        return "monitor_write", {"events": Batch(kwargs)}
    return hook, kwargs


class Frames:
    """Cuts a byte stream into messages: ``feed`` bytes, iterate the complete messages."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        """Append ``chunk`` read from the pipe."""
        self._buffer += chunk

    @property
    def partial(self) -> bool:
        """Whether bytes of an incomplete frame are held (the stream ended mid-frame)."""
        return bool(self._buffer)

    def __iter__(self) -> Iterator[Any]:
        buffer = self._buffer
        view = memoryview(buffer)
        at, end = 0, len(buffer)
        try:
            while end - at >= HEADER.size:
                size, count = HEADER.unpack_from(buffer, at)
                head = HEADER.size + count * LENGTH.size
                if end - at < head:
                    break
                lengths = [LENGTH.unpack_from(buffer, at + HEADER.size + i * LENGTH.size)[0]
                           for i in range(count)]
                total = head + size + sum(lengths)
                if end - at < total:
                    break
                start = at + head
                out, offset = [], start + size
                for length in lengths:
                    out.append(bytes(view[offset:offset + length]))
                    offset += length
                at += total
                yield pickle.loads(view[start:start + size], buffers=out)
        finally:
            view.release()
            del buffer[:at]


def exception_parts(error: BaseException) -> tuple[bytes | None, str, str, str]:
    """``(pickled exception or None, traceback text, "module.QualName", message)``."""
    blob: bytes | None
    try:
        blob = pickle.dumps(error, 5)
        pickle.loads(blob)  # a class whose pickle does not round-trip is sent by name
    except Exception:
        blob = None
    kind = type(error)
    text = "".join(traceback.format_exception(kind, error, error.__traceback__))
    return blob, text, f"{kind.__module__}.{kind.__qualname__}", str(error)


def rebuild_exception(parts: tuple[bytes | None, str, str, str], *,
                      strict: bool) -> BaseException:
    """The exception of ``exception_parts``: its own class when that class's module is
    imported here already (or ``strict``, which imports it), else ``BackendError``; the
    original traceback text is its ``__cause__`` (a ``RemoteTraceback``)."""
    blob, text, type_path, message = parts
    module = type_path.rpartition(".")[0]
    error: BaseException | None = None
    if blob is not None and (strict or module in sys.modules):
        try:
            error = pickle.loads(blob)
        except Exception:
            error = None
    if error is None:
        error = BackendError(type_path, message)
    error.__cause__ = RemoteTraceback(text)
    return error


def warning_parts(message: Warning | str, category: type[Warning]) -> tuple[str, str, str]:
    """``(text, "module.QualName" of the category, its nearest built-in base's name)``."""
    base = next(c for c in category.__mro__ if c.__module__ == "builtins")
    return str(message), f"{category.__module__}.{category.__qualname__}", base.__name__


def warning_category(type_path: str, base: str) -> type[Warning]:
    """The category of ``warning_parts``: the class itself when its module is imported here,
    else its nearest built-in base (``UserWarning`` at least). Imports nothing."""
    module_name, _, qualname = type_path.rpartition(".")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if found is not None else ():
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    fallback = getattr(builtins, base, UserWarning)
    return fallback if isinstance(fallback, type) and issubclass(fallback, Warning) else (
        UserWarning)
