"""The run journal: every call a ``Monitor`` accepted, on disk, before ``log()`` returns.

One journal per run (per rank where ranks have runs of their own): a folder of append-only
segment files and one cursor file per backend. The models are wandb's transaction log (the
``.wandb`` file that ``wandb sync`` replays), the OpenTelemetry collector's persistent sending
queue and Kafka's consumer offsets.

Where it lives (``folder``): ``<root>/<project>/<run name>[/rank-<k>]``, where ``root`` is
``Monitor(journal_dir=...)`` when given (e.g. a node-local disk), else the folder the
environment variable ``ROOT_ENV`` names, else ``<log_dir>/.journal`` (beside the run, on the
filesystem a job's next attempt reaches), else, for a monitor without ``log_dir`` (whose
backends write where their SDKs' defaults say), ``$XDG_STATE_HOME/experiment-monitors/journal``
(``~/.local/state/...``, the XDG base directory for state): never the current directory.

Segments: ``<first seq, 20 digits>.seg``. A record is ``<payload length: u32><crc32 of the
payload: u32><payload>``; the payload is the call's ``wire`` frame
(``wire.encode``/``wire.encode_parts``): a call is encoded once. The journal is the data path
to the writer processes: each follows it at its own pace (``Tail``), so what a writer has not
read is on disk, not in a pipe.
Records are numbered from 0 across segments (``seq``): the first seq of a segment is in its
name, so deleting a segment renumbers nothing. Besides the calls, two kinds of records mark the
run: ``START`` (who wrote: the backends, the ``RunInfo``, the process; one per ``Monitor``) and
``CLOSE`` (that monitor closed). A torn last record (the process was SIGKILLed inside a
``write``, or the disk filled) fails its length or checksum and ends the reading of its
segment: nothing after it was acknowledged, since one ``write`` carries one record and
``log()`` returned after it; a short write rolls to a new segment, and the next attempt of a
run begins one, so nothing is appended after a torn record.

Durability: one plain ``os.write`` per call (in the page cache: it survives the death of the
process, not of the machine); ``os.fsync`` at ``flush()``, ``close()``, when a segment rolls
and at most ``FSYNC_SECONDS`` after an earlier append.

Cursors: ``cursors/<backend>`` holds the seq below which every record was confirmed by that
backend's tracker (its ``monitor_flush`` or ``monitor_close`` returned without raising after
them). It is written by whoever calls the backend (its writer process, or the training
process for thread and in-line backends, or ``monitors sync``), replaced atomically
(``os.replace``). A segment is deleted once every backend named by the journal's ``START``
records has a cursor past its last record (``Journal.collect``), unless ``keep``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from .dispatch import wire
from .run import RunInfo

#: Bytes after which the current segment is closed and a new one begun.
SEGMENT_BYTES = 16 << 20
#: Seconds after an append at most before it is fsynced (checked at the next append, and at
#: ``flush()``/``close()``, which always fsync).
FSYNC_SECONDS = 2.0
#: The folder under ``log_dir`` holding every run's journal when no ``journal_dir`` is given.
FOLDER_NAME = ".journal"
#: The environment variable naming the journals' root folder when ``journal_dir`` is not given
#: (read when the ``Monitor`` starts): an operator's node-local disk for every job.
ROOT_ENV = "EXPERIMENT_MONITORS_JOURNAL_DIR"
#: The record kinds that are no call: who started writing, and that the monitor closed.
START = "journal:start"
CLOSE = "journal:close"
#: A record's header: payload length, CRC-32 of the payload.
HEADER = struct.Struct("<II")
SUFFIX = ".seg"
CURSORS = "cursors"

_crc = zlib.crc32
_pack = HEADER.pack
_write = os.write


def journal_folder(run: RunInfo, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of ``run``'s journal (module docstring): under ``root`` when given, else
    under ``$EXPERIMENT_MONITORS_JOURNAL_DIR``, ``<run.log_dir>/.journal``, or the XDG state
    folder."""
    if root is None:
        root = os.environ.get(ROOT_ENV) or None
    if root is None and run.log_dir is not None:
        root = run.log_dir / FOLDER_NAME
    if root is None:
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state")
        root = Path(state) / "experiment-monitors" / "journal"
    # Absolute: the cursors are written at flush and close, after a chdir the script may do.
    folder = Path(root).absolute() / run.project / run.name
    return folder / f"rank-{run.rank}" if run.rank else folder


@dataclass(frozen=True)
class Start:
    """A ``START`` record: what one ``Monitor`` wrote to.

    Attributes:
        seq: the record's number.
        run: the ``RunInfo`` its backends were given.
        backends: ``(name, module, qualname, options)`` of each backend, in start order.
        pid: the process that wrote, and ``host`` its host name (``monitors sync`` refuses a
            journal whose writer still runs).
        keep: ``Monitor(keep_journal=...)``: no segment is deleted (``monitors sync`` too).
    """

    seq: int
    run: RunInfo
    backends: tuple[tuple[str, str, str, dict[str, Any]], ...]
    pid: int
    host: str
    keep: bool = False


class Journal:
    """The append side of one run's journal (module docstring).

    Args:
        folder: the journal's folder (created).
        keep: never delete a segment (``Monitor(keep_journal=True)``).
        segment_bytes: roll to a new segment past this size.

    Attributes:
        folder: as given.
        next_seq: the number the next record gets (continues an existing journal).

    Raises:
        OSError: the folder or a segment cannot be made.
    """

    def __init__(self, folder: str | os.PathLike[str], *, keep: bool = False,
                 segment_bytes: int = SEGMENT_BYTES, first: int | None = None) -> None:
        self.folder = Path(folder)
        self.keep = keep
        self.segment_bytes = segment_bytes
        #: The outermost folder this journal made (``None``: its folder existed), which
        #: ``discard`` removes.
        self.made: Path | None = None
        for parent in (self.folder, *self.folder.parents):
            if parent.exists():
                break
            self.made = parent
        (self.folder / CURSORS).mkdir(parents=True, exist_ok=True)
        self.names: set[str] = {name for start in starts(self.folder)
                                for name, *_ in start.backends}
        self.next_seq = end_seq(self.folder) if first is None else first
        self.fd = -1
        self.size = 0
        #: Bytes of records appended by this object (what writers reading it count against).
        self.total = 0
        self.synced_at = time.monotonic()
        self.dirty = False
        self._open_segment()

    def _open_segment(self) -> None:
        path = self.folder / f"{self.next_seq:020d}{SUFFIX}"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # A segment named after the next seq holds no whole record: at most the torn bytes
        # of an earlier process's last write, which a record appended after would hide.
        os.ftruncate(self.fd, 0)
        self.size = 0
        self.path = path

    def append(self, frame: bytes) -> int:
        """Append one record holding ``frame`` (a ``wire`` frame) with one ``write``; its seq.

        Raises:
            OSError: the write failed (a full disk): nothing of the record counts.
        """
        record = _pack(len(frame), _crc(frame)) + frame
        return self.appended(_write(self.fd, record), len(record))

    def appended(self, written: int, size: int) -> int:
        """Count a record of ``size`` bytes of which ``written`` were just written to ``fd``
        (``append``, or the fan-out's own pass); its seq.

        Raises:
            OSError: a short write (a full disk): the torn record is not counted and is
                overwritten by no later one (readers stop at it, ``records``).
        """
        if written != size:
            # A torn record would end every reader at it: the segment ends here.
            self.roll()
            raise OSError(f"journal {self.path}: wrote {written} of {size} bytes")
        seq = self.next_seq
        self.next_seq = seq + 1
        self.size += written
        self.total += written
        if self.dirty:
            if time.monotonic() - self.synced_at >= FSYNC_SECONDS:
                self.sync()
        else:
            self.dirty = True
            self.synced_at = time.monotonic()
        if self.size >= self.segment_bytes:
            self.roll()
        return seq

    def record(self, frame: bytes) -> bytes:
        """The record holding ``frame`` (header and frame), for a write of the caller's own
        followed by ``appended``."""
        return _pack(len(frame), _crc(frame)) + frame

    def append_parts(self, parts: Sequence[Any]) -> int:
        """``append`` for a frame given as byte-likes (``wire.encode_parts``: media buffers)."""
        return self.append(b"".join(parts))

    def append_message(self, message: Any) -> int:
        """Encode ``message`` as a ``wire`` frame and append it (meta records)."""
        return self.append_parts(wire.encode_parts(message))

    def start(self, run: RunInfo, backends: Iterable[tuple[str, str, str, dict[str, Any]]],
              ) -> int:
        """Append the ``START`` record of a monitor writing to ``backends``; its seq."""
        listed = tuple(backends)
        self.names.update(name for name, *_ in listed)
        return self.append_message((START, {"run": run, "backends": listed, "pid": os.getpid(),
                                            "host": os.uname().nodename, "keep": self.keep}))

    def sync(self) -> None:
        """fsync the current segment (what was appended is on the disk)."""
        if self.fd >= 0 and self.dirty:
            os.fsync(self.fd)
            self.dirty = False
            self.synced_at = time.monotonic()

    def roll(self) -> None:
        """Close the current segment (fsynced) and begin a new one at ``next_seq``; delete
        the segments every cursor passed (``collect``)."""
        self.sync()
        os.close(self.fd)
        self._open_segment()
        with contextlib.suppress(OSError):
            self.collect()

    def close(self) -> None:
        """Append ``CLOSE``, fsync and close the segment; deletes what every cursor passed."""
        if self.fd < 0:
            return
        self.segment_bytes = 1 << 62  # the last record: no new segment after it
        with contextlib.suppress(OSError):
            self.append_message((CLOSE, {}))
        with contextlib.suppress(OSError):
            self.sync()
        os.close(self.fd)
        self.fd = -1
        self.collect()

    def discard(self) -> None:
        """Close without a ``CLOSE`` record and remove the folders this journal made (a
        monitor that wrote nothing: ``resume="must"`` found no run)."""
        self.forget()
        if self.made is not None:
            import shutil

            shutil.rmtree(self.made, ignore_errors=True)

    def forget(self) -> None:
        """In a forked child: close the inherited descriptor, writing nothing."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = -1

    def write_cursor(self, name: str, seq: int) -> None:
        """Set backend ``name``'s cursor to ``seq`` (``write_cursor``)."""
        write_cursor(self.folder, name, seq)

    def collect(self) -> list[Path]:
        """Delete the segments whose every record each backend's cursor passed (none with
        ``keep``; never the segment being written); the paths deleted."""
        if self.keep:
            return []
        return collect(self.folder, self.names, self.path if self.fd >= 0 else None)


def collect(folder: str | os.PathLike[str], names: Iterable[str],
            current: Path | None = None) -> list[Path]:
    """Delete the segments of the journal in ``folder`` whose last record every cursor of
    ``names`` passed, but ``current``; the paths deleted."""
    names = list(names)
    if not names:
        return []
    done = min(read_cursor(folder, name) for name in names)
    deleted = []
    segments = segment_paths(folder)
    for path, following in pairwise(segments):
        if path == current or first_seq(following) > done:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            deleted.append(path)
    return deleted


# Reading ---------------------------------------------------------------------------------


def segment_paths(folder: str | os.PathLike[str]) -> list[Path]:
    """The journal's segment files, in seq order."""
    try:
        return sorted(Path(folder).glob(f"*{SUFFIX}"))
    except OSError:
        return []


def first_seq(path: Path) -> int:
    """The seq of a segment's first record (its name)."""
    return int(path.name.removesuffix(SUFFIX))


def records(folder: str | os.PathLike[str], since: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(seq, frame)`` of each whole record with ``seq >= since``, in order. A record cut
    short or failing its checksum (a torn write) ends its segment; reading goes on at the next
    segment, whose name tells its first seq."""
    segments = segment_paths(folder)
    for path, following in zip(segments, [*segments[1:], None], strict=False):
        if following is not None and first_seq(following) <= since:
            continue
        seq = first_seq(path)
        try:
            data = path.read_bytes()
        except OSError:
            continue
        at, end = 0, len(data)
        while end - at >= HEADER.size:
            size, crc = HEADER.unpack_from(data, at)
            body = data[at + HEADER.size:at + HEADER.size + size]
            if len(body) < size or _crc(body) != crc:
                break  # torn: nothing after it in this segment was acknowledged
            if seq >= since:
                yield seq, body
            seq += 1
            at += HEADER.size + size


class Tail:
    """Follows one journal as it is appended to, from record ``since`` on: a writer
    process's data path (``core_monitor.dispatch.writer``).

    Each ``take`` returns the whole records appended since the last one. A record not yet
    whole (being written, or torn by a death inside its ``write``) is waited for; a segment
    named after the next seq (the journal rolled, or a later attempt began one after a torn
    record) is moved to once the current one holds nothing more. Segments deleted meanwhile
    (``collect``) stay readable through the descriptor held.

    Args:
        folder: the journal's folder.
        since: the seq of the first record wanted (earlier ones are read past, not returned).

    Attributes:
        seq: the seq of the next record.
        bytes: bytes of records read past, from ``since`` on (header included).
    """

    def __init__(self, folder: str | os.PathLike[str], since: int) -> None:
        self.folder = Path(folder)
        self.since = since
        self.seq = 0
        self.bytes = 0
        self.fd = -1
        self.path: Path | None = None
        self._buffer = b""
        self._at = 0
        self._open(since)

    def _open(self, seq: int) -> bool:
        """Open the segment holding record ``seq`` (the last whose first seq is at most it)."""
        held = [path for path in segment_paths(self.folder) if first_seq(path) <= seq]
        if not held:
            return False
        self._switch(held[-1])
        return True

    def _switch(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.path, self._buffer, self._at = fd, path, b"", 0
        self.seq = first_seq(path)

    def take(self, limit: int = 1 << 20) -> list[tuple[int, bytes]]:
        """``(seq, frame)`` of the whole records appended since the last call (those from
        ``since``), up to ``limit`` bytes of them (at least one); ``[]`` when none is whole
        yet."""
        taken: list[tuple[int, bytes]] = []
        if self.fd < 0 and not self._open(self.since):
            return taken
        got = 0
        while got < limit:
            data, at = self._buffer, self._at
            if len(data) - at >= HEADER.size:
                size, crc = HEADER.unpack_from(data, at)
                stop = at + HEADER.size + size
                if stop <= len(data):
                    body = data[at + HEADER.size:stop]
                    if _crc(body) == crc:
                        self._at = stop
                        if self.seq >= self.since:
                            taken.append((self.seq, body))
                            self.bytes += stop - at
                            got += stop - at
                        self.seq += 1
                        continue
                    # torn (a death inside its write): nothing more in this segment
                    if not self._next_segment():
                        break
                    continue
            if not self._fill():
                break
        return taken

    def _fill(self) -> bool:
        """Read more of the segment into the buffer, or move to the next segment; whether
        anything changed."""
        chunk = os.read(self.fd, 1 << 16)
        if chunk:
            self._buffer = self._buffer[self._at:] + chunk
            self._at = 0
            return True
        return self._next_segment()

    def _next_segment(self) -> bool:
        """Move to the segment named after the next seq, when there is one."""
        following = self.folder / f"{self.seq:020d}{SUFFIX}"
        if following == self.path or not following.exists():
            return False
        self._switch(following)
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


#: The ``(hook, kwargs)`` a record's frame holds (``wire.decode_call``).
decode = wire.decode_call


def calls(folder: str | os.PathLike[str], since: int = 0,
          ) -> Iterator[tuple[int, str, Any]]:
    """``(seq, hook, kwargs)`` of every record from ``since``, meta records included."""
    for seq, frame in records(folder, since):
        hook, kwargs = decode(frame)
        yield seq, hook, kwargs


def starts(folder: str | os.PathLike[str]) -> list[Start]:
    """The ``START`` records still in the journal, in order."""
    found = []
    for seq, frame in records(folder):
        if _META not in frame[:48]:
            continue
        hook, kwargs = decode(frame)
        if hook == START:
            found.append(Start(seq, kwargs["run"], tuple(kwargs["backends"]), kwargs["pid"],
                               kwargs["host"], bool(kwargs.get("keep"))))
    return found


def end_seq(folder: str | os.PathLike[str]) -> int:
    """The seq the next record gets: one past the last whole record (0 for none)."""
    segments = segment_paths(folder)
    if not segments:
        return 0
    last = first_seq(segments[-1])
    for seq, _ in records(folder, last):
        last = seq + 1
    return last


def closed(folder: str | os.PathLike[str]) -> bool:
    """Whether the journal's last record is a ``CLOSE`` (its last monitor closed)."""
    segments = segment_paths(folder)
    last = b""
    for _, frame in records(folder, first_seq(segments[-1]) if segments else 0):
        last = frame
    return bool(last) and decode(last)[0] == CLOSE


# Cursors ---------------------------------------------------------------------------------


def cursor_path(folder: str | os.PathLike[str], name: str) -> Path:
    """The file of backend ``name``'s cursor."""
    return Path(folder) / CURSORS / name


def read_cursor(folder: str | os.PathLike[str], name: str) -> int:
    """Backend ``name``'s cursor: every record below it was confirmed (0 without a file)."""
    try:
        return int(cursor_path(folder, name).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def hold(folder: str | os.PathLike[str], name: str, *, wait: bool = True) -> int | None:
    """Lock backend ``name``'s cursor for this process (``fcntl.flock`` on
    ``cursors/<name>.lock``, released when the process ends, however it ends): a writer holds it
    while it runs, so ``monitors sync`` never delivers beside it. The descriptor, or ``None``
    when ``wait`` is false and another process holds it (or locks are not available).

    Raises:
        OSError: the lock file cannot be made.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return -1
    path = cursor_path(folder, name).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


def write_cursor(folder: str | os.PathLike[str], name: str, seq: int) -> None:
    """Set backend ``name``'s cursor to ``seq``, never lowering it: written into a temporary
    file beside it, then ``os.replace``d (a reader sees the old or the new one, whole)."""
    path = cursor_path(folder, name)
    if seq <= read_cursor(folder, name):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{name}.{os.getpid()}.tmp")
    temporary.write_text(f"{seq}\n")
    os.replace(temporary, path)


def journal_left(folder: str | os.PathLike[str], names: Iterable[str]) -> dict[str, int]:
    """Backend name -> the calls (not ``START``/``CLOSE`` records) its cursor has not passed,
    for those of ``names`` with any."""
    cursors = {name: read_cursor(folder, name) for name in names}
    if not cursors:
        return {}
    left = dict.fromkeys(cursors, 0)
    for seq, frame in records(folder, min(cursors.values())):
        if _META in frame[:48]:
            continue
        for name, cursor in cursors.items():
            if seq >= cursor:
                left[name] += 1
    return {name: count for name, count in left.items() if count}


_META = b"journal:"
#: What the first bytes of a ``START`` or ``CLOSE`` record's frame hold (no call's do).
META = _META


def remove_unheld(folder: str | os.PathLike[str], name: str | None = None) -> bool:
    """Remove the journal in ``folder`` unless a backend's cursor lock other than ``name``'s
    is held (a writer still reading it); whether it was removed. For a journal of the
    monitor's own (``Monitor(journal=False)``), removed by the last process reading it."""
    import fcntl
    import shutil

    folder = Path(folder)
    for lock in (folder / CURSORS).glob("*.lock"):
        if lock.stem == name:
            continue
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        finally:
            os.close(fd)
    shutil.rmtree(folder, ignore_errors=True)
    return True
