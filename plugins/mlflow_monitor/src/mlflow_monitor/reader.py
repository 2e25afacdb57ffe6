"""Read a run back from MLflow's own storage, through ``MlflowClient`` (never through the core).

The run is found as ``MlflowMonitor`` wrote it: the same tracking URI resolution (the
``tracking_uri`` argument; else a URI the user set with ``MLFLOW_TRACKING_URI`` or
``mlflow.set_tracking_uri``; else ``sqlite:///<run.log_dir>/mlflow/mlflow.db``; else MLflow's
default), experiment ``experiment`` (default ``run.project``), and the newest run named
``run.ranked_name`` (``<name>-rank<k>`` for ``run.rank`` k > 0), unless ``run_id`` names it.
``read_media`` reads the images and text artifacts back, their names parsed by ``storage``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Image, Text

from . import _compat
from .storage import (
    CONFIG_TAG_PREFIX,
    CRASH_TAG,
    IMAGE_DIR,
    TEXT_DIR,
    local_store_uri,
    parse_media_file,
    restore_value,
    unescape_key,
)

__all__ = ["MAX_RETRIES", "REQUEST_TIMEOUT", "client_for", "find_run", "read_config", "read_crash",
           "read_media", "read_rows"]

#: Request limits of the readers' calls (see ``MlflowMonitor``'s options of the same names).
REQUEST_TIMEOUT = 10.0
MAX_RETRIES = 2


def client_for(run: RunInfo, tracking_uri: str | None = None) -> Any:
    """An ``mlflow.MlflowClient`` for the store ``run`` was written to (see the module docstring).

    Raises:
        FileNotFoundError: the local store under ``run.log_dir`` does not exist (no run was
            ever written there).
    """
    mlflow = _compat.check()
    if tracking_uri is None and not mlflow.is_tracking_uri_set() and run.log_dir is not None:
        database = Path(run.log_dir) / "mlflow" / "mlflow.db"
        if not database.exists():
            raise FileNotFoundError(f"no MLflow store at {str(database)!r}")
        tracking_uri = local_store_uri(run.log_dir)
    return _compat.open_client(tracking_uri)


def find_run(
    run: RunInfo, *, tracking_uri: str | None = None, experiment: str | None = None,
    run_id: str | None = None,
) -> Any:
    """The ``mlflow.entities.Run`` that ``run`` was logged to.

    Args:
        run: the run as the core described it (``Monitor.run``).
        tracking_uri, experiment: as given to the backend (defaults as the backend's).
        run_id: the MLflow run id; skips the search by name.

    Raises:
        LookupError: no experiment of that name, or no run of that name in it.
        mlflow.exceptions.MlflowException: the store cannot be read (after the request
            limits ``REQUEST_TIMEOUT``/``MAX_RETRIES``).
    """
    client = client_for(run, tracking_uri)
    with _compat.request_limits(REQUEST_TIMEOUT, MAX_RETRIES):
        if run_id is not None:
            return client.get_run(run_id)
        name = experiment or run.project
        found = client.get_experiment_by_name(name)
        if found is None:
            raise LookupError(f"no MLflow experiment {name!r} at {client.tracking_uri}")
        wanted = run.ranked_name
        for quote in ("'", '"'):
            if quote not in wanted:
                runs = client.search_runs(
                    [found.experiment_id],
                    filter_string=f"attributes.run_name = {quote}{wanted}{quote}",
                    order_by=["attributes.start_time DESC"],
                    max_results=1,
                )
                break
        else:  # a name with both quote characters: look through the experiment's runs
            runs = [r for r in client.search_runs([found.experiment_id],
                                                  order_by=["attributes.start_time DESC"])
                    if r.info.run_name == wanted][:1]
        if not runs:
            raise LookupError(f"no MLflow run named {wanted!r} in experiment {name!r} at "
                              f"{client.tracking_uri}")
        return runs[0]


def read_rows(
    run: RunInfo, *, tracking_uri: str | None = None, experiment: str | None = None,
    run_id: str | None = None,
) -> list[tuple[str, int, float]]:
    """Every metric point of the run, through ``MlflowClient.get_metric_history``.

    Keys are unescaped (``storage.unescape_key``), values +-1.7976931348623157e308 become +-inf
    (``storage.restore_value``). Order: the order the points were logged (MLflow's history order
    per metric, by timestamp, which the backend makes strictly increasing per tag; across
    tags, by timestamp, then key).

    Args:
        run, tracking_uri, experiment, run_id: as ``find_run``.

    Returns:
        ``[(tag, step, value), ...]`` with ``step`` an ``int`` and ``value`` a ``float``.

    Raises:
        LookupError, FileNotFoundError, mlflow.exceptions.MlflowException: as ``find_run``.
    """
    found = find_run(run, tracking_uri=tracking_uri, experiment=experiment, run_id=run_id)
    client = client_for(run, tracking_uri)
    points = []
    with _compat.request_limits(REQUEST_TIMEOUT, MAX_RETRIES):
        for key in sorted(found.data.metrics):
            tag = unescape_key(key)
            for order, metric in enumerate(client.get_metric_history(found.info.run_id, key)):
                points.append((metric.timestamp, key, order, tag, int(metric.step),
                               restore_value(float(metric.value))))
    points.sort()
    return [(tag, step, value) for _, _, _, tag, step, value in points]


def read_config(
    run: RunInfo, *, tracking_uri: str | None = None, experiment: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The run's stored config: its params, keys unescaped, each overridden by its run tag
    ``mlflow_monitor.config.<key>`` when a later ``Monitor.log_config`` changed it.

    Values are the ``str`` MLflow holds (``storage.param_value``); ``{}`` when there is none.

    Raises:
        LookupError, FileNotFoundError, mlflow.exceptions.MlflowException: as ``find_run``.
    """
    found = find_run(run, tracking_uri=tracking_uri, experiment=experiment, run_id=run_id)
    config = {unescape_key(key): value for key, value in found.data.params.items()}
    for key, value in found.data.tags.items():
        if key.startswith(CONFIG_TAG_PREFIX):
            config[unescape_key(key[len(CONFIG_TAG_PREFIX) :])] = value
    return config


def read_media(
    run: RunInfo, *, tracking_uri: str | None = None, experiment: str | None = None,
    run_id: str | None = None,
) -> list[tuple[str, int, Image | Text]]:
    """Read a run's images and text back through ``MlflowClient.list_artifacts`` and
    ``download_artifacts`` (the ``images/`` and ``text/`` folders, each in one call, into a
    temporary folder removed afterwards).

    Args:
        run, tracking_uri, experiment, run_id: as ``mlflow_monitor.find_run``.

    Returns:
        ``[(tag, step, value), ...]`` in the order logged (by the timestamp in each file name,
        then its path): ``value`` an ``Image`` (``array``: the PNG decoded, ``uint8``
        ``(H, W, C)``, ``C`` 1, 3 or 4 as logged; no caption) or a ``Text`` (the file's UTF-8
        text, exact). Files in ``images/`` and ``text/`` not named as above are ignored.

    Raises:
        LookupError, FileNotFoundError, mlflow.exceptions.MlflowException: as ``find_run``.
    """
    import numpy as np
    from PIL import Image as PILImage

    found = find_run(run, tracking_uri=tracking_uri, experiment=experiment, run_id=run_id)
    client = client_for(run, tracking_uri)
    run_id = found.info.run_id
    entries = []
    media: list[tuple[str, int, Image | Text]] = []
    with tempfile.TemporaryDirectory(prefix="mlflow-media-") as local, \
            _compat.request_limits(REQUEST_TIMEOUT, MAX_RETRIES):
        for folder, ext in ((IMAGE_DIR, "png"), (TEXT_DIR, "md")):
            found_here = False
            for info in client.list_artifacts(run_id, folder):
                parsed = None if info.is_dir else parse_media_file(info.path.rsplit("/", 1)[-1])
                if parsed is not None and parsed[3] == ext:
                    found_here = True
                    tag, step, ms, _ = parsed
                    entries.append((ms, info.path, tag, step))
            if found_here:
                client.download_artifacts(run_id, folder, local)
        entries.sort()
        for _, path, tag, step in entries:
            stored = Path(local, path)
            if path.endswith(".png"):
                with PILImage.open(stored) as picture:
                    pixels = np.asarray(picture)
                media.append((tag, step, Image(pixels.reshape(*pixels.shape[:2], -1))))
            else:
                media.append((tag, step, Text(stored.read_bytes().decode("utf-8"))))
    return media


def read_crash(run: RunInfo, *, tracking_uri: str | None = None,
               experiment: str | None = None) -> str | None:
    """Why the run ended by a crash: the tag ``storage.CRASH_TAG`` of a run whose status is
    ``FAILED`` (``""`` for a failed run without it); ``None`` when the run did not fail.
    Arguments and errors as for ``find_run``."""
    found = find_run(run, tracking_uri=tracking_uri, experiment=experiment)
    if found.info.status != "FAILED":
        return None
    return str(found.data.tags.get(CRASH_TAG, ""))
