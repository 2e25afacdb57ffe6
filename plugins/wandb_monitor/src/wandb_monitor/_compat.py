"""Every use of wandb internals, in one place, with a check that they are still there.

Two things have no public API in wandb: (1) a library's run that must not become the user's
(wandb's active-run list, ``wandb_setup._singleton`` and its ``_pid``/``_connection``, to know
whether this process started wandb's service and may stop it, and whether that service has
ended: ``ServiceConnection._proc``/``_client``, for ``service_lost``), and (2) reading an
offline run back: wandb writes no history JSON offline and ships no Python reader, so
``read_records`` decodes the ``.wandb`` transaction log (LevelDB-log framing: 32 KiB blocks,
CRC-32 per chunk) into wandb's own ``Record`` protobuf messages. ``problems()`` lists what this
wandb lacks of the shape relied on; the backend's ``check_sdk()`` reports it and the core turns
it into a ``BackendLoadError`` naming the tested range (``core_monitor.sdk``). Nothing here
imports wandb at module import.
"""

from __future__ import annotations

import importlib
import inspect
import os
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The wandb versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "wandb>=0.31,<0.32"

# The .wandb transaction log (wandb-core's transactionlog/leveldb packages): a 7-byte header,
# then LevelDB log records in 32 KiB blocks: crc32 (IEEE, of type byte + data), uint16 length,
# uint8 type, data. A record may be split into FIRST, MIDDLE..., LAST chunks across blocks.
_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK = 32768
_CHUNK_HEADER = struct.Struct("<IHB")
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_RECORD_FIELDS = ("history", "run", "config", "exit", "metric")


#: wandb's experimental setting naming the process its system monitor samples (CPU, memory,
#: threads of "the process"; wandb's default: the process that calls ``wandb.init``). In a
#: writer process the backend sets it to the training process (``core_monitor.run.training_pid``).
STATS_PID = "x_stats_pid"

def _record_class() -> Any:
    """wandb's ``Record`` protobuf message class. wandb builds its message classes when
    ``wandb.proto.wandb_internal_pb2`` runs, so a type checker sees no ``Record`` in it."""
    return importlib.import_module("wandb.proto.wandb_internal_pb2").Record


def problems() -> list[str]:
    """Import wandb; what it lacks of the internals this plugin uses (``[]``: nothing)."""
    import wandb
    from wandb.sdk import wandb_setup

    found = []
    setup = getattr(wandb_setup, "_WandbSetup", None)
    init_names = set(setup.__init__.__code__.co_names) if setup is not None else set()
    if not hasattr(wandb_setup, "_singleton") or not {"_pid", "_connection"} <= init_names:
        found.append("no wandb_setup._singleton with _pid and _connection")
    found += [f"no _WandbSetup.{m}" for m in ("remove_active_run", "most_recent_active_run")
              if not hasattr(setup, m)]
    if "reinit" not in inspect.signature(wandb.init).parameters:
        found.append("wandb.init() takes no reinit")
    fields = _record_class().DESCRIPTOR.fields_by_name
    found += [f"no Record.{f}" for f in _RECORD_FIELDS if f not in fields]
    if "uuid" not in fields or "telemetry" not in fields:
        found.append("no Record.uuid and Record.telemetry (flush's write-through)")
    if STATS_PID not in getattr(wandb.Settings, "model_fields", {}):
        found.append(f"no wandb.Settings.{STATS_PID} (system charts of the training process)")
    from wandb.sdk.interface import interface_shared

    if not hasattr(interface_shared.InterfaceShared, "_publish"):
        found.append("no InterfaceShared._publish (flush's write-through)")
    from wandb.sdk.lib.service import service_client, service_connection, service_process

    for owner, names in ((service_connection.ServiceConnection, {"_proc", "_client"}),
                         (service_process.ServiceProcess, {"_process"}),
                         (service_client.ServiceClient, {"_broken_exc"})):
        if not names <= set(owner.__init__.__code__.co_names):
            found.append(f"no {owner.__name__} with {', '.join(sorted(names))} (a service "
                         "that died)")
    return found


# wandb's process-wide state ------------------------------------------------------------------


def service_running() -> bool | None:
    """Whether this process has a wandb service connection; ``None`` if wandb changed inside."""
    from wandb.sdk import wandb_setup

    singleton = getattr(wandb_setup, "_singleton", False)
    if singleton is False:
        return None
    if singleton is None or getattr(singleton, "_pid", None) != os.getpid():
        return False
    connection = getattr(singleton, "_connection", False)
    return None if connection is False else connection is not None


def other_runs_active() -> bool:
    """Whether a run not started by this plugin is active in this process."""
    import wandb
    from wandb.sdk import wandb_setup

    if wandb.run is not None:
        return True
    singleton = getattr(wandb_setup, "_singleton", None)
    if singleton is None or getattr(singleton, "_pid", None) != os.getpid():
        return False
    try:
        return singleton.most_recent_active_run is not None
    except Exception:  # wandb changed inside: assume someone else's run is active
        return True


def service_lost() -> bool:
    """Whether this process's wandb service (``wandb-core``, started by ``wandb.init``) has
    ended: its process exited (SIGTERM to every process of a job, an out-of-memory kill) or its
    connection broke. ``False`` when there is none, or when it is not this process's child
    (a service reached through ``WANDB_SERVICE`` has no process handle here)."""
    from wandb.sdk import wandb_setup

    singleton = getattr(wandb_setup, "_singleton", None)
    if singleton is None or getattr(singleton, "_pid", None) != os.getpid():
        return False
    connection = getattr(singleton, "_connection", None)
    if connection is None:
        return False
    process = getattr(getattr(connection, "_proc", None), "_process", None)
    if process is not None and process.poll() is not None:
        return True
    return getattr(getattr(connection, "_client", None), "_broken_exc", None) is not None


def detach(run: Any) -> None:
    """Hide ``run`` from wandb's list of active runs: what a user's own ``wandb.init()``
    (``reinit="default"``) returns instead of a new run, and what ``reinit="finish_previous"``
    finishes. Without this, the user would get this plugin's run, or finish it."""
    from wandb.sdk import wandb_setup

    wandb_setup.singleton().remove_active_run(run)


# The .wandb transaction log ------------------------------------------------------------------


def read_records(path: str | os.PathLike[str], start: int = 0) -> Iterator[Any]:
    """Yield the ``wandb.proto.wandb_internal_pb2.Record`` messages of a ``.wandb`` file in order.

    Args:
        path: a ``run-<id>.wandb`` file, or a run folder holding exactly one.
        start: a byte offset: only records that begin in or after its 32 KiB block are read
            (0: the whole file).

    A file still being written ends at its last complete record (wandb-core writes whole
    32 KiB blocks until the run finishes).

    Raises:
        FileNotFoundError: no such file, or the folder holds no ``.wandb`` file.
        ValueError: not a wandb transaction log (header), an unknown format version, a folder
            with several ``.wandb`` files, or a corrupt chunk (checksum); the message says which.
    """
    record_class = _record_class()
    file = _wandb_file(path)
    start = start // _BLOCK * _BLOCK
    if start:
        with file.open("rb") as stream:
            stream.seek(start)
            data = stream.read()
        for payload in _payloads(data, start, file):
            record = record_class()
            record.ParseFromString(payload)
            yield record
        return
    data = file.read_bytes()
    if len(data) < len(_HEADER) and _HEADER.startswith(data):
        return  # just created: nothing written yet
    if data[:6] != _HEADER[:6]:
        raise ValueError(f"{str(file)!r} is not a wandb transaction log (bad header)")
    if data[6] != _HEADER[6]:
        raise ValueError(f"{str(file)!r} has transaction log version {data[6]}; this reader "
                         f"knows version 0 (tested with {TESTED}): upgrade wandb-monitor")
    for payload in _payloads(data, 0, file):
        record = record_class()
        record.ParseFromString(payload)
        yield record


def _payloads(data: bytes, start: int, file: Path) -> Iterator[bytes]:
    """Yield whole records of ``data`` (a file's bytes from block-aligned offset ``start``).

    Chunks that continue a record begun before ``start`` are skipped; a truncated tail ends the
    iteration (the writer has not got there yet).
    """
    pos = len(_HEADER) if start == 0 else 0
    offset = start
    parts: list[bytes] | None = None
    size = len(data)
    while True:
        left = _BLOCK - (offset + pos) % _BLOCK
        if left < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos += left
            continue
        if pos + _CHUNK_HEADER.size > size:
            return
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        end = pos + _CHUNK_HEADER.size + length
        if end > size or (crc == 0 and length == 0 and kind == 0):
            return  # not written yet
        chunk = data[pos + _CHUNK_HEADER.size : end]
        if zlib.crc32(chunk, zlib.crc32(bytes((kind,)))) != crc:
            raise ValueError(
                f"{str(file)!r} is corrupt: checksum mismatch in the chunk at byte {offset + pos}"
            )
        pos = end
        if kind == _FULL:
            parts = None
            yield chunk
        elif kind == _FIRST:
            parts = [chunk]
        elif kind == _MIDDLE and parts is not None:
            parts.append(chunk)
        elif kind == _LAST and parts is not None:
            parts.append(chunk)
            yield b"".join(parts)
            parts = None


def _wandb_file(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("run-*.wandb"))
        if not files:
            raise FileNotFoundError(f"no run-*.wandb file in {str(path)!r}")
        if len(files) > 1:
            raise ValueError(f"{str(path)!r} holds several .wandb files; pass one: {files}")
        return files[0]
    if not path.is_file():
        raise FileNotFoundError(f"no wandb run file or folder at {str(path)!r}")
    return path


def exit_record_written(file: Path) -> bool:
    """Whether the run's exit record (wandb's last record of a finished run) is in ``file``
    (reads only the last two blocks: the exit record is small and comes last)."""
    record_class = _record_class()
    try:
        size = file.stat().st_size
        start = max(0, size - 2 * _BLOCK) // _BLOCK * _BLOCK
        with file.open("rb") as stream:
            stream.seek(start)
            data = stream.read()
        record = record_class()
        for payload in _payloads(data, start, file):
            record.ParseFromString(payload)
            if record.HasField("exit"):
                return True
    except (OSError, ValueError):  # not created yet, or a chunk caught mid-write
        return False
    return False


#: Seconds ``write_through`` waits for wandb-core to write the padded block.
WRITE_THROUGH_TIMEOUT = 30.0


def publish_marker(run: Any) -> str:
    """Send one empty telemetry record padded past a block's size (its ``uuid`` field: a token
    new to this call, repeated), which makes wandb-core complete and write the 32 KiB block
    holding every record sent before it; return the token (``marker_in`` finds it). The
    padding carries no data (an empty telemetry update, on sync too); it costs about 33 KB of
    file.

    Raises:
        ConnectionError: wandb's service is gone (``service_lost``).
    """
    from wandb.proto import wandb_internal_pb2, wandb_telemetry_pb2

    token = uuid.uuid4().hex
    record = wandb_internal_pb2.Record(  # type: ignore[attr-defined]  # built at run time
        telemetry=wandb_telemetry_pb2.TelemetryRecord())  # type: ignore[attr-defined]
    # Past a block's end, a whole copy of the token lies inside one chunk of a written block.
    record.uuid = token * ((_BLOCK + 256) // len(token) + 1)
    run._interface._publish(record)
    return token


def marker_in(file: Path, start: int, token: str) -> int | None:
    """Where ``file`` holds ``token`` (``publish_marker``) at or after byte ``start``: the
    byte offset of its first copy there, or ``None`` when not (yet) written."""
    found = token.encode("ascii")
    try:
        with file.open("rb") as stream:
            stream.seek(start)
            at = stream.read().find(found)
    except OSError:
        return None
    return None if at < 0 else start + at


def write_through(run: Any, file: Path, timeout: float = WRITE_THROUGH_TIMEOUT) -> None:
    """Make every record sent so far reach ``file`` (the run's ``.wandb`` log) on disk.

    wandb-core writes the log in whole 32 KiB blocks and has no flush request: up to one block
    of the latest records lives only in its memory, and is lost when the training process is
    killed (SIGKILL, an out-of-memory kill), since wandb-core then exits without writing it.
    So this sends a marker (``publish_marker``) and waits until it is in the file. wandb-core
    writes in order, and may still be blocks behind when this is called (under load), so the
    wait is for this call's own marker, not for the file's next block.

    Raises:
        TimeoutError: the block did not reach the file within ``timeout`` seconds.
        ConnectionError: wandb's service is gone (``service_lost``), before or during the wait.
    """
    try:
        size = file.stat().st_size
    except OSError:
        size = 0
    token = publish_marker(run)
    deadline = time.monotonic() + timeout
    delay = 0.001
    # The padding follows what was on disk before it was sent.
    while marker_in(file, size, token) is None:
        if service_lost():
            raise ConnectionResetError("wandb: the service (wandb-core) ended before it wrote "
                                       f"the run's records to {str(file)!r}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"wandb: the run's records did not reach {str(file)!r} within "
                               f"{timeout:g} s of flush(); they may be lost if the process "
                               "is killed")
        time.sleep(delay)
        delay = min(2 * delay, 0.05)
