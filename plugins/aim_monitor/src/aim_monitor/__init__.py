"""Aim backend for ``core-monitor``: scalars, images, histograms and text tracked with
``aim.Run.track`` at the caller's step, the config as the run param ``hparams``, in a local Aim
repository (``<log_dir>/aim``) or the one the ``repo`` option names.

Select it as ``Monitor(["aim"], project=..., log_dir=...)``; ``aim up --repo <log_dir>/aim``
shows the runs. See ``AimMonitor`` for the options and ``aim_monitor.storage`` for how points,
config and the crash mark are stored.

Modules, each importing only those listed after it: ``backend`` (``AimMonitor``: the hooks),
``reader`` (read-back through ``aim.Repo``: scalars, config, media, crash, group), ``storage``
(repository, segments, param names), ``_compat`` (the Aim internals used, and their check).

Importing this package imports no Aim: the SDK is imported when a monitor starts.
"""

from __future__ import annotations

from .backend import AimDeliveryError, AimMonitor
from .reader import find_run, read_config, read_crash, read_media, read_rows
from .storage import CRASH_KEY, CRASH_TAG, EDGES_KEY, HPARAMS, SEGMENT_KEY, repo_path

__all__ = [
    "CRASH_KEY",
    "CRASH_TAG",
    "EDGES_KEY",
    "HPARAMS",
    "SEGMENT_KEY",
    "AimDeliveryError",
    "AimMonitor",
    "find_run",
    "read_config",
    "read_crash",
    "read_media",
    "read_rows",
    "repo_path",
]
