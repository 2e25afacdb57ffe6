"""Every access to MLflow internals, and the check that they still have the expected shape.

One private dependency: bounding the HTTP time of this plugin's own requests. MLflow's client
reads the request timeout, retry count and back-off of every REST call from environment
variables at call time (``MLFLOW_HTTP_REQUEST_TIMEOUT``, default 120 s;
``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, default 7; ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``, default
2; ``MLFLOW_HTTP_REQUEST_BACKOFF_JITTER``; ``MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER``), through
module-level objects that ``mlflow.utils.rest_utils.http_request`` looks up by name; with a
server down one call blocks for about four minutes. ``MlflowClient`` has no per-client setting
and setting the variables would change every other MLflow call of the process too.

So, on first use, each of those objects in ``mlflow.utils.rest_utils`` is wrapped in a
``_ThreadOverride`` that answers ``.get()`` with a value set by ``request_limits`` for the
current thread only, and with the variable's own value everywhere else. MLflow calls made by
the user, or by this plugin outside ``request_limits``, see exactly what they saw before.

``open_client`` makes every ``MlflowClient`` of the plugin (backend and readers). For a SQLite
store it holds ``storage.store_lock`` around the client's construction, where MLflow builds the
store (``TrackingServiceClient.__init__`` fetches it: ``SqlAlchemyStore.__init__`` creates the
tables and runs the migrations of a store that lacks them), and around one read, which builds
it under the lock should a later MLflow build it lazily. It imports MLflow's SQL store module
(SQLAlchemy, Alembic: about a second) before taking the lock, so that processes opening an
existing store wait for each other only for its check (0.1 to 0.5 s each,
measured on 2 busy cores).
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import ModuleType
from typing import Any

from .storage import sqlite_database, store_lock

#: The MLflow versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "mlflow>=3.17,<4"

#: The names in ``mlflow.utils.rest_utils`` that ``request_limits`` overrides.
_LIMITS = {
    "timeout": "MLFLOW_HTTP_REQUEST_TIMEOUT",
    "max_retries": "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "backoff_factor": "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "backoff_jitter": "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER",
    "respect_retry_after": "MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER",
}
#: Back-off between retries of this plugin's requests (urllib3: no wait before the first
#: retry, then ``BACKOFF_FACTOR * 2**(n-1)`` seconds), with no jitter and no server-chosen
#: ``Retry-After`` wait, so the total time of one call is bounded (``request_time_bound``).
BACKOFF_FACTOR = 1.0

_local = threading.local()
_install_lock = threading.Lock()
_checked: ModuleType | None = None


class _ThreadOverride:
    """Stands in for one of MLflow's environment-variable objects in ``rest_utils``.

    ``get()`` returns the value ``request_limits`` set for the calling thread, else the wrapped
    variable's own ``get()``; every other attribute is the wrapped variable's.
    """

    def __init__(self, variable: Any) -> None:
        self._variable = variable

    def get(self) -> Any:
        values = getattr(_local, "values", None)
        if values is not None and self._variable.name in values:
            return values[self._variable.name]
        return self._variable.get()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._variable, name)

    def __str__(self) -> str:
        return str(self._variable)

    def __repr__(self) -> str:
        return repr(self._variable)


def problems() -> list[str]:
    """Import MLflow; what it lacks of what this plugin uses (``[]``: nothing). Changes
    nothing (``check()`` installs the overrides)."""
    import mlflow
    from mlflow.utils import rest_utils

    found = [f"mlflow.{attr} is missing" for attr in ("MlflowClient", "is_tracking_uri_set")
             if not hasattr(mlflow, attr)]
    http_request = getattr(rest_utils, "http_request", None)
    if http_request is None:
        return [*found, "mlflow.utils.rest_utils.http_request is missing"]
    parameters = inspect.signature(http_request).parameters
    found += [f"rest_utils.http_request() takes no {name!r} argument"
              for name in ("timeout", "max_retries", "backoff_factor", "backoff_jitter",
                           "respect_retry_after_header") if name not in parameters]
    for attr in _LIMITS.values():
        variable = getattr(rest_utils, attr, None)
        if variable is None or not callable(getattr(variable, "get", None)) or not isinstance(
            getattr(variable, "name", None), str
        ):
            found.append(f"mlflow.utils.rest_utils.{attr} is missing or has no .get()")
    return found


def check() -> ModuleType:
    """Import MLflow, have the core check it once (``problems()``, through
    ``MlflowMonitor.check_sdk``) and install the per-thread overrides.

    Returns:
        The ``mlflow`` module.

    Raises:
        ImportError: MLflow is not installed.
        core_monitor.BackendLoadError: MLflow's internals changed shape (names the tested
            versions).
    """
    global _checked
    if _checked is not None:
        return _checked
    import mlflow
    from mlflow.utils import rest_utils

    with _install_lock:
        if _checked is not None:
            return _checked
        for attr in _LIMITS.values():
            variable = getattr(rest_utils, attr)
            if not isinstance(variable, _ThreadOverride):
                setattr(rest_utils, attr, _ThreadOverride(variable))
        _checked = mlflow
    return mlflow


@contextmanager
def request_limits(timeout: float, max_retries: int) -> Iterator[None]:
    """Bound MLflow REST calls made by the current thread inside the ``with`` block.

    Args:
        timeout: seconds each HTTP attempt may wait to connect and for the response.
        max_retries: retries after a failed attempt (connection error, timeout, HTTP 408,
            429, 500, 502, 503, 504).

    Calls against a local store (``sqlite:///...``) make no HTTP request and are unaffected.
    ``check()`` must have run first.
    """
    values = {
        _LIMITS["timeout"]: timeout,
        _LIMITS["max_retries"]: max_retries,
        _LIMITS["backoff_factor"]: BACKOFF_FACTOR,
        _LIMITS["backoff_jitter"]: 0.0,
        _LIMITS["respect_retry_after"]: False,
    }
    previous = getattr(_local, "values", None)
    _local.values = values
    try:
        yield
    finally:
        _local.values = previous


def request_time_bound(timeout: float, max_retries: int) -> float:
    """Seconds one MLflow call under ``request_limits(timeout, max_retries)`` can take at most
    against a server that is down or hung: every attempt's timeout plus the back-off waits
    (0, 2, 4, ... seconds)."""
    backoff = sum(BACKOFF_FACTOR * 2 ** (n - 1) for n in range(2, max_retries + 1))
    return (max_retries + 1) * timeout + backoff


def open_client(tracking_uri: str | None) -> Any:
    """``mlflow.MlflowClient(tracking_uri=tracking_uri)``; a SQLite store's creation under
    ``storage.store_lock``, so that processes opening one new store at once do not break
    MLflow's migrations (see the module docstring). ``check()`` must have run first.

    Args:
        tracking_uri: as ``MlflowClient`` takes it; ``None``: MLflow's resolution (a URI the
            user set, else MLflow's default, ``sqlite:///mlflow.db`` in the current directory).

    Returns:
        The client.

    Raises:
        Whatever ``MlflowClient`` raises (a URI of no known scheme, a database that cannot be
        opened or has an out-of-date schema); the lock is released first. Blocks while
        another process creates the same SQLite store.
    """
    import mlflow

    database = sqlite_database(tracking_uri or mlflow.get_tracking_uri())
    if database is None:
        return mlflow.MlflowClient(tracking_uri=tracking_uri)
    with suppress(ImportError):  # the slow imports, outside the lock
        importlib.import_module("mlflow.store.tracking.sqlalchemy_store")
    with store_lock(database):
        client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        client.search_experiments(max_results=1)
    return client
