"""TensorBoard backend for ``core-monitor``: scalars and hyperparameters as standard event files.

Layout: ``<log_dir>/<project>/<run name>/events.out.tfevents.<time>.<host>.<pid>.<n><suffix>``
(``log_dir=None`` means ``./runs``, TensorBoard's and PyTorch's default), so
``tensorboard --logdir <log_dir>`` shows the run as ``<project>/<run name>``. Writing goes through
TensorBoard's own ``EventFileWriter`` and ``Summary.Value(simple_value=...)`` protobufs; no
TensorFlow, torch or tensorboardX is needed.

After a crash (the training process killed, ``os._exit``, a segfault: the core's writer process
calls ``monitor_crash``): TensorBoard has no run status, so the run gets one text summary, tag
``core_monitor/crash`` (``CRASH_TAG``), at its largest step, saying what the writer saw; the
Text dashboard shows it and ``read_media`` reads it back as a ``Text``.

Modules, each importing only those listed after it: ``backend`` (the hooks), ``reader``
(read-back with TensorBoard's own readers: scalars, HParams, media), ``media`` (encoding images,
histograms and text), ``storage`` (folder layout, HParams values), ``_compat`` (the TensorBoard
modules used, and their check). Importing this package does not import TensorBoard (~0.2 s);
the backend's constructor does.
"""

from __future__ import annotations

from .backend import TensorBoardMonitor
from .reader import read_config, read_media, read_rows
from .storage import CRASH_TAG, DEFAULT_LOG_DIR, hparam_value, run_dir

__all__ = [
    "CRASH_TAG",
    "DEFAULT_LOG_DIR",
    "TensorBoardMonitor",
    "hparam_value",
    "read_config",
    "read_media",
    "read_rows",
    "run_dir",
]
