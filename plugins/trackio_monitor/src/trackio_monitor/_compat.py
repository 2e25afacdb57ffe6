"""Every use of Trackio internals, in one place, with a check that they are still there.

Trackio's public API (``trackio.init``/``log``/``finish``) works on one process-wide current run
and folder, which a library must not take over, so the plugin drives ``trackio.run.Run`` itself.
``problems()`` lists what this Trackio lacks of the internals relied on; the backend's
``check_sdk()`` reports it and the core turns it into a ``BackendLoadError`` naming the tested
range (``core_monitor.sdk``). Nothing here imports Trackio at module import.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

#: The Trackio versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "trackio>=0.42,<0.44"

#: Tags Trackio keeps for itself (``trackio.utils.RESERVED_KEYS``), checked by ``problems()``.
#: Trackio stores each of them, and every tag starting with ``"__"``, as ``"__" + tag``.
RESERVED_TAGS: tuple[str, ...] = ("project", "run", "timestamp", "step", "time", "metrics")

# Run.__init__ arguments the plugin passes, and the private Run members it uses.
_RUN_ARGS = ("url", "project", "client", "name", "run_id", "group", "config", "existing_runs",
             "auto_log_gpu", "auto_log_cpu")
_RUN_MEMBERS = ("_get_username", "_flush_queues_inline", "alert", "finish", "log")
_RUN_STATE = ("_client_lock", "_config_logged", "_stop_flag", "config", "id", "name", "project")


def problems() -> list[str]:
    """Import Trackio; what it lacks of the internals this plugin uses (``[]``: nothing)."""
    from trackio import context_vars, utils
    from trackio.run import Run
    from trackio.sqlite_storage import SQLiteStorage

    found = []
    missing_args = set(_RUN_ARGS) - set(inspect.signature(Run.__init__).parameters)
    if missing_args:
        found.append(f"trackio.run.Run() takes no {sorted(missing_args)}")
    found += [f"no Run.{m}" for m in _RUN_MEMBERS if not callable(getattr(Run, m, None))]
    if tuple(sorted(getattr(utils, "RESERVED_KEYS", ()))) != tuple(sorted(RESERVED_TAGS)):
        found.append("trackio.utils.RESERVED_KEYS changed")
    if not isinstance(getattr(utils, "TRACKIO_DIR", None), Path):
        found.append("no trackio.utils.TRACKIO_DIR path")
    if not isinstance(getattr(context_vars, "current_run", None), contextvars.ContextVar):
        found.append("no trackio.context_vars.current_run")
    for name in ("get_project_db_filename", "validate_project_name", "init_db",
                 "get_latest_run_record_by_name", "_get_process_lock", "_get_connection"):
        if not callable(getattr(SQLiteStorage, name, None)):
            found.append(f"no SQLiteStorage.{name}")
    for name in ("serialize_values", "deserialize_values", "to_json_safe"):
        if not callable(getattr(utils, name, None)):
            found.append(f"no trackio.utils.{name}")
    import trackio

    if getattr(getattr(trackio, "AlertLevel", None), "ERROR", None) != "error":
        found.append("no trackio.AlertLevel.ERROR")
    return found


def run_problems(run: Any) -> list[str]:
    """The private members that only a started ``Run`` has, missing from ``run``."""
    return [f"no Run.{name}" for name in _RUN_STATE if not hasattr(run, name)]


@functools.cache
def local_run_class() -> type:
    """``trackio.run.Run`` minus the Hub look-up of the user name: ``Run.__init__`` calls
    ``huggingface_hub.whoami`` (a network request) whenever a Hugging Face token is configured,
    only to store ``_Username`` in the config. A local run needs no account."""
    from trackio.run import Run

    class LocalRun(Run):
        def _get_username(self) -> str | None:
            return None

    return LocalRun


def new_local_run(**kwargs: Any) -> Any:
    """``Run(url=None, client=None, existing_runs=[], **kwargs)`` without the Hub look-up."""
    return local_run_class()(url=None, client=None, existing_runs=[], **kwargs)


def init_remote(**init_kwargs: Any) -> Any:
    """``trackio.init(**init_kwargs)``, leaving Trackio's process-wide state as it was.

    ``trackio.init`` finishes the current run (a script's own), makes the new run current and
    sets ``trackio.config``: all of that is undone (every ``ContextVar`` of
    ``trackio.context_vars`` is saved and restored), so ``trackio.log`` keeps going to the
    script's own run.
    """
    import trackio
    from trackio import context_vars

    variables = [v for v in vars(context_vars).values() if isinstance(v, contextvars.ContextVar)]
    saved = [(variable, variable.get()) for variable in variables]
    saved_config = trackio.config
    context_vars.current_run.set(None)
    try:
        return trackio.init(**init_kwargs)
    finally:
        for variable, value in saved:
            variable.set(value)
        trackio.config = saved_config


def flush_now(run: Any) -> None:
    """Write the run's queued rows to SQLite now: what Trackio's sender thread does every 0.5 s
    (``Run._flush_queues_inline`` under ``Run._client_lock``)."""
    with run._client_lock:
        run._flush_queues_inline()


def store_config(run: Any, update: dict[str, Any], *, local: bool) -> None:
    """Merge ``update`` into the run's config where Trackio's dashboard reads it.

    Trackio writes ``Run.config`` to its ``configs`` table (one row per run, ``INSERT OR
    REPLACE``) with the run's first logged row only. Before that row the merge is enough. After
    it, a local run writes the merged config at once (queued rows first, so none replaces it
    with an older config); a remote run sends it with its next logged row."""
    from trackio import utils
    from trackio.sqlite_storage import SQLiteStorage

    with run._client_lock:
        run.config.update(update)
        if not run._config_logged:
            return
        if not local:
            run._config_logged = False
            return
        run._flush_queues_inline()
        config = json.dumps(utils.serialize_values(utils.to_json_safe(run.config)))
        db = SQLiteStorage.init_db(run.project)
        with SQLiteStorage._get_process_lock(run.project), \
                SQLiteStorage._get_connection(db) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO configs (run_id, run_name, config, created_at) "
                "VALUES (?, ?, ?, ?)",
                (run.id, run.name, config, datetime.now(timezone.utc).isoformat()),
            )


def alert_error(run: Any, title: str, text: str) -> None:
    """Record an alert of level ERROR on ``run`` (Trackio's public ``Run.alert``, what
    ``trackio.alert`` does on the current run): stored in the project database's ``alerts``
    table with the next flush, shown on the dashboard, printed as ``[TRACKIO ERROR] ...``, and
    POSTed to ``TRACKIO_WEBHOOK_URL`` when that is set (from a daemon thread of Trackio's)."""
    import trackio

    run.alert(title=title, text=text, level=trackio.AlertLevel.ERROR)


def log_renaming(log: Any, row: dict[str, float], step: int) -> None:
    """``log(row, step=step)`` without Trackio's "Reserved keys renamed" warning (matched by its
    text: it has no category of its own). The rename is this plugin's documented convention,
    reversed by ``read_rows``, not a problem of the caller's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Reserved keys renamed")
        log(row, step=step)


def trackio_home() -> Path:
    """The folder Trackio writes to right now (``trackio.utils.TRACKIO_DIR``)."""
    from trackio import utils
    return utils.TRACKIO_DIR


def user_run() -> Any:
    """The script's own unfinished Trackio run (``trackio.init``), if this context has one."""
    from trackio import context_vars

    run = context_vars.current_run.get()
    stop = getattr(run, "_stop_flag", None)
    if run is None or (stop is not None and stop.is_set()):
        return None
    return run


def point_trackio_at(new: Path) -> None:
    """Replace, in every loaded ``trackio`` module, each global path that is Trackio's folder or
    lies inside it (``TRACKIO_DIR``, ``MEDIA_DIR``, ``ARTIFACTS_DIR``, ...) by its twin under
    ``new``. Trackio reads ``TRACKIO_DIR`` once, at import, and several modules copy it (and
    paths derived from it) into their own globals; modules imported later copy the new values
    from ``trackio.utils``."""
    old = trackio_home()
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "trackio" or module_name.startswith("trackio.")):
            continue
        namespace = vars(module)
        for attr, value in list(namespace.items()):
            if isinstance(value, Path) and (value == old or old in value.parents):
                namespace[attr] = new / value.relative_to(old)


# Trackio's modules: the rest of the plugin reaches Trackio through these, never by importing it.

def sqlite_storage() -> Any:
    """``trackio.sqlite_storage.SQLiteStorage`` (project names and database files, run records)."""
    from trackio.sqlite_storage import SQLiteStorage

    return SQLiteStorage


def utils() -> ModuleType:
    """``trackio.utils`` (the JSON value encoding, ``deserialize_values``)."""
    from trackio import utils as module

    return module


def media_types() -> tuple[Any, Any, Any]:
    """``(trackio.Image, trackio.Histogram, trackio.Markdown)``."""
    import trackio

    return trackio.Image, trackio.Histogram, trackio.Markdown


def system_metrics_available() -> tuple[bool, bool]:
    """Whether Trackio would log GPU metrics (NVIDIA or Apple) and CPU metrics on this machine,
    as ``trackio.init`` decides when ``auto_log_gpu``/``auto_log_cpu`` are ``None``."""
    from trackio.apple_gpu import apple_gpu_available
    from trackio.cpu import cpu_available
    from trackio.gpu import gpu_available

    return bool(gpu_available() or apple_gpu_available()), bool(cpu_available())
