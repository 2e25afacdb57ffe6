"""``WandbMonitor``: the hooks that log a run to wandb, every point at the caller's step."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from core_monitor import Capabilities, ConfigError, Event, RunInfo, TrackerLost, hookimpl
from core_monitor.events import rows_by_step
from core_monitor.media import MEDIA_KINDS
from core_monitor.options import NonBlank
from core_monitor.resume import NoRunToResume
from core_monitor.run import training_pid

from . import _compat, media, reader, service
from .storage import DEFAULT_STEP_METRIC, ESCAPE, ESCAPED_FIRST, escaped

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend

_STEP_METRIC = re.compile(r"[A-Za-z][A-Za-z0-9_\-/]*")


class WandbMonitor:
    """Log a run's scalars to one wandb run, each point at the caller's step.

    Constructed by the core as ``WandbMonitor(run, **options)``; users select it as
    ``Monitor(["wandb"], ..., wandb={"mode": "offline", "entity": "team"})``. One wandb run per
    ``Monitor``, started with ``wandb.init(reinit="create_new")``: it never becomes
    ``wandb.run``, is hidden from wandb's active-run list (a user's own ``wandb.init()`` starts
    their own run instead of returning this one) and is written through its own ``Run``
    methods, never the global ``wandb.log``. wandb is imported here, in the constructor, never
    when ``wandb_monitor`` is imported.

    Storage: one history row per step row of a batch (``core_monitor.events.rows_by_step``:
    all tags of one ``log`` call at one step), logged without ``step=`` so wandb keeps every
    row; the row holds ``step_metric`` = the caller's step (an exact integer) and
    ``_timestamp`` = the ``log`` call's wall time (``Event.wall_time``, the convention of
    wandb's own TensorBoard import). Values are float64; NaN and +-inf are kept. A tag that
    starts with ``_`` (wandb's reserved prefix) or ``ESCAPE``, or equals ``step_metric``, is
    stored with the ``ESCAPE`` prefix (``_x`` -> ``~_x``); so are such config keys.
    ``run.config`` goes in as the run's config (``Monitor.log_config`` merges more keys into
    it), ``run.project``/``run.name`` as project and display name (``<name>-rank<r>`` on a
    rank ``r > 0``).

    Resume (``run.resume``): with ``"allow"`` or ``"must"`` the run continues the latest run of
    that project and name found under ``log_dir`` (``reader.run_folders``): ``wandb.init(id=
    <its id>, resume="allow")``. Offline, that is a new ``offline-run-*`` folder with the same
    run id; ``wandb sync <log_dir>/wandb/offline-run-*`` uploads the folders in start order into
    one run. ``last_step``: the largest step the run held. A step logged again is a second
    history row with that ``global_step`` (charts over ``global_step`` draw both points; wandb's
    own ``_step`` keeps counting: offline, where wandb has no server to learn it from, the new
    folder's first row is logged with ``step=`` the earlier folders' largest ``_step`` + 1,
    ``reader.next_wandb_step``). ``"must"`` with no such folder raises ``NoRunToResume``
    before any folder is created (an online run not found locally is not searched for on the
    server).

    wandb's service dying under the run (``wandb-core`` exits at once on SIGTERM, which a
    scheduler's preemption sends every process of a job, with the rows it held in memory): a
    hook raises ``core_monitor.TrackerLost``. In a writer process (the default dispatch) the
    writer starts the backend again at its cursor (its last ``monitor_flush``), in place, also
    while the monitor closes: the new instance continues the run in a new service
    (``resume="allow"``; offline, a new folder of the same run id) and is handed every call
    past the cursor that the run's files lack (``core_monitor.stored``). In a worker thread or
    in-line, the backend fails and ``monitors sync`` delivers the rest.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        mode: ``"online"``, ``"offline"`` or ``"disabled"``; ``None`` (default) follows wandb's
            own settings (``WANDB_MODE``, ``wandb offline``, else online).
        entity: wandb entity (user or team); ``None`` for wandb's default.
        group: run group (e.g. one per distributed job or sweep); ``None``: the job's
            (``RunInfo.group``) when every rank writes its own run, else none.
        job_type: run job type, e.g. ``"train"``; ``None`` for none.
        tags: run tags, a sequence of non-blank ``str`` (``NonBlank``).
        notes: run description.
        step_metric: name of the metric holding the caller's step: a letter, then letters,
            digits, ``_``, ``-`` or ``/`` (no ``.``, which wandb reads as nesting).
        settings: extra ``wandb.Settings`` fields, e.g. ``{"console": "off",
            "x_disable_stats": True}``; ``None`` keeps wandb's defaults and environment.
            wandb's system charts of "the process" (CPU, memory, threads) describe the
            training process in every dispatch mode: in a writer process the backend sets
            ``x_stats_pid`` to the training process (``core_monitor.run.training_pid()``)
            unless ``settings`` names it; ``{"x_disable_stats": True}`` turns them off. With
            ``Monitor(system_metrics=...)`` they are off (``x_disable_stats``) unless
            ``settings`` names ``x_disable_stats`` or ``x_stats_pid``: the core's samples of
            the whole job are the run's ``system/`` charts.
        quiet: ``True`` (default) starts the run with ``wandb.Settings(silent=True)``, so
            wandb's banner and its run summary (about 20 lines) stay off the terminal; its
            warnings and errors still show. ``False`` prints them, as ``wandb.init()`` does. A
            ``silent`` or ``quiet`` field in ``settings`` wins.

    Raises:
        ConfigError: ``settings`` holds an unknown or invalid ``wandb.Settings`` field (values
            are not echoed); the other options' types and values are checked before, at
            ``Monitor()`` (``check_options``).
        wandb.Error: ``wandb.init`` failed (e.g. online without credentials).
        BackendLoadError: the installed wandb changed shape (see ``check_sdk``).
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="wandb",
        # wandb has no public flush and writes the ``.wandb`` file in 32 KiB blocks: rows are
        # complete on disk only once ``monitor_close`` returns.
        rows_readable_after="close",
        value_dtype="float64",  # history values are JSON numbers
        stores_config=True,  # monitor_config merges late config into ``run.config``
        media_kinds=MEDIA_KINDS,  # images, histograms and text (see ``media``)
        supports_resume=True,  # run.resume continues the run of that project and name
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    @classmethod
    def from_deepspeed(cls, section: Mapping[str, Any]) -> dict[str, Any]:
        """DeepSpeed's ``"wandb"`` section (``deepspeed.monitor.config.WandbConfig``,
        ``enabled`` removed) in this backend's terms, for ``core_monitor.integrations.deepspeed``:
        DeepSpeed's ``team`` is the wandb ``entity``; ``project`` and ``group`` mean the same
        here. Other keys are passed on as they are."""
        options = dict(section)
        if "team" in options:
            options["entity"] = options.pop("team")
        return options

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """What the annotations cannot say (``step_metric``'s form; ``mode``'s values and
        blank tags are in the annotations), for the options given; run by the core in the
        training process at ``Monitor()``, before wandb is imported
        (``core_monitor.hookspecs.Backend.check_options``). The ``settings`` fields are checked
        by ``wandb.Settings`` itself, in the constructor.

        Raises:
            ConfigError: ``step_metric`` has a wrong form; the message names the value and an
                example of a valid one.
        """
        step_metric = options.get("step_metric", DEFAULT_STEP_METRIC)
        if not _STEP_METRIC.fullmatch(step_metric):
            raise ConfigError(
                f"wandb: option step_metric={step_metric!r} must start with a letter and hold "
                "only letters, digits, '_', '-' or '/' (wandb reserves '_' names and reads '.' "
                "as nesting), e.g. step_metric='global_step'"
            )

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(
        self,
        run: RunInfo,
        *,
        mode: Literal["online", "offline", "disabled"] | None = None,
        entity: str | None = None,
        group: str | None = None,
        job_type: str | None = None,
        tags: Sequence[NonBlank] | None = None,
        notes: str | None = None,
        step_metric: str = DEFAULT_STEP_METRIC,
        settings: Mapping[str, Any] | None = None,
        quiet: bool = True,
    ) -> None:
        init: dict[str, Any] = {
            "project": run.project,
            "name": run.ranked_name,
            "config": {escaped(key, step_metric): value for key, value in run.config.items()},
            "reinit": "create_new",
            "settings": _settings(settings, quiet, run.system_metrics is not None),
        }
        group = group if group is not None else run.group  # every rank's run: the job's
        for key, value in (("mode", mode), ("entity", entity), ("group", group),
                           ("job_type", job_type), ("notes", notes)):
            if value is not None:
                init[key] = value
        if tags is not None:
            init["tags"] = tuple(tags)
        #: Whether an earlier run was continued; the largest step it held (``None``: none).
        self.resumed, self.last_step = False, None
        first_row = 0  # wandb's _step of this session's first row (resume: after the earlier)
        if run.resume != "never":
            run_id, self.last_step = reader.earlier_run(run)
            if run_id is not None:
                self.resumed = True
                init["id"], init["resume"] = run_id, "allow"
                first_row = reader.next_wandb_step(run)
                _after_earlier_folders(run)
            elif run.resume == "must":
                raise NoRunToResume(f"wandb: no run folder of run {run.ranked_name!r} under "
                                    f"{str(run.log_dir or 'WANDB_DIR')!r}")
        if run.log_dir is not None:  # given log_dir wins over WANDB_DIR
            log_dir = Path(run.log_dir).absolute()
            log_dir.mkdir(parents=True, exist_ok=True)
            init["dir"] = str(log_dir)

        self.step_metric = step_metric
        #: The exit code ``monitor_close`` finishes the run with (``None``: a finished run;
        #: ``service.CRASH_EXIT_CODE`` once ``monitor_crash`` ran).
        self.exit_code: int | None = None
        #: The run's ``.wandb`` transaction log, or ``None`` when mode is ``"disabled"``.
        self.run_file: Path | None = None
        #: The run's folder (``offline-run-...`` or ``run-...``), or ``None`` when disabled.
        self.run_dir: Path | None = None
        self._next_row = first_row  # wandb's _step of the next row
        self._run = service.start_run(init)
        try:
            self._started(first_row)
        except BaseException:
            self.monitor_close()
            raise

    def _started(self, first_row: int) -> None:
        """Set up the run just started: hidden from wandb's active runs, the step metric
        declared, its first row committed as wandb's ``_step`` ``first_row``."""
        run = self._run
        _compat.detach(run)
        run.define_metric(self.step_metric, hidden=True)
        run.define_metric("*", step_metric=self.step_metric)
        self._log = run.log
        if first_row > run.starting_step:  # offline: wandb would restart at 0
            self._log = _counting_from(run.log, first_row)
        self._next_row = max(first_row, run.starting_step)
        if not run.disabled:
            self.run_file = Path(run.settings.sync_file)
            self.run_dir = self.run_file.parent

    def _send(self, data: dict[str, Any]) -> None:
        """``Run.log(data)``: one history row."""
        self._log(data)
        self._next_row += 1

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Log one wandb history row per step row of the batch (see the class docstring).

        Raises:
            wandb.Error: the run was finished from outside (e.g. ``wandb.teardown()``).
        """
        step_metric = self.step_metric
        rows = []
        for step, wall_time, row in rows_by_step(events):
            data = {
                (ESCAPE + tag if tag[0] in ESCAPED_FIRST or tag == step_metric else tag): value
                for tag, value in row.items()
            }
            data[step_metric] = step
            data["_timestamp"] = wall_time
            rows.append(data)
        self._write_rows(rows)

    def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        with _service_loss("monitor_write"):
            for data in rows:
                self._send(data)

    @hookimpl
    def monitor_write_media(self, items: Sequence[media.MediaItem]) -> None:
        """Images, histograms and text as wandb media, one history row per step (``media``)."""
        self._write_media(items)

    def _write_media(self, items: Sequence[media.MediaItem]) -> None:
        with _service_loss("monitor_write_media"):
            media.write_media(self._send, self.step_metric, items)

    @hookimpl
    def monitor_flush(self) -> None:
        """Make every row logged so far reach the run's ``.wandb`` file on disk, so that it
        survives the process being killed (``_compat.write_through``: wandb has no flush of
        its own). Rows are complete for the readers after ``monitor_close``.

        Raises:
            TimeoutError: wandb-core did not write them within
                ``_compat.WRITE_THROUGH_TIMEOUT`` seconds.
            core_monitor.TrackerLost: wandb's service died under the run.
        """
        if self.run_file is None:  # mode='disabled': no file
            return
        with _service_loss("monitor_flush"):
            _compat.write_through(self._run, self.run_file)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge ``config`` into the run's config (``run.config.update(...,
        allow_val_change=True)``: a key given again takes the new value), with the same key
        escaping as the config given at start."""
        update = {escaped(key, self.step_metric): value for key, value in config.items()}
        with _service_loss("monitor_config"):
            self._run.config.update(update, allow_val_change=True)

    @hookimpl
    def monitor_close(self) -> None:
        """Finish the run; return once its ``.wandb`` file holds the exit record.

        When this plugin started wandb's service process and no other wandb run is active, the
        service is shut down (``wandb.teardown()``) so no ``wandb-core`` process outlives the
        monitor.

        Raises:
            TimeoutError: the exit record did not reach the file within
                ``service.FINISH_TIMEOUT`` seconds.
            core_monitor.TrackerLost: wandb's service died under the run.
        """
        with _service_loss("monitor_close"):
            self._finish()

    def _finish(self) -> None:
        if self.exit_code is None:
            service.finish_run(self._run, self.run_file)
        else:
            service.finish_run(self._run, self.run_file, exit_code=self.exit_code,
                               timeout=service.CRASH_FINISH_TIMEOUT)

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """The training process died: ``monitor_close`` (called next) finishes the run with
        ``Run.finish(exit_code=service.CRASH_EXIT_CODE)``, which wandb shows as a failed run
        (``reader.read_exit_code`` reads the code back), waiting at most
        ``service.CRASH_FINISH_TIMEOUT`` seconds for the exit record. ``reason`` is not stored:
        wandb's exit record has no text.
        """
        self.exit_code = service.CRASH_EXIT_CODE


@contextlib.contextmanager
def _service_loss(hook: str) -> Iterator[None]:
    """A ``ConnectionError`` because wandb's service died (``_compat.service_lost()``) becomes
    ``TrackerLost``, once the dead service is forgotten (``service.forget_lost``): the rows it
    held in memory are gone, and the writer starts the backend again from its cursor, on a
    new service. Any other ``ConnectionError`` passes unchanged."""
    try:
        yield
    except ConnectionError as error:
        if not _compat.service_lost():
            raise
        service.forget_lost()
        raise TrackerLost(f"wandb's service (wandb-core) ended under the run during {hook}, "
                          "with the rows it had not written") from error


def _after_earlier_folders(run: RunInfo) -> None:
    """Wait until the clock's second is past the start second of the run's latest folder:
    offline, wandb names a run's folder by its start second and run id, so a run continued
    within the second it started (a writer started again at once) would reuse its folder."""
    folders = reader.run_folders(run)
    stamp = re.search(r"\d{8}_\d{6}", folders[-1].name) if folders else None
    deadline = time.monotonic() + 2.0
    while stamp and datetime.now().strftime("%Y%m%d_%H%M%S") <= stamp.group() and (
            time.monotonic() < deadline):
        time.sleep(0.05)


def _counting_from(log: Any, first_row: int) -> Any:
    """``run.log`` whose first call commits its row as wandb's ``_step`` ``first_row``
    (``run.log(data, step=first_row, commit=True)``, wandb's public API: its counter goes on
    from there), and every later call is ``log`` itself."""
    pending = [first_row]

    def log_row(data: dict[str, Any]) -> None:
        if pending:
            log(data, step=pending.pop(), commit=True)
        else:
            log(data)

    return log_row


def _settings(settings: Mapping[str, Any] | None, quiet: bool, core_samples: bool) -> Any:
    fields = dict(settings or {})
    if quiet and "silent" not in fields and "quiet" not in fields:
        fields["silent"] = True
    if core_samples and "x_disable_stats" not in fields and _compat.STATS_PID not in fields:
        fields["x_disable_stats"] = True  # Monitor(system_metrics=...) samples the job
    elif training_pid() != os.getpid() and _compat.STATS_PID not in fields:
        fields[_compat.STATS_PID] = training_pid()  # a writer process: sample the trainer
    if not fields:
        return None
    import wandb

    try:
        return wandb.Settings(**fields)
    except Exception as error:
        # Field names and pydantic's messages only: a value may be a credential.
        errors = getattr(error, "errors", None)  # pydantic's ValidationError.errors()
        problems = errors() if callable(errors) else None
        detail = type(error).__name__ if problems is None else "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in problems)
        raise ConfigError(
            f"wandb: option settings has invalid wandb.Settings fields ({detail}); see "
            "https://docs.wandb.ai/models/ref/python/settings"
        ) from None


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = WandbMonitor
