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
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import os
import sqlite3
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import trackio
from trackio import context_vars, utils
from trackio.apple_gpu import apple_gpu_available
from trackio.cpu import cpu_available
from trackio.gpu import gpu_available
from trackio.run import Run
from trackio.sqlite_storage import SQLiteStorage

from core_monitor import ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step

__all__ = [
    "RENAME_PREFIX",
    "RESERVED_TAGS",
    "TrackioMonitor",
    "original_tag",
    "read_config",
    "read_rows",
    "trackio_dir",
]

#: Tags Trackio keeps for itself (``trackio.utils.RESERVED_KEYS``). Trackio stores each of them,
#: and every tag starting with ``RENAME_PREFIX``, as ``RENAME_PREFIX + tag``.
RESERVED_TAGS: tuple[str, ...] = tuple(utils.RESERVED_KEYS)
#: What Trackio puts in front of a reserved tag. Renaming is one-to-one (``"__x"`` becomes
#: ``"____x"``), so every stored key starting with it is a renamed tag.
RENAME_PREFIX = "__"

#: Folder under ``RunInfo.log_dir`` that becomes Trackio's folder (its ``TRACKIO_DIR``).
SUBDIR = "trackio"

_RESUME = ("never", "allow", "must")


def trackio_dir(log_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the folder Trackio writes to for a given ``log_dir``, as an absolute path.

    ``<log_dir>/trackio`` when ``log_dir`` is given; otherwise Trackio's own folder:
    ``TRACKIO_DIR`` as Trackio read it when first imported, else
    ``$HF_HOME/trackio`` (``~/.cache/huggingface/trackio``). The project's database is
    ``trackio_dir(log_dir) / "<project>.db"`` (Trackio keeps only ``[A-Za-z0-9_-]`` of the
    project name for the file name).
    """
    if log_dir is not None:
        return Path(log_dir).expanduser().resolve() / SUBDIR
    with _lock:
        return (_home if _home is not None else utils.TRACKIO_DIR).resolve()


def read_rows(
    project: str, name: str, log_dir: str | os.PathLike[str] | None = None
) -> list[tuple[str, int, float]]:
    """Read a run's scalars back from Trackio's database, in storage order.

    Reads ``trackio_dir(log_dir) / "<project>.db"`` with SQL (Trackio's own table ``metrics``
    and its JSON value encoding, decoded with ``trackio.utils.deserialize_values``), so it works
    while the run is open and whatever folder Trackio currently points at. When several runs of
    the project share ``name`` (``resume="never"``, Trackio's default, starts a new run each
    time), the most recently started one is read, as Trackio's dashboard does.

    Args:
        project: the project name given to ``Monitor``.
        name: the run name (``Monitor.run.name``).
        log_dir: the ``log_dir`` given to ``Monitor``, or ``None`` for Trackio's own folder.

    Returns:
        ``[(tag, step, value), ...]``: one entry per scalar, rows in the order Trackio stored
        them, tags within a row in the order they were logged. Trackio's tag renames are
        reversed (``"__step"`` is ``"step"`` again); NaN and +/-inf come back as floats.
        Non-numeric values written by other Trackio code (media, tables) are skipped.
    """
    db = trackio_dir(log_dir) / SQLiteStorage.get_project_db_filename(project)
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = _latest_run_id(conn, name)
        if run_id is None:
            return []
        stored = conn.execute(
            "SELECT step, metrics FROM metrics WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
    rows: list[tuple[str, int, float]] = []
    for step, blob in stored:
        if isinstance(step, bytes):  # a numpy integer step, stored by SQLite as a BLOB
            step = int.from_bytes(step, sys.byteorder, signed=True)
        for key, value in utils.deserialize_values(json.loads(blob)).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append((original_tag(key), step, float(value)))
    return rows


def read_config(
    project: str, name: str, log_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any] | None:
    """Return the config Trackio stored for the run, or ``None`` if it stored none yet.

    Trackio writes the config together with the run's first row, and adds its own keys
    ``_Username`` (always ``None`` here: the plugin never asks the Hub), ``_Created`` (UTC,
    ISO 8601) and ``_Group``. Arguments as for ``read_rows``.
    """
    db = trackio_dir(log_dir) / SQLiteStorage.get_project_db_filename(project)
    if not db.exists():
        return None
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = _latest_run_id(conn, name)
        row = conn.execute(
            "SELECT config FROM configs WHERE run_id = ? OR (? IS NULL AND run_name = ?) "
            "ORDER BY id DESC LIMIT 1",
            (run_id, run_id, name),
        ).fetchone()
    return None if row is None else utils.deserialize_values(json.loads(row[0]))


def original_tag(key: str) -> str:
    """Undo Trackio's rename of a tag: ``"__step"`` -> ``"step"``, ``"____x"`` -> ``"__x"``."""
    return key[len(RENAME_PREFIX):] if key.startswith(RENAME_PREFIX) else key


def _latest_run_id(conn: sqlite3.Connection, name: str) -> str | None:
    try:
        row = conn.execute(
            "SELECT run_id FROM metrics WHERE run_name = ? GROUP BY run_id "
            "ORDER BY MIN(id) DESC LIMIT 1",
            (name,),
        ).fetchone()
    except sqlite3.OperationalError:  # no metrics table: nothing was ever logged
        return None
    return None if row is None else row[0]


class _LocalRun(Run):
    """Trackio's ``Run``, minus the Hub look-up of the user name.

    ``Run.__init__`` calls ``huggingface_hub.whoami`` (a network request) whenever a Hugging Face
    token is configured, only to store ``_Username`` in the config. A local run needs no account.
    """

    def _get_username(self) -> str | None:
        return None


class TrackioMonitor:
    """Core-monitor backend writing to Trackio (``trackio.Run``), local and offline by default.

    Built by the core as ``TrackioMonitor(run, **options)``; users select it as ``"trackio"``
    and pass options as ``Monitor([...], trackio={...})``.

    Args:
        run: the run (project, name, sanitised config, ``log_dir``, rank). ``project`` is
            Trackio's project; the run name is ``run.name`` (``<name>-rank<rank>`` on ranks above
            0, which write only with ``Monitor(..., rank_zero_only=False)``).
        group: Trackio run group (dashboard grouping), or ``None``.
        resume: Trackio's ``resume``: ``"never"`` (default) starts a new run even when one of
            that name exists; ``"allow"`` continues the latest run of that name if any;
            ``"must"`` continues it and raises ``ConfigError`` if there is none.
        space_id: log to this Hugging Face Space (``"user/space"``) through ``trackio.init``
            instead of locally. Reaches the network; needs a Hub token.
        server_url: log to a self-hosted Trackio server (``http(s)://...``, with its
            ``write_token``) through ``trackio.init``. Reaches the network.
        private: make a newly created Space private (only with ``space_id``).
        auto_log_gpu: Trackio's GPU system metrics (every 10 s, in its ``system_metrics``
            table). ``False`` by default; ``None`` lets Trackio decide (on when a GPU is found).
        auto_log_cpu: Trackio's CPU/RAM system metrics, as ``auto_log_gpu`` (needs ``psutil``).
        quiet: ``True`` (default) keeps Trackio's start and finish lines off stdout, so a training
            log stays clean; ``False`` prints where the data goes and how to open the dashboard.

    Raises:
        ConfigError: an option value is invalid (the message names option, value and fix), the
            project name is one Trackio refuses, ``resume="must"`` finds no run, or another
            Trackio run of this process writes to a different folder (Trackio has one folder per
            process).
    """

    #: Backend name when the class is passed to ``Monitor`` directly.
    name = "trackio"
    #: ``monitor_flush`` writes Trackio's queue to SQLite, so rows are readable after a flush.
    rows_readable_after = "flush"
    #: Trackio stores values as JSON numbers: float64, exactly.
    value_dtype = "float64"
    #: Tags Trackio renames to ``"__" + tag`` (plus any tag starting with ``"__"``).
    renamed_tags = RESERVED_TAGS

    def __init__(
        self,
        run: RunInfo,
        *,
        group: str | None = None,
        resume: str = "never",
        space_id: str | None = None,
        server_url: str | None = None,
        private: bool | None = None,
        auto_log_gpu: bool | None = False,
        auto_log_cpu: bool | None = False,
        quiet: bool = True,
    ) -> None:
        _check_str("group", group, "a group name such as 'sweep-1'")
        if resume not in _RESUME:
            raise ConfigError(
                f"trackio: resume={resume!r} is not one of {', '.join(map(repr, _RESUME))}; "
                "use resume='allow' to continue a run of the same name if it exists"
            )
        _check_str("space_id", space_id, "a Space id such as 'user/my-space'")
        _check_str("server_url", server_url, "a URL such as 'https://host:7860/?write_token=...'")
        if server_url is not None and not server_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"trackio: server_url={server_url!r} must start with http:// or https://"
            )
        for option, value in (("private", private), ("auto_log_gpu", auto_log_gpu),
                              ("auto_log_cpu", auto_log_cpu)):
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"trackio: {option}={value!r} must be True, False or None")
        if not isinstance(quiet, bool):
            raise ConfigError(f"trackio: quiet={quiet!r} must be True or False")
        try:
            SQLiteStorage.validate_project_name(run.project)
        except ValueError as error:
            raise ConfigError(f"trackio: {error}") from None

        self._quiet = quiet
        self._remote = space_id is not None or server_url is not None
        name = run.name if run.rank == 0 else f"{run.name}-rank{run.rank}"
        config = _trackio_config(run.config)
        self._dir = _acquire_dir(
            None if run.log_dir is None else Path(run.log_dir).expanduser().resolve() / SUBDIR
        )
        try:
            with _stdout_hidden(quiet):
                if self._remote:
                    self._run: Run | None = _init_remote(
                        project=run.project, name=name, group=group, space_id=space_id,
                        server_url=server_url, config=config, resume=resume, private=private,
                        embed=False, auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
                    )
                else:
                    self._run = _start_local(
                        run.project, name, config, group=group, resume=resume,
                        auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
                    )
        except BaseException:
            _release_dir(self._dir)
            raise
        if not quiet and not self._remote:
            _print_start(run.project, self._run, self._dir)
        self._log = self._run.log
        # Trackio's sender thread runs `with run._client_lock: run._flush_queues_inline()`
        # every 0.5 s; flushing is doing the same now. Private API, so checked once here.
        self._flush_inline = getattr(self._run, "_flush_queues_inline", None)
        self._flush_lock = getattr(self._run, "_client_lock", None)
        if not self._remote and (self._flush_inline is None or self._flush_lock is None):
            warnings.warn(
                f"trackio {trackio.__version__} has no Run._flush_queues_inline/_client_lock: "
                "Monitor.flush() cannot force a write; rows reach the database within Trackio's "
                "0.5 s batching interval and at close()",
                RuntimeWarning,
                stacklevel=2,
            )
        self._plain_tags: set[str] = set()

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """One ``Run.log(row, step=step)`` per step of the batch, the step exactly as given."""
        log = self._log
        if self._run is None:
            raise RuntimeError("trackio: monitor_write after monitor_close")
        plain = self._plain_tags
        for step, _, row in rows_by_step(events):
            if row.keys() <= plain:
                log(row, step=step)
            else:
                self._log_new_tags(row, step)

    def _log_new_tags(self, row: dict[str, float], step: int) -> None:
        reserved = [t for t in row if t in RESERVED_TAGS or t.startswith(RENAME_PREFIX)]
        self._plain_tags.update(t for t in row if t not in reserved)
        if not reserved:
            self._log(row, step=step)
            return
        # Trackio warns on every call that renames a tag; the rename is this plugin's
        # documented convention (reversed by read_rows), not a problem of the caller's.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Reserved keys renamed")
            self._log(row, step=step)

    @hookimpl
    def monitor_flush(self) -> None:
        """Write Trackio's queued rows to its SQLite database now (local runs).

        With ``space_id``/``server_url`` Trackio's own thread sends the rows (every 0.5 s);
        flushing does not force a send.
        """
        run = self._run
        if run is not None and not self._remote:
            self._flush_now()

    def _flush_now(self) -> None:
        if self._flush_inline is not None and self._flush_lock is not None:
            with self._flush_lock:
                self._flush_inline()

    @hookimpl
    def monitor_close(self) -> None:
        """Flush, finish the Trackio run (its sender thread ends). A second call does nothing."""
        run, self._run = self._run, None
        if run is None:
            return
        try:
            if not self._remote:
                self._flush_now()
            with _stdout_hidden(self._quiet):
                run.finish()
        finally:
            _release_dir(self._dir)


def _check_str(option: str, value: Any, example: str) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"trackio: {option}={value!r} must be None or {example}")


def _trackio_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``RunInfo.config`` as Trackio accepts it: Trackio refuses keys starting with ``_`` (its own
    ``_Username``, ``_Created``, ``_Group``), so such a key ``_k`` is stored as ``config._k``."""
    return {("config." + key if key.startswith("_") else key): value
            for key, value in config.items()}


def _start_local(
    project: str, name: str, config: dict[str, Any], *, group: str | None, resume: str,
    auto_log_gpu: bool | None, auto_log_cpu: bool | None,
) -> Run:
    """Start a local run the way ``trackio.init`` does, without touching Trackio's globals."""
    run_id = None
    if resume != "never":
        record = SQLiteStorage.get_latest_run_record_by_name(project, name)
        if record is None and resume == "must":
            raise ConfigError(
                f"trackio: resume='must' but project {project!r} has no run named {name!r} in "
                f"{utils.TRACKIO_DIR}; use resume='allow' to start it when missing"
            )
        run_id = None if record is None else record["id"]
    if auto_log_gpu is None:
        auto_log_gpu = gpu_available() or apple_gpu_available()
    if auto_log_cpu is None:
        auto_log_cpu = cpu_available()
    return _LocalRun(
        url=None, project=project, client=None, name=name, run_id=run_id, group=group,
        config=config, existing_runs=[], auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
    )


def _init_remote(**init_kwargs: Any) -> Run:
    """``trackio.init(**init_kwargs)``, leaving Trackio's process-wide state as it was.

    ``trackio.init`` finishes the current run (a script's own), makes the new run current and
    sets ``trackio.config``: all of that is undone, so ``trackio.log`` keeps going to the
    script's own run.
    """
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


def _print_start(project: str, run: Run, folder: Path) -> None:
    env = "" if folder == (_home or utils.TRACKIO_DIR).resolve() else f"TRACKIO_DIR={folder} "
    print(f"* Trackio project {project!r}, run {run.name!r}: metrics logged to {folder}")
    print(f'* View the dashboard: {env}trackio show --project "{project}"')


@contextlib.contextmanager
def _stdout_hidden(hide: bool) -> Iterator[None]:
    """Hide Trackio's ``print`` lines (it has no verbosity switch). ``sys.stdout`` is swapped
    process-wide for the duration, so other threads' prints in that window are hidden too."""
    if not hide:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


# Trackio's folder ---------------------------------------------------------------------------
# Trackio reads TRACKIO_DIR once, when imported, and several modules copy the value (and values
# derived from it: MEDIA_DIR, ARTIFACTS_DIR) into their own globals. There is one folder per
# process, so the plugin points all those copies at the run's folder while it is open, refuses
# a second folder while anything writes to the first, and points them back when done.

_lock = threading.Lock()
#: Trackio's own folder while the plugin points Trackio elsewhere, else None.
_home: Path | None = None
#: Resolved folder -> number of open TrackioMonitor runs writing there.
_in_use: Counter[Path] = Counter()


def _acquire_dir(wanted: Path | None) -> Path:
    """Point Trackio at ``wanted`` (``None``: Trackio's own folder); return the resolved folder.

    Raises:
        ConfigError: an open ``TrackioMonitor`` or the script's own unfinished Trackio run
            writes to another folder.
    """
    global _home
    with _lock:
        current = utils.TRACKIO_DIR
        home = _home if _home is not None else current
        target = wanted if wanted is not None else home.resolve()
        busy = {folder: "an open Monitor with the 'trackio' backend" for folder in _in_use}
        user_run = _user_run()
        if user_run is not None:
            busy.setdefault(
                current.resolve(), f"the Trackio run {user_run.name!r} started by trackio.init()"
            )
        for folder, user in busy.items():
            if folder != target:
                raise ConfigError(
                    f"trackio: cannot write to {target}: {user} is writing to {folder}, and "
                    "Trackio keeps one folder per process (it reads TRACKIO_DIR once, at "
                    "import). Close or finish that run first, or give this Monitor the same "
                    f"log_dir (log_dir=None means Trackio's own folder, {home})."
                )
        if current.resolve() != target:
            back_home = target == home.resolve()
            _point_trackio_at(home if back_home else target)
            _home = None if back_home else home
        _in_use[target] += 1
        return target


def _release_dir(folder: Path) -> None:
    """Undo one ``_acquire_dir``; the last one points Trackio back at its own folder, unless the
    script started a Trackio run of its own meanwhile (it keeps writing where it started)."""
    global _home
    with _lock:
        _in_use[folder] -= 1
        if _in_use[folder] <= 0:
            del _in_use[folder]
        if _in_use or _home is None or _user_run() is not None:
            return
        if utils.TRACKIO_DIR.resolve() == folder:
            _point_trackio_at(_home)
        _home = None


def _user_run() -> Run | None:
    """The script's own unfinished Trackio run (``trackio.init``), if this context has one."""
    run = context_vars.current_run.get()
    stop = getattr(run, "_stop_flag", None)
    if run is None or (stop is not None and stop.is_set()):
        return None
    return run


def _point_trackio_at(new: Path) -> None:
    """Replace, in every loaded ``trackio`` module, each global path that is Trackio's folder or
    lies inside it (``TRACKIO_DIR``, ``MEDIA_DIR``, ``ARTIFACTS_DIR``, ...) by its twin under
    ``new``. Modules imported later copy the new values from ``trackio.utils``."""
    old = utils.TRACKIO_DIR
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "trackio" or module_name.startswith("trackio.")):
            continue
        namespace = vars(module)
        for attr, value in list(namespace.items()):
            if isinstance(value, Path) and (value == old or old in value.parents):
                namespace[attr] = new / value.relative_to(old)
