"""Read a run back from MLflow's own storage, through ``MlflowClient`` (never through the core).

The run is found as ``MlflowMonitor`` wrote it: the same tracking URI resolution (the
``tracking_uri`` argument; else a URI the user set with ``MLFLOW_TRACKING_URI`` or
``mlflow.set_tracking_uri``; else ``sqlite:///<run.log_dir>/mlflow/mlflow.db``; else MLflow's
default), experiment ``experiment`` (default ``run.project``), and the newest run named
``run.name`` (``<name>-rank<k>`` for ``run.rank`` k > 0), unless ``run_id`` names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core_monitor import RunInfo

from . import _compat
from .media import read_media
from .storage import (
    CONFIG_TAG_PREFIX,
    local_store_uri,
    restore_value,
    run_name,
    unescape_key,
)

__all__ = ["MAX_RETRIES", "REQUEST_TIMEOUT", "client_for", "find_run", "read_config",
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
    return mlflow.MlflowClient(tracking_uri=tracking_uri)


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
        wanted = run_name(run.name, run.rank)
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
