"""Trackio backend for ``core-monitor``: scalars in Trackio's own SQLite database, offline.

Layout: with ``log_dir`` given, Trackio's folder is ``<log_dir>/trackio`` and the run's rows go
to ``<log_dir>/trackio/<project>.db`` (one SQLite database per project, Trackio's own format:
table ``metrics``, one row per step with the scalars as JSON; table ``configs`` for the config).
With ``log_dir=None`` Trackio's own folder applies (``TRACKIO_DIR`` as Trackio read it at import,
else ``~/.cache/huggingface/trackio``). ``TRACKIO_DIR=<log_dir>/trackio trackio show`` opens
the dashboard.

Writing goes through the ``trackio.Run`` object, one ``Run.log(row, step=step)`` per step of a
batch (as ``trackio.log`` does), so Trackio applies its own rules: it renames the tags
``step``, ``time``, ``timestamp``, ``project``, ``run``, ``metrics`` and every tag starting with
``__`` to ``"__" + tag`` (``read_rows`` reverses that), stores NaN and +/-inf as the JSON strings
``"NaN"``, ``"Infinity"``, ``"-Infinity"``, and stamps each row with its own UTC time. The run is
never made Trackio's "current run": a script's own ``trackio.init()``/``trackio.log()`` calls
are left alone. No network request is made unless ``space_id`` or ``server_url`` is given.

After a crash (the training process killed, ``os._exit``, a segfault: the core's writer process
calls ``monitor_crash``) Trackio, which has no run status, gets an alert of level ERROR on the
run (title ``"training process died"``, ``CRASH_ALERT_TITLE``; text: what the writer saw), shown
on the run's dashboard page; ``read_alerts`` reads it back.

Modules, each importing only those listed after it: ``backend`` (the hooks), ``options``
(option checks), ``start`` (starting a local run), ``reader`` (read-back: scalars, config,
media), ``media`` (writing images, histograms and text), ``storage`` (run names, tag and config
key renames, media types, the database path), ``folder`` (Trackio's one folder per process),
``_compat`` (every Trackio module and internal the plugin uses, and its version check: no
other module imports Trackio). Importing this package does not import Trackio; the backend's
constructor does.
"""

from __future__ import annotations

from ._compat import RESERVED_TAGS
from .backend import TrackioMonitor
from .folder import trackio_dir
from .reader import read_alerts, read_config, read_media, read_rows
from .storage import CRASH_ALERT_TITLE, RENAME_PREFIX, original_tag

__all__ = [
    "CRASH_ALERT_TITLE",
    "RENAME_PREFIX",
    "RESERVED_TAGS",
    "TrackioMonitor",
    "original_tag",
    "read_alerts",
    "read_config",
    "read_media",
    "read_rows",
    "trackio_dir",
]
