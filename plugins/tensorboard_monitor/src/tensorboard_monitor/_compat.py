"""Every TensorBoard module the plugin uses, imported on first use and checked once.

The plugin writes with ``tensorboard.summary.writer.event_file_writer.EventFileWriter`` (the
writer PyTorch's ``SummaryWriter`` wraps; TensorBoard documents no public writer that needs no
TensorFlow), builds HParams with ``tensorboard.plugins.hparams.summary_v2`` and reads back with
``EventAccumulator`` and the HParams plugin's ``metadata`` parser. ``sdk()`` checks that these
still have the shape the plugin relies on, else raises ``core_monitor.BackendLoadError`` naming
the supported range (the plugin's declared dependency). Nothing here imports TensorBoard at
module import: importing ``tensorboard_monitor`` stays cheap on ranks that write nothing.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from core_monitor.compat import require_sdk, sdk_changed, supported_range

DISTRIBUTION = "tensorboard-monitor"
TARGET = "tensorboard_monitor:TensorBoardMonitor"
#: The tested range, as in pyproject.toml (used when the distribution's metadata is absent).
SUPPORTED_FALLBACK = "tensorboard>=2.21,<3"

_WRITER_ARGS = ("logdir", "max_queue_size", "flush_secs", "filename_suffix")
_sdk: SimpleNamespace | None = None


# The SDK is imported only when a backend is built, but must be there for the plugin to load.
SDK = "tensorboard"
require_sdk(SDK, DISTRIBUTION)


def supported() -> str:
    """The TensorBoard requirement the installed plugin declares (``"tensorboard<3,>=2.21"``)."""
    return supported_range(DISTRIBUTION, SDK, SUPPORTED_FALLBACK)


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
        BackendLoadError: TensorBoard changed shape; the message names the supported range.
    """
    global _sdk
    if _sdk is not None:
        return _sdk
    import tensorboard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import metadata, summary_v2
    from tensorboard.plugins.text import metadata as text_metadata
    from tensorboard.plugins.text import summary_v2 as text_summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    problems = []
    missing = set(_WRITER_ARGS) - set(inspect.signature(EventFileWriter).parameters)
    if missing:
        problems.append(f"EventFileWriter() takes no {sorted(missing)}")
    problems += [f"no EventFileWriter.{m}" for m in ("add_event", "flush", "close")
                 if not callable(getattr(EventFileWriter, m, None))]
    if set(inspect.signature(summary_v2.hparams_pb).parameters) < {
        "hparams", "trial_id", "start_time_secs"
    }:
        problems.append("summary_v2.hparams_pb() changed")
    for name in ("PLUGIN_NAME", "SESSION_START_INFO_TAG", "parse_session_start_info_plugin_data"):
        if not hasattr(metadata, name):
            problems.append(f"no tensorboard.plugins.hparams.metadata.{name}")
    if not callable(getattr(text_summary, "text_pb", None)):
        problems.append("no tensorboard.plugins.text.summary_v2.text_pb")
    problems += [f"no Summary.{f}" for f in ("Image", "Value")
                 if not hasattr(summary_pb2.Summary, f)]
    if problems:
        raise sdk_changed("tensorboard", DISTRIBUTION, TARGET, sdk=SDK,
                          sdk_version=tensorboard.__version__, problems=problems,
                          supported=supported())
    _sdk = SimpleNamespace(
        Event=event_pb2.Event, EventFileWriter=EventFileWriter, hparams_pb=summary_v2.hparams_pb,
        EventAccumulator=EventAccumulator, hparams_metadata=metadata,
        Summary=summary_pb2.Summary, HistogramProto=summary_pb2.HistogramProto,
        text_pb=text_summary.text_pb, text_plugin=text_metadata.PLUGIN_NAME,
    )
    return _sdk
