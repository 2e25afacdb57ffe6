"""MLflow backend for ``core-monitor``: scalars as MLflow metrics, the config as params,
images and text as run artifacts (``mlflow_monitor.media``).

Select it as ``Monitor(["mlflow"], project=..., mlflow={"tracking_uri": "http://host:5000"})``;
without a tracking URI and with a ``log_dir`` it writes the local store
``sqlite:///<log_dir>/mlflow/mlflow.db``. See ``MlflowMonitor`` for the options and
``mlflow_monitor.storage`` for how tags, media keys and config are stored.

After a crash (the training process killed, ``os._exit``, a segfault: the core's writer process
calls ``monitor_crash``) the run ends with status ``FAILED`` instead of ``FINISHED``, and its tag
``mlflow_monitor.crash`` (``CRASH_TAG``) says what the writer saw; ``find_run(run).info.status``
and ``.data.tags`` read both back.

Modules, each importing only those listed after it: ``backend`` (``MlflowMonitor``: the hooks, the
rows waiting for ``log_batch``, the requests to the store and their failures), ``reader``
(read-back: scalars, config, media), ``media`` (writing images and text), ``options`` (option
checks), ``storage`` (key escaping, run and
artifact names, the local store), ``_compat`` (the MLflow internals used, and their check).

Importing this package imports no MLflow: the SDK is imported when a monitor starts.
"""

from __future__ import annotations

from .backend import MlflowDeliveryError, MlflowMonitor
from .reader import client_for, find_run, read_config, read_media, read_rows
from .storage import (
    CRASH_TAG,
    ESCAPE,
    MEDIA_ESCAPE,
    escape_key,
    local_store_uri,
    media_key,
    media_tag,
    param_value,
    unescape_key,
)

__all__ = [
    "CRASH_TAG",
    "ESCAPE",
    "MEDIA_ESCAPE",
    "MlflowDeliveryError",
    "MlflowMonitor",
    "client_for",
    "escape_key",
    "find_run",
    "local_store_uri",
    "media_key",
    "media_tag",
    "param_value",
    "read_config",
    "read_media",
    "read_rows",
    "unescape_key",
]
