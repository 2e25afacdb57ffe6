"""Everything this plugin relies on in comet_ml beyond its documented API, in one place, with
the check that it is still there.

Three things: (1) what must be in the environment before ``comet_ml`` is first imported
(``import_comet``: Comet's own switches for its import hooks and its error reporting, read once
at import); (2) the offline archive's layout (a zip of ``experiment.json`` and
``messages.json``, JSON lines of ``{"type": ..., "payload": ...}``), which Comet writes and its
``comet upload`` reads but does not document or ship a reader for; (3) ``checkpoint``: an
archive of what an open offline experiment holds so far. Comet writes the archive only at
``end()`` and keeps everything until then in a temporary folder, so without it nothing of a
run survives its writer process being killed, and nothing is readable before close.
``problems()`` lists what this comet_ml lacks of them; the backend's ``check_sdk()`` reports it
and the core turns it into a ``BackendLoadError`` naming ``TESTED``. Nothing here imports
comet_ml at module import.
"""

from __future__ import annotations

import inspect
import os
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

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
#: The keyword arguments this plugin passes to the experiment classes (``Experiment``: all but
#: ``offline_directory``; ``ExistingExperiment`` passes its keywords on to ``Experiment``).
_OFFLINE_KWARGS = ("project_name", "workspace", "offline_directory", "log_code", "log_graph",
                   "auto_param_logging", "auto_metric_logging", "parse_args",
                   "auto_output_logging", "log_env_details", "log_git_metadata",
                   "log_git_patch", "log_env_gpu", "log_env_host", "log_env_cpu",
                   "log_env_disk", "display_summary_level", "experiment_key")

#: What ``checkpoint`` uses of an ``OfflineExperiment``: the folder its messages are streamed
#: to (``tmpdir``), the writer of ``experiment.json`` into it, and the archive's file name.
_CHECKPOINT_ATTRS = ("_write_experiment_meta_file", "_get_offline_archive_file_name")

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
    for name in ("OfflineExperiment", "ExistingOfflineExperiment", "Experiment"):
        parameters = inspect.signature(getattr(comet_ml, name).__init__).parameters
        found += [f"comet_ml.{name}() takes no {arg!r}" for arg in _OFFLINE_KWARGS
                  if arg not in parameters
                  and not (name == "Experiment" and arg == "offline_directory")]
    for method in ("log_metrics", "log_parameters", "log_other", "add_tags", "set_name",
                   "log_image", "log_text", "get_key", "end", "flush"):
        if not callable(getattr(comet_ml.OfflineExperiment, method, None)):
            found.append(f"no OfflineExperiment.{method}()")
    try:
        from comet_ml.config import config_constants
    except ImportError:
        return [*found, "no comet_ml.config.config_constants (the offline archive's names)"]
    found += [f"no comet_ml.config.{name}() (the process's current experiment)"
              for name in ("get_global_experiment", "set_global_experiment")
              if not callable(getattr(comet_ml.config, name, None))]
    for name, want in (("OFFLINE_EXPERIMENT_JSON_FILE_NAME", EXPERIMENT_FILE),
                       ("OFFLINE_EXPERIMENT_MESSAGES_JSON_FILE_NAME", MESSAGES_FILE)):
        if getattr(config_constants, name, None) != want:
            found.append(f"the offline archive's {name} is not {want!r}")
    found += [f"no OfflineExperiment.{name}() (flush's archive)" for name in _CHECKPOINT_ATTRS
              if not callable(getattr(comet_ml.OfflineExperiment, name, None))]
    from comet_ml import messages

    for name, want in (("MetricMessage", METRIC), ("ParameterMessage", PARAMETER),
                       ("LogOtherMessage", LOG_OTHER), ("UploadFileMessage", FILE_UPLOAD)):
        if getattr(getattr(messages, name, None), "type", None) != want:
            found.append(f"comet_ml.messages.{name}.type is not {want!r}")
    return found


def archive_name(experiment: Any) -> str:
    """The file name Comet gives the archive of offline ``experiment`` at ``end()``:
    ``<key>.zip``, or ``<key>-<random>.zip`` for an ``ExistingOfflineExperiment``."""
    return str(experiment._get_offline_archive_file_name())


#: The ``log_other`` key ``checkpoint`` logs (a fresh token each time) to know when Comet's
#: streamer has written everything logged before it.
FLUSH_OTHER = "monitor_flush"
#: Seconds ``checkpoint`` waits for Comet's streamer to write the messages logged so far.
FLUSH_TIMEOUT = 60.0


def checkpoint(experiment: Any, path: Path, timeout: float = FLUSH_TIMEOUT) -> None:
    """Write ``path``: the archive Comet would write if offline ``experiment`` ended now.

    An offline experiment's ``flush()`` returns at once (its streamer writes the messages file
    in a thread of its own, in logging order). So this logs the ``log_other``
    ``FLUSH_OTHER = <fresh token>`` and waits until that message is in the experiment's
    ``messages.json``: everything logged before it is then written. That folder (the messages
    and the files of uploads) and a fresh ``experiment.json`` (Comet's own writer, stop time
    now) are zipped to ``<path>.partial``, fsynced and renamed over ``path``, so a reader sees
    the previous archive or this one, never half of one. Call it from the thread that logs.
    ``end()`` later writes the final archive with the same content and more.

    Raises:
        TimeoutError: the streamer had not written the messages after ``timeout`` seconds
            (``path`` keeps the archive of the previous call).
        RuntimeError: the experiment has no temporary folder (comet_ml changed inside).
        OSError: the archive could not be written.
    """
    folder = getattr(experiment, "tmpdir", None)
    if not isinstance(folder, str) or not os.path.isdir(folder):
        raise RuntimeError(f"comet: the offline experiment has no temporary folder (tmpdir): "
                           f"comet_ml changed inside; this plugin is tested with {TESTED}")
    token = uuid.uuid4().hex
    experiment.log_other(FLUSH_OTHER, token)
    messages = os.path.join(folder, MESSAGES_FILE)
    found = token.encode("ascii")
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            with open(messages, "rb") as file:
                if found in file.read():
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"comet: the experiment's messages were not written within "
                               f"{timeout:g} s; {str(path)!r} holds the previous flush")
        time.sleep(delay)
        delay = min(2 * delay, 0.05)
    experiment._write_experiment_meta_file()
    partial = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(os.listdir(folder)):
            archive.write(os.path.join(folder, name), name)
    with open(partial, "rb") as file:
        os.fsync(file.fileno())
    os.replace(partial, path)


@contextmanager
def beside_current_experiment(comet_ml: ModuleType) -> Iterator[None]:
    """Create an experiment inside the block without ending the process's current one.

    comet_ml keeps one current ("global") experiment per process, and every new experiment
    ends the current one (``BaseExperiment.__init__`` calls its ``_on_end``) and takes its
    place. So the plugin's experiment would end a user's own in the same process
    (``comet_ml.start()``, accelerate's ``CometMLTracker``, the Trainer's ``CometCallback``,
    whose archive then lacks what was logged to it), and a user's experiment started later
    would end the plugin's. The current experiment is set aside for the block and put back
    after it (``comet_ml.config.get_global_experiment``/``set_global_experiment``), so the
    plugin's experiment is never the current one and the user's stays it.
    """
    config = comet_ml.config
    current = config.get_global_experiment()
    config.set_global_experiment(None)
    try:
        yield
    finally:
        config.set_global_experiment(current)
