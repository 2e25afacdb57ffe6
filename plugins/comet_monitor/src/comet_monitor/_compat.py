"""Everything this plugin relies on in comet_ml beyond its documented API, in one place, with
the check that it is still there.

Two things: (1) what must be in the environment before ``comet_ml`` is first imported
(``import_comet``: Comet's own switches for its import hooks and its error reporting, read once
at import), and (2) the offline archive's layout (a zip of ``experiment.json`` and
``messages.json``, JSON lines of ``{"type": ..., "payload": ...}``), which Comet writes and its
``comet upload`` reads but does not document or ship a reader for. ``problems()`` lists what
this comet_ml lacks of both; the backend's ``check_sdk()`` reports it and the core turns it
into a ``BackendLoadError`` naming ``TESTED``. Nothing here imports comet_ml at module import.
"""

from __future__ import annotations

import inspect
import os
from types import ModuleType

from core_monitor.compat import require_sdk

#: The comet_ml versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "comet_ml>=3.50,<3.59"

#: Set (unless the user set them) before this plugin first imports comet_ml. Comet reads both
#: once, at import: ``COMET_DISABLE_AUTO_LOGGING=1`` keeps it from installing import hooks that
#: patch torch, TensorBoard, Keras, scikit-learn, MLflow and others (a monitoring backend must
#: not change the trainer); ``COMET_ERROR_TRACKING_ENABLE=false`` keeps it from starting
#: Sentry, which sends the SDK's own errors to Comet's Sentry project (about half of imports,
#: chosen at random). A script that imported comet_ml before the monitor started keeps what
#: it had.
IMPORT_ENV = {
    "COMET_DISABLE_AUTO_LOGGING": "1",
    "COMET_ERROR_TRACKING_ENABLE": "false",
}

#: The offline archive: ``<offline_directory>/<experiment key>.zip`` (``<key>-<random>.zip``
#: for an ``ExistingOfflineExperiment``), holding these two files and the files of uploads.
EXPERIMENT_FILE = "experiment.json"
MESSAGES_FILE = "messages.json"
#: Message types of ``messages.json`` the reader reads (``comet_ml.messages``).
METRIC, PARAMETER, LOG_OTHER, FILE_UPLOAD = "metric_msg", "parameter_msg", "log_other", \
    "file_upload"
#: ``upload_type`` of an image (``Experiment.log_image``) and a text (``log_text``).
IMAGE_UPLOAD, TEXT_UPLOAD = "visualization", "text-sample"
#: What ``Experiment.end()`` logs on its own: the run's duration in seconds as a metric
#: (outside pytest), and the experiment name as a ``log_other``.
DURATION_METRIC, NAME_OTHER = "process duration", "Name"
#: The keyword arguments of the offline experiment classes this plugin passes.
_OFFLINE_KWARGS = ("project_name", "workspace", "offline_directory", "log_code", "log_graph",
                   "auto_param_logging", "auto_metric_logging", "parse_args",
                   "auto_output_logging", "log_env_details", "log_git_metadata",
                   "log_git_patch", "log_env_gpu", "log_env_host", "log_env_cpu",
                   "log_env_disk", "display_summary_level", "experiment_key")

# The SDK is imported only when a backend is built, but must be there for the plugin to load.
require_sdk("comet_ml", "comet-monitor")


def import_comet() -> ModuleType:
    """``import comet_ml`` with ``IMPORT_ENV`` set first where the user has not set it.

    The variables stay set in this process (a later ``import comet_ml`` elsewhere reads the
    same). Raises ``ImportError`` when comet_ml is not installed.
    """
    for name, value in IMPORT_ENV.items():
        os.environ.setdefault(name, value)
    import comet_ml

    return comet_ml


def problems() -> list[str]:
    """Import comet_ml (``import_comet``); what it lacks of what this plugin uses (``[]``:
    nothing)."""
    comet_ml = import_comet()
    found = [f"no comet_ml.{name}" for name in
             ("OfflineExperiment", "ExistingOfflineExperiment", "Experiment",
              "ExistingExperiment") if not hasattr(comet_ml, name)]
    if found:
        return found
    for name in ("OfflineExperiment", "ExistingOfflineExperiment"):
        parameters = inspect.signature(getattr(comet_ml, name).__init__).parameters
        found += [f"comet_ml.{name}() takes no {arg!r}" for arg in _OFFLINE_KWARGS
                  if arg not in parameters]
    for method in ("log_metrics", "log_parameters", "log_other", "add_tags", "set_name",
                   "log_image", "log_text", "get_key", "end", "flush"):
        if not callable(getattr(comet_ml.OfflineExperiment, method, None)):
            found.append(f"no OfflineExperiment.{method}()")
    try:
        from comet_ml.config import config_constants
    except ImportError:
        return [*found, "no comet_ml.config.config_constants (the offline archive's names)"]
    for name, want in (("OFFLINE_EXPERIMENT_JSON_FILE_NAME", EXPERIMENT_FILE),
                       ("OFFLINE_EXPERIMENT_MESSAGES_JSON_FILE_NAME", MESSAGES_FILE)):
        if getattr(config_constants, name, None) != want:
            found.append(f"the offline archive's {name} is not {want!r}")
    from comet_ml import messages

    for name, want in (("MetricMessage", METRIC), ("ParameterMessage", PARAMETER),
                       ("LogOtherMessage", LOG_OTHER), ("UploadFileMessage", FILE_UPLOAD)):
        if getattr(getattr(messages, name, None), "type", None) != want:
            found.append(f"comet_ml.messages.{name}.type is not {want!r}")
    return found
