"""Every TensorBoard module the plugin uses, imported on first use and checked once.

The plugin writes with ``tensorboard.summary.writer.event_file_writer.EventFileWriter`` (the
writer PyTorch's ``SummaryWriter`` wraps; TensorBoard documents no public writer that needs no
TensorFlow), builds HParams with ``tensorboard.plugins.hparams.summary_v2`` and reads back with
``EventAccumulator`` and the HParams plugin's ``metadata`` parser. ``problems()`` lists what
this TensorBoard lacks of the shape the plugin relies on; ``sdk()`` has the core check it once
(``core_monitor.sdk``: a ``BackendLoadError`` naming the tested range). Nothing
here imports TensorBoard at module import: importing ``tensorboard_monitor`` stays cheap on ranks
that write nothing.

**The record checksum.** TensorBoard's ``RecordWriter`` checksums every record with
``masked_crc32c`` from ``tensorboard.compat.tensorflow_stub.pywrap_tensorflow``: a pure-Python
table loop, run byte by byte on the writer's thread (about half the time a 10-scalar event costs).
``sdk()`` replaces the name ``record_writer.masked_crc32c`` with the same function over
``google_crc32c.value`` (Google's C library, a dependency of this plugin) when that package has
its C extension; ``problems()`` reports the name moved or a result differing from the SDK's.
Only writing changes: TensorBoard's readers keep their own check.
"""

from __future__ import annotations

import inspect
import struct
import warnings
from types import SimpleNamespace

#: The TensorBoard versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "tensorboard>=2.21,<3"

_WRITER_ARGS = ("logdir", "max_queue_size", "flush_secs", "filename_suffix")
_sdk: SimpleNamespace | None = None
#: Where ``RecordWriter.write`` looks the checksum function up (imported by name, 2.21).
_CRC_MODULE = "tensorboard.summary.writer.record_writer"


def problems() -> list[str]:
    """Import TensorBoard; what it lacks of what this plugin uses (``[]``: nothing)."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import metadata, summary_v2
    from tensorboard.plugins.text import summary_v2 as text_summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    found = []
    missing = set(_WRITER_ARGS) - set(inspect.signature(EventFileWriter).parameters)
    if missing:
        found.append(f"EventFileWriter() takes no {sorted(missing)}")
    found += [f"no EventFileWriter.{m}" for m in ("add_event", "flush", "close")
              if not callable(getattr(EventFileWriter, m, None))]
    if set(inspect.signature(summary_v2.hparams_pb).parameters) < {
        "hparams", "trial_id", "start_time_secs"
    }:
        found.append("summary_v2.hparams_pb() changed")
    for name in ("PLUGIN_NAME", "SESSION_START_INFO_TAG", "parse_session_start_info_plugin_data"):
        if not hasattr(metadata, name):
            found.append(f"no tensorboard.plugins.hparams.metadata.{name}")
    if not callable(getattr(text_summary, "text_pb", None)):
        found.append("no tensorboard.plugins.text.summary_v2.text_pb")
    found += [f"no Summary.{f}" for f in ("Image", "Value")
              if not hasattr(summary_pb2.Summary, f)]
    found += _crc_problems()
    return found


def _masked_crc32c(data: bytes) -> int:
    """TensorBoard's masked CRC-32C of ``data`` (``bytes``), computed by ``google_crc32c``."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _crc_problems() -> list[str]:
    """What keeps ``_fast_crc()`` from replacing the record writer's checksum (``[]``: nothing)."""
    import importlib

    record_writer = importlib.import_module(_CRC_MODULE)
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    current = getattr(record_writer, "masked_crc32c", None)
    if current is not pywrap_tensorflow.masked_crc32c and current is not _masked_crc32c:
        return [f"{_CRC_MODULE}.masked_crc32c is not the stub's masked_crc32c (the record "
                f"checksum moved; tested: {TESTED})"]
    if not _have_c_crc():
        return []  # the SDK's own checksum stays: nothing to compare
    sample = bytes(range(256)) * 3 + b"tensorboard-monitor"
    for data in (b"", struct.pack("<Q", len(sample)), sample):
        if _masked_crc32c(data) != pywrap_tensorflow.masked_crc32c(data):
            return [f"google_crc32c's masked CRC-32C differs from TensorBoard's on "
                    f"{len(data)} bytes (tested: {TESTED})"]
    return []


def _have_c_crc() -> bool:
    """Whether ``google_crc32c`` is installed with its C extension. Without it the package
    warns at import (a ``RuntimeWarning`` about its pure-Python fallback); that warning is
    not the user's concern here: the SDK's own checksum is kept then."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            import google_crc32c
    except ImportError:
        return False
    return google_crc32c.implementation == "c"


def _fast_crc() -> bool:
    """Have TensorBoard's record writer checksum with ``google_crc32c``'s C code.

    Returns:
        ``True`` when ``record_writer.masked_crc32c`` is now ``_masked_crc32c``; ``False``
        when ``google_crc32c`` is missing or has no C extension (its pure-Python fallback is
        no faster than TensorBoard's): the SDK's own checksum stays.
    """
    import importlib

    if not _have_c_crc():
        return False
    record_writer = importlib.import_module(_CRC_MODULE)
    record_writer.masked_crc32c = _masked_crc32c  # type: ignore[attr-defined]  # problems() checks it
    return True


def sdk() -> SimpleNamespace:
    """Import the TensorBoard modules the plugin uses; check them on the first call.

    Returns:
        A namespace with ``Event`` (``event_pb2.Event``), ``EventFileWriter``,
        ``hparams_pb`` (``summary_v2.hparams_pb``), ``EventAccumulator``,
        ``hparams_metadata`` (the HParams plugin's ``metadata`` module), ``Summary`` and
        ``HistogramProto`` (``summary_pb2``), ``text_pb`` (the Text plugin's
        ``summary_v2.text_pb``) and ``text_plugin`` (its plugin name), ``fast_crc``
        (``True``: event records are checksummed by ``google_crc32c``'s C code).

    Raises:
        ImportError: TensorBoard is not installed.
        BackendLoadError: TensorBoard changed shape; the message names the tested range.
    """
    global _sdk
    if _sdk is not None:
        return _sdk
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import metadata, summary_v2
    from tensorboard.plugins.text import metadata as text_metadata
    from tensorboard.plugins.text import summary_v2 as text_summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    _sdk = SimpleNamespace(
        Event=event_pb2.Event, EventFileWriter=EventFileWriter, hparams_pb=summary_v2.hparams_pb,
        EventAccumulator=EventAccumulator, hparams_metadata=metadata,
        Summary=summary_pb2.Summary, HistogramProto=summary_pb2.HistogramProto,
        text_pb=text_summary.text_pb, text_plugin=text_metadata.PLUGIN_NAME,
        fast_crc=_fast_crc(),
    )
    return _sdk
