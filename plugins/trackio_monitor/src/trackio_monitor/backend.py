"""``TrackioMonitor``: the hooks that write a run into Trackio's local SQLite database."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step
from core_monitor.media import MEDIA_KINDS
from core_monitor.options import NonBlank
from core_monitor.output import hidden
from core_monitor.resume import NoRunToResume
from core_monitor.sdk import sdk_error

from . import _compat, folder, media
from . import options as _options
from ._compat import RESERVED_TAGS
from .reader import count_rows, earlier_run
from .start import start_local
from .storage import CRASH_ALERT_TITLE, RENAME_PREFIX, trackio_config

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend


class TrackioMonitor:
    """Core-monitor backend writing to Trackio (``trackio.Run``), local and offline by default.

    Built by the core as ``TrackioMonitor(run, **options)``; users select it as ``"trackio"``
    and pass options as ``Monitor([...], trackio={...})``. Trackio is imported here, in the
    constructor, never when ``trackio_monitor`` is imported.

    Args:
        run: the run (project, name, sanitised config, ``log_dir``, rank). ``project`` is
            Trackio's project; the run name is ``run.name`` (``<name>-rank<rank>`` on ranks above
            0, which write only with ``Monitor(..., rank_zero_only=False)``).
        group: Trackio run group (dashboard grouping), or ``None``: the job's
            (``RunInfo.group``) when every rank writes its own run, else none.
        resume: Trackio's ``resume``: ``"never"`` starts a new run even when one of
            that name exists; ``"allow"`` continues the latest run of that name if any;
            ``"must"`` continues it and raises ``NoRunToResume`` (a ``ConfigError``) if there
            is none, before any file or folder is created. ``None`` (default): the
            ``Monitor``'s ``resume`` (``run.resume``). A resumed run's new rows go after the
            old ones; a step logged again is a second row at that step (the dashboard's line
            plot draws both points; ``read_rows`` returns both). ``last_step``: the largest
            step the run held (``None``: a new run).
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
        OSError: the Trackio folder under ``log_dir`` cannot be created or written (e.g.
            ``log_dir`` is a regular file); the message names the path.
        BackendLoadError: the installed Trackio lacks an internal the plugin uses (see
            ``check_sdk``).
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="trackio",
        rows_readable_after="flush",  # monitor_flush writes Trackio's queue to SQLite
        value_dtype="float64",  # values are JSON numbers, stored exactly
        stores_config=True,  # monitor_config merges late config into the run's config
        media_kinds=MEDIA_KINDS,  # each kind as Trackio's own media type (see ``media``)
        supports_resume=True,  # run.resume (or the resume option) continues the named run
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """What the annotations cannot say (``server_url``'s scheme; blank names are refused
        by their ``NonBlank`` annotation); run by the core before Trackio is imported (see
        ``options.check_options``)."""
        _options.check_options(options)

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(
        self,
        run: RunInfo,
        *,
        group: NonBlank | None = None,
        resume: Literal["never", "allow", "must"] | None = None,
        space_id: NonBlank | None = None,
        server_url: NonBlank | None = None,
        private: bool | None = None,
        auto_log_gpu: bool | None = False,
        auto_log_cpu: bool | None = False,
        quiet: bool = True,
    ) -> None:
        mode: str = run.resume if resume is None else resume
        try:
            _compat.sqlite_storage().validate_project_name(run.project)
        except ValueError as error:
            raise ConfigError(f"trackio: {error}") from None

        self._quiet = quiet
        group = group if group is not None else run.group  # every rank's run: the job's
        self._remote = space_id is not None or server_url is not None
        name = run.ranked_name
        config = trackio_config(run.config)
        self._dir = folder.acquire(
            None if run.log_dir is None
            else Path(run.log_dir).expanduser().resolve() / folder.SUBDIR
        )
        try:
            #: The run id and largest step of the run ``resume`` continues, if any.
            earlier, self.last_step = None, None
            if mode != "never" and not self._remote:
                db = self._dir / _compat.sqlite_storage().get_project_db_filename(run.project)
                earlier, self.last_step = earlier_run(db, name)
                if earlier is None and mode == "must":
                    raise NoRunToResume(f"trackio: no run named {name!r} in {str(db)!r}")
            if not self._remote:  # Trackio itself would accept every row and store none
                folder.check_writable(self._dir, run.log_dir)
            with hidden(quiet, stdout=True):  # Trackio print()s, with no switch
                if self._remote:
                    self._run: Any = _compat.init_remote(
                        project=run.project, name=name, group=group, space_id=space_id,
                        server_url=server_url, config=config, resume=mode, private=private,
                        embed=False, auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
                    )
                else:
                    self._run = start_local(
                        run.project, name, config, group=group, resume=mode,
                        auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
                    )
            #: Whether an earlier run was continued (``last_step``: its largest step).
            self.resumed = earlier is not None and self._run.id == earlier
            if not self.resumed:
                self.last_step = None
            problems = _compat.run_problems(self._run)
            if problems:
                raise sdk_error(TrackioMonitor, problems)
            self._db = self._dir / _compat.sqlite_storage().get_project_db_filename(run.project)
            #: Rows of this run already in the database (a resumed run) + rows sent since.
            self._expected = 0 if self._remote else count_rows(self._db, self._run.id)
            self._missing = 0  # rows found missing so far (each loss is reported once)
        except BaseException:
            folder.release(self._dir)
            raise
        if not quiet and not self._remote:
            env = "" if folder.is_home(self._dir) else f"TRACKIO_DIR={self._dir} "
            print(f"* Trackio project {run.project!r}, run {self._run.name!r}: metrics logged "
                  f"to {self._dir}")
            print(f'* View the dashboard: {env}trackio show --project "{run.project}"')
        self._log = self._run.log
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
            self._expected += 1

    def _log_new_tags(self, row: dict[str, float], step: int) -> None:
        reserved = [t for t in row if t in RESERVED_TAGS or t.startswith(RENAME_PREFIX)]
        self._plain_tags.update(t for t in row if t not in reserved)
        if reserved:
            _compat.log_renaming(self._log, row, step)
        else:
            self._log(row, step=step)

    @hookimpl
    def monitor_write_media(self, items: Sequence[media.MediaItem]) -> None:
        """Trackio's ``Image``/``Histogram``/``Markdown``, one ``Run.log`` per step."""
        media.write_media(self._run, items)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge ``config`` into the run's Trackio config (the dashboard's run config).

        Local runs store it at once (or with the first row when nothing was logged yet); with
        ``space_id``/``server_url`` it reaches the server with the next logged row.
        """
        if self._run is None:
            raise RuntimeError("trackio: monitor_config after monitor_close")
        _compat.store_config(self._run, trackio_config(config), local=not self._remote)

    @hookimpl
    def monitor_flush(self) -> None:
        """Write Trackio's queued rows to its SQLite database now (local runs).

        With ``space_id``/``server_url`` Trackio's own thread sends the rows (every 0.5 s);
        flushing does not force a send.

        Raises:
            OSError: rows sent to Trackio are not in its database: Trackio's writer (this flush
                or its own thread) failed to store them and only warned (e.g. the database
                was removed or the disk is full). Each loss is raised once.
        """
        if self._run is not None and not self._remote:
            _compat.flush_now(self._run)
            self._check_landed(self._run.id)

    def _check_landed(self, run_id: str) -> None:
        """Raise ``OSError`` when fewer rows of this run are stored than were sent."""
        try:
            stored = count_rows(self._db, run_id)
        except sqlite3.Error as error:
            raise OSError(f"trackio: cannot read back the run's rows from {self._db}: {error}; "
                          "the rows sent may be lost") from error
        missing = self._expected - stored
        if missing > self._missing:
            lost, self._missing = missing - self._missing, missing
            raise OSError(
                f"trackio: {lost} row(s) sent to Trackio are not in {self._db} ({stored} of "
                f"{self._expected} stored): Trackio's writer failed to store them and only "
                "warned; check that the folder is writable and the disk not full"
            )

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """The training process died: record a Trackio alert of level ERROR on the run, title
        ``storage.CRASH_ALERT_TITLE`` (``"training process died"``), text ``reason``, at the
        last step logged. Trackio has no run status; the alert shows on the run's dashboard
        page and reads back with ``reader.read_alerts``. ``monitor_close`` (called next)
        stores it. With ``TRACKIO_WEBHOOK_URL`` set, Trackio also POSTs it there (from its own
        daemon thread, which the writer process's exit may cut short)."""
        if self._run is not None:
            with hidden(self._quiet, stdout=True):
                _compat.alert_error(self._run, CRASH_ALERT_TITLE, reason)

    @hookimpl
    def monitor_close(self) -> None:
        """Flush, finish the Trackio run (its sender thread ends). A second call does nothing."""
        run, self._run = self._run, None
        if run is None:
            return
        try:
            if not self._remote:
                _compat.flush_now(run)
            with hidden(self._quiet, stdout=True):
                run.finish()
            if not self._remote:
                self._check_landed(run.id)
        finally:
            folder.release(self._dir)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = TrackioMonitor
