"""Every TensorBoard module the plugin uses, imported on first use and checked once.

The plugin writes with ``tensorboard.summary.writer.event_file_writer.EventFileWriter`` (the
writer PyTorch's ``SummaryWriter`` wraps; TensorBoard documents no public writer that needs no
TensorFlow), builds HParams with ``tensorboard.plugins.hparams.summary_v2`` and reads back with
``EventAccumulator`` and the HParams plugin's ``metadata`` parser. ``problems()`` lists what
this TensorBoard lacks of the shape the plugin relies on; ``sdk()`` has the core check it once
(``core_monitor.compat.ensure_sdk``: a ``BackendLoadError`` naming the tested range). Nothing
here imports TensorBoard at module import: importing ``tensorboard_monitor`` stays cheap on ranks
that write nothing.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from core_monitor.compat import ensure_sdk, require_sdk

#: The TensorBoard versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "tensorboard>=2.21,<3"

_WRITER_ARGS = ("logdir", "max_queue_size", "flush_secs", "filename_suffix")
_sdk: SimpleNamespace | None = None


# The SDK is imported only when a backend is built, but must be there for the plugin to load.
require_sdk("tensorboard", "tensorboard-monitor")


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
    return found


def sdk() -> SimpleNamespace:
    """Import the TensorBoard modules the plugin uses; check them on the first call.

    Returns:
        A namespace with ``Event`` (``event_pb2.Event``), ``EventFileWriter``,
        ``hparams_pb`` (``summary_v2.hparams_pb``), ``EventAccumulator``,
        ``hparams_metadata`` (the HParams plugin's ``metadata`` module), ``Summary`` and
        ``HistogramProto`` (``summary_pb2``), ``text_pb`` (the Text plugin's
        ``summary_v2.text_pb``) and ``text_plugin`` (its plugin name).

    Raises:
        ImportError: TensorBoard is not installed.
        BackendLoadError: TensorBoard changed shape; the message names the tested range.
    """
    global _sdk
    if _sdk is not None:
        return _sdk
    ensure_sdk(__package__)  # the core runs TensorBoardMonitor.check_sdk() once: problems()
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
    )
    return _sdk
