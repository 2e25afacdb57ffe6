"""``Monitor``: the one object training code logs through; it fans each batch out to backends.

Here: validating each call and deciding its step, starting the backends, ``flush`` and
``close``, and the process the monitor belongs to (fork handling). Finding and checking
backends is ``core_monitor.discovery``; how calls reach them (a writer process, a worker
thread or the caller's thread per backend, and the failure policy) is
``core_monitor.dispatch``; closing what is open at exit is ``core_monitor.shutdown``; the
settings rules and file reader are ``core_monitor.settings``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from . import discovery, shutdown, system
from ._stack import caller_level
from .dispatch.channel import BackendSpec
from .dispatch.modes import check_dispatch, default_dispatch, new_dispatch
from .dispatch.threads import DEFAULT_QUEUE_SIZE
from .distributed import Reducer
from .errors import BackendWarning, ConfigError
from .events import MAX_STEP, Batch, Event, check_events, check_step, metric_rows, rows_by_step
from .hyperparameters import sanitize_config
from .journal import Journal, journal_folder
from .media import MediaItem, media_taker
from .resume import check_classes, check_resume, collect, raise_missing
from .run import RunInfo, default_run_name, detect_rank
from .sdk import Plugin, check_installed
from .settings import check_backend_keys, check_keywords, check_options, load_monitor_config

#: Seconds ``before_fork`` waits for the monitor's lock (another thread may hold it while it
#: waits for room in a hung backend's buffer); the fork then goes ahead without it.
FORK_LOCK_TIMEOUT = 10.0

_Self = TypeVar("_Self", bound="Monitor")

#: Tags a monitor remembers as valid (a call of known tags skips the tag rules), at most.
KNOWN_TAGS = 4096


def check_budget(budget: Any) -> dict[str | None, int]:
    """``Monitor(budget=...)`` as ``FanOut.budgets``: backend name (``None``: every other
    one) -> bytes.

    Raises:
        ConfigError: neither ``None``, an ``int`` >= 1024 nor a mapping of names to such ints.
    """
    if budget is None:
        return {}
    items = budget.items() if isinstance(budget, Mapping) else [("*", budget)]
    out: dict[str | None, int] = {}
    for name, size in items:
        if (not isinstance(name, str) or isinstance(size, bool) or not isinstance(size, int)
                or size < 1024):
            raise ConfigError(f"budget={budget!r}: each budget is an int of bytes >= 1024 "
                              "(one for every backend, or {backend name: bytes}, '*' for the "
                              "others), e.g. budget={'mlflow': 64 << 20}")
        out[None if name == "*" else name] = size
    return out


class Monitor:
    """Log scalars once; every selected backend stores them at the caller's step.

    Args:
        backends: backend names as installed (``monitors list``, matched exactly), e.g.
            ``["trackio", "tensorboard"]``, or backend classes (a class's name is its ``name``
            attribute, else its ``__name__``); one name alone may be a ``str``; ``None``: those
            in ``EXPERIMENT_MONITORS``. Those in ``EXPERIMENT_MONITORS_DISABLE`` are skipped
            (``ConfigWarning``); with all skipped the monitor checks calls and writes nothing.
        project: project name (wandb/Trackio "project"; TensorBoard's first folder level).
        name: run name; default ``YYYYmmdd-HHMMSS-host``, the same for every backend.
        config: hyperparameters; stored flat and JSON-safe (``config.sanitize_config``).
        log_dir: folder local backends write under (``str`` or ``Path``); ``None`` lets each
            SDK use its own default. When given it wins over ``TRACKIO_DIR``/``WANDB_DIR``.
        strict: re-raise a backend's exception (after every other backend got the call)
            instead of warning once and counting it in ``failures``.
        rank_zero_only: only rank 0 constructs backends; other ranks validate what they log
            and write nothing (they start no writer, import no SDK). ``False`` writes from
            every rank.
        dispatch: where the backends' hooks run (``core_monitor.dispatch``); ``None``
            (default): the mode the environment variable ``EXPERIMENT_MONITORS_DISPATCH``
            names, else ``"process"``. ``"process"``: each backend in a writer process of its
            own; ``log()`` checks the call and hands it to the kernel (a pipe), so a crash of
            this process loses none of it and this process imports no SDK. ``"thread"``
            (alias ``"background"``): each backend on a worker thread of this process (for
            code that uses the SDK's own objects beside the monitor, e.g. ``wandb.watch``).
            ``"sync"``: on the caller's thread before ``log()`` returns.
        queue_size: (deprecated: ``budget``) calls each backend's buffer holds, 10,000 by
            default: the queue of a
            worker thread (about 10 MB at 10 scalars per call), or a writer's pipe of
            ``queue_size`` KiB (at most the system's largest pipe, 1 MiB on Linux).
        on_full: (deprecated: ``budget``) a full buffer makes ``log()`` wait (``"block"``,
            nothing lost) or drop that
            call for that backend only (``"drop"``: counted in ``dropped``, warned once).
        wait: with writer processes, ``False`` (default) returns at once, the writers
            starting behind it: calls logged meanwhile wait in their pipes (never dropped,
            whatever ``on_full``), and a start failure only the SDK sees (a refused
            ``wandb.Settings`` field, an unreachable tracking server) is reported at the next
            ``log``/``flush``/``close`` with its original type (raised with ``strict=True``,
            else a ``BackendWarning``). What needs no SDK still raises here: an unknown
            backend or option, an option of the wrong type or value (the backend's
            ``check_options``), a missing SDK distribution. ``True`` returns once every
            backend has started (imported its SDK, started its run) and raises or reports a
            start failure here. ``resume`` other than ``"never"`` always waits (the start
            tells what each backend found), and so does a ``log_dir`` that is a file.
        resume: ``"never"`` (a new run), ``"allow"`` (continue the run of this project, name
            and log_dir in every backend when it exists, else start it) or ``"must"``
            (continue it; ``NoRunToResume`` naming each backend without it, nothing logged).
            See ``core_monitor.resume``.
        system_metrics: ``False`` (default) or ``None``: off; ``True``: sample the training
            job's processes and GPUs every ``core_monitor.system.DEFAULT_INTERVAL`` (10)
            seconds; a number: every that many seconds. Logged as scalars under ``system/``
            to every backend, each SDK's own sampler then off (``RunInfo.system_metrics``);
            needs ``pip install psutil nvidia-ml-py`` (the extra ``core-monitor[system]``).
            See ``core_monitor.system``.
        journal: keep every accepted call in the run's journal on disk before ``log()``
            returns (default ``True``): each backend's cursor tells what its tracker confirmed,
            and ``monitors sync <journal folder>`` delivers the rest (``core_monitor.journal``,
            docs/operations/journal.md). ``False``: no journal.
        journal_dir: the folder holding the journals (e.g. a node-local disk); ``None``: the
            folder ``EXPERIMENT_MONITORS_JOURNAL_DIR`` names, else ``<log_dir>/.journal``, else
            (no ``log_dir``) ``$XDG_STATE_HOME/experiment-monitors/journal``. The run's
            journal is ``<journal_dir>/<project>/<name>[/rank-<k>]``.
        keep_journal: never delete a journal segment (by default one goes once every
            backend's cursor passed it).
        budget: bytes of calls a backend may hold unwritten (its buffer), one ``int`` for
            every backend or ``{name: bytes}`` (the key ``"*"``: every backend not named).
            With the journal, a backend whose budget is spent is never waited for: it is sent
            nothing more in this run (``detached``, one ``BackendWarning``), its cursor stays
            at what it confirmed, the other backends go on, and ``monitors sync`` delivers the
            rest after the run. It replaces ``queue_size``/``on_full`` (deprecated: one size
            and one policy for every backend) for the backends it names; without a journal
            those apply.
        **backend_options: one mapping per backend name, its keyword options, e.g.
            ``wandb={"mode": "offline"}``; an installed backend's are ignored when unselected.

    Attributes:
        run: the ``RunInfo`` every backend got, with ``resumed`` and ``last_step`` filled
            in after the start (``core_monitor.resume``).
        last_steps: backend name -> the largest step its run already held (``None``: new run).
        failures: backend name -> hook calls of it that raised.
        dropped: backend name -> calls dropped for it (``on_full="drop"``).
        undelivered: backend name -> calls never written: still queued when
            ``close(timeout=...)`` gave up, or sent after the backend's process died.
        media_skipped: (backend, media kind) -> media values not sent there (the backend
            lacks the kind).

    Its methods may be called from several threads; in a forked child it is inert (``log``).

    Raises:
        ConfigError: no backend selected; a keyword of the wrong type or value; a keyword
            naming no installed backend (``logdir``: "did you mean 'log_dir'?"); an option the
            backend does not accept (naming backend, option and accepted ones); ``strict=True``
            and a disabled backend selected, or an unknown name in
            ``EXPERIMENT_MONITORS_DISABLE``; ``resume`` not one of its values;
            ``system_metrics`` neither a bool nor a positive number of seconds, or psutil
            missing for it.
        core_monitor.resume.NoRunToResume: ``resume="must"`` and a backend has no such run.
        UnknownBackendError: a name that no installed distribution declares.
        BackendLoadError: a selected plugin or its SDK fails to import.
    """

    def __init__(
        self,
        backends: Sequence[str | type] | str | None = None,
        *,
        project: str,
        name: str | None = None,
        config: Any = None,
        log_dir: str | os.PathLike[str] | None = None,
        strict: bool = False,
        rank_zero_only: bool = True,
        dispatch: str | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        on_full: str = "block",
        resume: str = "never",
        wait: bool = False,
        system_metrics: bool | float | None = False,
        journal: bool = True,
        journal_dir: str | os.PathLike[str] | None = None,
        keep_journal: bool = False,
        budget: int | Mapping[str, int] | None = None,
        **backend_options: Mapping[str, Any],
    ) -> None:
        backends = check_keywords(backends, project, name, strict, rank_zero_only)
        interval = system.check_interval(system_metrics)
        if interval is not None:
            system.check_psutil()
        dispatch = default_dispatch(dispatch)
        check_dispatch(dispatch, queue_size, on_full)
        rank, world_size = detect_rank()
        self.run = RunInfo(
            project=project,
            name=name or default_run_name(),
            config=sanitize_config(config),
            log_dir=local_folder(log_dir),
            rank=rank,
            world_size=world_size,
            resume=check_resume(resume),
            system_metrics=interval,
            group=(name or None) if not rank_zero_only and world_size > 1 else None,
        )
        if self.run.group is not None and name is None:
            # Each rank made its own default name: group by the job instead (its launcher's).
            self.run = dataclasses.replace(self.run, group=system.job.job_key() or None)
        if system.node_count() > 1:  # a job of several nodes: which one this run describes
            self.run = dataclasses.replace(self.run, config=MappingProxyType({
                **self.run.config, **system.node_config()}))
        self._dispatch = new_dispatch(dispatch, strict=strict, queue_size=queue_size,
                                      on_full=on_full)
        if not isinstance(wait, bool):
            raise ConfigError(f"wait={wait!r} must be False (the default: writers start behind "
                              "Monitor()) or True (Monitor() returns once every backend started)")
        # Writers start behind Monitor() unless asked, or unless their answer is needed now:
        # what each found of an earlier run (resume), or a start that fails for every local
        # backend (a log_dir that is a file), reported here as before.
        self._dispatch.wait = wait or self.run.resume != "never" or (
            self.run.log_dir is not None and self.run.log_dir.exists()
            and not self.run.log_dir.is_dir())
        self.dispatch: str = self._dispatch.mode  # "process", "thread" or "sync"
        self.failures: dict[str, int] = self._dispatch.policy.failures
        self._reports = self._dispatch.policy.reports  # to report on the caller's thread
        self.media_skipped: dict[tuple[str, str], int] = self._dispatch.media.skipped
        self.dropped: dict[str, int] = self._dispatch.dropped
        self.undelivered: dict[str, int] = self._dispatch.undelivered
        self._send = self._dispatch.send  # log()'s hot path: bound methods, no look-up
        self._write_rows = self._dispatch.write_rows
        self._lock = threading.RLock()  # step assignment + sending; re-entered on SIGTERM
        self._pid, self._forked, self._closed = os.getpid(), False, False
        self._fork_locked = False
        self._tags: set[str] = set()
        self._next_step = 0
        self._reducer = Reducer()  # log(reduce=...): the ranks' agreed tags
        for key, flag in (("journal", journal), ("keep_journal", keep_journal)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{key}={flag!r} must be True or False")
        if journal_dir is not None and not isinstance(journal_dir, (str, os.PathLike)):
            raise ConfigError(f"journal_dir={journal_dir!r} must be a folder (str or Path), "
                              "e.g. journal_dir='/local/scratch/journals', or None for "
                              "<log_dir>/.journal")
        self._journal = (journal, journal_dir, keep_journal)
        self._dispatch.budgets = check_budget(budget)
        #: Backend name -> the journal seq of the first call it was not sent: its budget was
        #: spent (``budget``); ``monitors sync`` delivers the rest.
        self.detached: dict[str, int] = self._dispatch.detached
        self.last_steps: dict[str, int | None] = {}
        self._system: system.SystemMetrics | None = None
        writes = rank == 0 or not rank_zero_only
        self._start(backends, backend_options, writes)
        shutdown.register(self)
        if interval is not None:
            self._system = system.SystemMetrics(self, interval, writes and bool(self.backends),
                                                rank_zero_only)

    def _start(self, backends: list[str | type], backend_options: Mapping[str, Any],
               write: bool) -> None:
        """Select, load and check every backend (each name and option before any import; then,
        importing each plugin's module but no SDK, its SDK's distribution is installed and its
        options have the types and values it takes), then start them when this rank
        ``write``s, wherever the dispatch constructs them (``dispatch.backends.start_backend``
        runs the plugin's ``check_sdk`` there first). A failure closes what started."""
        found = discovery.select(backends, strict=self.strict)  # before any import
        check_backend_keys(backend_options, backends)
        classes = {
            k: v if isinstance(v, type) else discovery.load_backend(v) for k, v in found.items()
        }
        for backend_name, cls in classes.items():
            info = found[backend_name]
            check_installed(cls, None if isinstance(info, type) else Plugin.from_info(info))
            check_options(backend_name, cls, backend_options.get(backend_name) or {})
        if not write:
            return
        check_classes(self.run, classes)  # resume="must": every backend can resume
        if classes:  # a monitor with every backend disabled keeps no journal: nothing to deliver
            self._open_journal()
        specs = [BackendSpec(name, cls, dict(backend_options.get(name) or {}),
                             installed=not isinstance(found[name], type))
                 for name, cls in classes.items()]
        try:
            self._dispatch.start(specs, self.run)
            if self._dispatch.missing:  # resume="must": no backend writes, one error for all
                self._dispatch.stop()
                journal, self._dispatch.journal = self._dispatch.journal, None
                self._dispatch.close(None)
                if journal is not None:
                    journal.discard()
                raise_missing(self.run, self._dispatch.missing)
        except BaseException:  # a ConfigError, or any start failure with strict=True
            self._closed = True
            raise
        self._dispatch.policy.deliver()  # the start's warnings, pointing at the caller
        # What each backend found of an earlier run (core_monitor.resume).
        self.run, self.last_steps, self._next_step = collect(self.run, {
            name: facts["state"] for name, facts in self._dispatch.facts.items()})

    def _open_journal(self) -> None:
        """Open the run's journal (``core_monitor.journal``) for the fan-out; with ``resume``
        other than ``"never"``, first deliver what an earlier attempt's journal holds past
        each backend's cursor (``core_monitor.syncing``), so that it lands before the new
        calls. A journal that cannot be made is warned about once; the run goes on."""
        wanted, root, keep = self._journal
        log_dir = self.run.log_dir
        if not wanted or (root is None and log_dir is not None and log_dir.exists()
                          and not log_dir.is_dir()):
            return  # a log_dir that is a file: every local backend's start reports it
        folder = journal_folder(self.run, root)
        if self.run.resume != "never" and folder.is_dir():
            from .syncing import SyncError, leftovers, sync_journal

            if leftovers(folder):
                try:
                    report = sync_journal(folder)
                except SyncError as error:
                    warnings.warn(f"resume={self.run.resume!r}: the leftovers of an earlier "
                                  f"attempt were not delivered: {error}", BackendWarning,
                                  stacklevel=caller_level())
                else:
                    for name, why in report.failed.items():
                        warnings.warn(f"resume={self.run.resume!r}: backend {name!r} did not "
                                      f"take an earlier attempt's leftovers ({why}); they stay "
                                      f"in the journal: monitors sync {folder}",
                                      BackendWarning, stacklevel=caller_level())
        try:
            self._dispatch.journal = Journal(folder, keep=keep)
        except OSError as error:
            warnings.warn(f"the run's journal cannot be made in {folder} ({error}); the run "
                          "goes on without one (pass journal_dir= a writable folder)",
                          BackendWarning, stacklevel=caller_level())

    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str], **overrides: Any
    ) -> Monitor:
        """Build a monitor from a mapping or a ``.toml``/``.json`` file.

        See ``core_monitor.settings.load_monitor_config`` for the format. ``overrides`` are
        ``Monitor`` keyword arguments that win over the file (e.g. ``name=...``), applied
        before its sections are checked (``backends=[...]`` selects instead of the file).

        Raises:
            ConfigError: as ``load_monitor_config`` and ``Monitor`` do; when ``source`` is a
                file, the message starts with its path (e.g. an unknown option in a section).
        """
        kwargs = load_monitor_config(source, **overrides)
        try:
            return cls(kwargs.pop("backends"), **kwargs)
        except ConfigError as error:
            if not isinstance(source, Mapping) and error.args:
                # Same exception (and class, e.g. UnknownBackendError), pointing at the file.
                error.args = (f"{os.fspath(source)}: {error.args[0]}", *error.args[1:])
            raise

    def log(
        self, metrics: Mapping[str, Any], step: int | None = None, *, reduce: str | None = None,
        advance: bool = True, wall_time: float | None = None,
    ) -> int:
        """Log scalars and media at one step, as ``wandb.log``/``accelerate.Accelerator.log`` do.

        Every rule is checked here, on the caller's thread; the call is then handed to every
        backend (appended to the run's journal, which every writer process reads, and queued
        for each worker thread: all of them or none, whole, at every size, even when a
        ``KeyboardInterrupt`` or SIGTERM arrives) and ``log()`` returns: ``flush()`` waits for
        the writes. In the default process dispatch the call is then in the journal (the page
        cache): a crash of this process afterwards loses none of it.

        Args:
            metrics: ``{tag: value}``; nested mappings are flattened with ``/``. Values are
                numbers or anything with ``.item()`` (numpy/torch scalars, 0-d arrays), or
                media (``Image``, ``Histogram``, ``Text``: see ``core_monitor.media``).
            step: ``int`` with ``0 <= step < 2**63``, stored exactly, even when lower than an
                earlier step; ``None`` for the largest step seen so far + 1 (0 at first), also
                across threads.
            reduce: ``None``, or ``"mean"``, ``"sum"``, ``"max"``, ``"min"`` to reduce each value
                across ranks first. A collective: every rank calls it with the same tags; one
                ``torch.distributed.all_reduce`` per call (``core_monitor.distributed``).
                ``"stats"``: one ``all_gather`` instead, and each tag ``t`` is stored as its
                cross-rank view ``t/mean``, ``t/median``, ``t/min``, ``t/max``,
                ``t/min_rank``, ``t/max_rank`` (which rank is slowest); ``"ranks"``: also
                each rank's value as ``t/rank<k>``.
                Without a process group and a world size of 1 the values stay as they are.
            advance: ``False`` for a series on a step axis of its own (the system samples):
                its explicit ``step`` neither moves the next ``step=None`` step nor needs to
                follow it. ``step`` is then required.
            wall_time: the time to store with the values (seconds since the epoch, as
                ``time.time()``), e.g. when they were measured; ``None``: now. A backend whose
                SDK stamps its own time (Trackio) stores that instead.

        Returns:
            The step the scalars were stored at.

        Raises:
            TypeError: ``metrics`` is not a mapping; a tag is not a non-empty ``str`` or is not
                UTF-8 encodable; a value is neither a number (or its ``.item()`` raised) nor
                media of the right type or dtype (the message names the tag and type); ``step``
                is a ``bool``/``float``.
            ValueError: an ``int`` value too large for a float; a media value of a wrong shape
                or range; ``step`` out of range, or ``step=None`` after step ``2**63 - 1``.
            RuntimeError: the monitor is closed, or this process is a fork of its creator.
            ConfigError: ``reduce`` is not an operation, or ``WORLD_SIZE`` > 1 but no process
                group is initialised.
            core_monitor.distributed.TagMismatchError: (``reduce`` only) the ranks gave
                different tags or operations; raised on every rank.
            Exception: with ``strict=True``, a backend's exception from an earlier call.
                In every case above, nothing of this call is written.
        """
        if self._closed:
            raise self._closed_error("log")
        if self._reports:
            self._dispatch.policy.deliver()
        if reduce is not None:
            metrics = self._reducer.reduce_metrics(metrics, reduce)
        if type(metrics) is not dict and not isinstance(metrics, Mapping):  # the ABC: 0.1 us
            raise TypeError(f"log() takes a mapping of {{tag: value}}, not "
                            f"{type(metrics).__name__}; e.g. monitor.log({{'loss': 0.5}}, step=1)")
        known = self._tags
        rows: list[dict[str, float]] | None = None  # the common case: every tag known, every
        media: list[tuple[str, Any]] | None = None  # value a float
        for tag, value in metrics.items():
            if type(value) is not float or tag not in known:
                media = []  # (tag, media value), taken out of the rows
                rows = metric_rows(metrics, known, KNOWN_TAGS, media_taker(media))
                break
        if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
            step = check_step(step)
        if not advance and step is None:
            raise ValueError("log(..., advance=False) logs on a step axis of its own: pass "
                             "its step explicitly, e.g. step=sample_number")
        now = time.time() if wall_time is None else _check_wall_time(wall_time)
        with self._lock:
            if self._closed:
                raise self._closed_error("log")
            if step is None:
                step = self._next_step
                if step > MAX_STEP:
                    raise ValueError(f"the next step would be {step}, past the largest step "
                                     "2**63 - 1; pass explicit steps")
            if advance and step >= self._next_step:
                self._next_step = step + 1
            if rows is None:
                if type(metrics) is dict:
                    if metrics:
                        self._write_rows(((step, now, metrics),), False)
                elif metrics:
                    self._write_rows(((step, now, dict(metrics)),), True)
            elif rows:
                self._write_rows(tuple((step, now, r) for r in rows), True)
            if media:
                items = tuple(MediaItem(tag, step, now, value) for tag, value in media)
                if self._dispatch.media.skip(self._dispatch.hooks, items):
                    self._send("monitor_write_media", {"items": items})
        return step

    def write_events(self, events: Iterable[tuple[str, Any, int | None]]) -> None:
        """Log DeepSpeed-style event tuples ``(tag, value, step)`` as one batch.

        The convention is DeepSpeed's monitor API (``deepspeed.monitor.Monitor.write_events``).
        Each tuple carries its own step; a ``None`` step means the next step (the largest seen
        so far + 1), the same number for every ``None`` of this call.

        Raises:
            TypeError, ValueError, RuntimeError: as ``log`` does; nothing of it is written.
        """
        if self._closed:
            raise self._closed_error("write_events")
        if self._reports:
            self._dispatch.policy.deliver()
        now = time.time()
        checked = check_events(events)
        with self._lock:
            if self._closed:
                raise self._closed_error("write_events")
            auto = self._next_step
            if auto > MAX_STEP and any(step is None for _, _, step in checked):
                raise ValueError(f"the next step would be {auto}, past the largest step 2**63 - 1;"
                                 " pass explicit steps")
            batch = [Event(tag, value, auto if step is None else step, now)
                     for tag, value, step in checked]
            self._next_step = max(auto, 1 + max((e.step for e in batch), default=auto - 1))
            if batch:
                self._send("monitor_write", {"events": Batch(tuple(rows_by_step(batch)))})

    def log_config(self, config: Any) -> None:
        """Add hyperparameters after the start, e.g. a framework's config handed over late.

        The config is sanitised as ``Monitor(config=...)`` is (flat, ``.``-joined keys,
        JSON-safe values; odd values never raise), merged into ``self.run.config`` (a key given
        again takes the new value) and sent to every backend's ``monitor_config`` hook, which
        stores it where the tracker shows a run's config. A backend without that hook is
        skipped for it, with one ``BackendWarning`` per monitor.

        Args:
            config: a mapping, dataclass instance, ``argparse.Namespace`` or ``None``.

        Raises:
            RuntimeError: the monitor is closed (or belongs to the parent of this process).
        """
        if self._closed:
            raise self._closed_error("log_config")
        update = sanitize_config(config)
        if not update:
            return
        with self._lock:
            self.run = dataclasses.replace(
                self.run, config=MappingProxyType({**self.run.config, **update})
            )
            self._dispatch.warn_lacking("monitor_config", "the config given to log_config() is "
                                        "not stored there (it was stored by the other backends)")
            self._send("monitor_config", {"config": update})

    def flush(self, timeout: float | None = None) -> None:
        """Return once every backend has written and flushed (``monitor_flush``) everything
        logged before this call: it is then readable by each backend's own reader.

        Args:
            timeout: seconds to wait in all, ``None`` for no limit (``"sync"`` dispatch waits
                for the calls themselves, whatever the limit).

        Raises:
            FlushTimeout: the time ran out; ``.pending``: calls not yet written, per backend.
            Exception: with ``strict=True``, a backend's exception, raised once every other
                backend has flushed.

        A no-op once closed, and in a forked child (the monitor belongs to its parent).
        """
        if self._closed:
            return
        # A strict failure kept from before is raised after the flush (``FanOut.flush`` ends
        # with ``policy.deliver()``), not instead of it: every other backend is flushed first.
        self._dispatch.flush(self._lock, timeout)

    def close(self, timeout: float | None = None, *, crash: str | None = None) -> None:
        """Write what is buffered, then flush and close every backend (in reverse start order
        in this process; writer processes all at once).

        Args:
            timeout: seconds each backend gets to write its buffered calls and close (all at
                once); ``None`` waits. A backend still busy then is not closed (its writer
                process is killed); its calls are counted in ``undelivered`` and reported
                (``BackendWarning``). At exit and on SIGTERM the limit is
                ``core_monitor.shutdown.EXIT_TIMEOUT``.
            crash: end the run as crashed, for this reason (one line, e.g. ``"the training
                process raised ValueError: loss is NaN"``): every backend is told it
                (``monitor_crash``) after its last write, as ``run.finish(exit_code=1)`` in
                wandb and ``end_run(status="FAILED")`` in MLflow. ``None`` (or ``""``): the
                run finishes.
                An exception leaving ``with Monitor(...)`` passes one (``crash_reason``).

        Every backend is flushed and closed even when another one raises; a second call, or
        one in a forked child, does nothing. Calls dropped (``on_full="drop"``) are reported.

        Raises:
            Exception: with ``strict=True``, the first exception a backend raised.
        """
        if self._system is not None and not self._closed:
            self._system.stop()  # its last sample goes out with the rest
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._dispatch.stop(crash)
        shutdown.unregister(self)
        self._dispatch.close(timeout)

    @staticmethod
    def backend_name(cls: type) -> str:
        """The name a backend class passed directly is known by: ``cls.name`` or ``__name__``."""
        return discovery.backend_name(cls)

    @property
    def strict(self) -> bool:
        """Whether a backend's exception is re-raised (``True``) or warned about once."""
        return self._dispatch.policy.strict

    @property
    def backends(self) -> list[str]:
        """Names of the backends this process writes to, in start order (empty off rank 0)."""
        return self._dispatch.names

    def before_fork(self) -> None:
        """Before this process forks (``core_monitor.shutdown`` calls it): hold the lock (no
        call is half-sent) and leave no row in a buffer of this process that the child could
        write a second time (backends in this process write and flush what they hold, within
        ``core_monitor.dispatch.threads.FORK_FLUSH_TIMEOUT`` seconds; writer processes hold
        nothing here). ``after_fork_in_parent`` lets the lock go. A lock held longer than
        ``FORK_LOCK_TIMEOUT`` (another thread waiting for room in a hung backend's buffer) is
        not waited for: the fork goes ahead unflushed."""
        self._fork_locked = self._lock.acquire(timeout=FORK_LOCK_TIMEOUT)
        if self._fork_locked:
            self._dispatch.before_fork()

    def after_fork_in_parent(self) -> None:
        """Let go of the lock ``before_fork`` took."""
        if self._fork_locked:
            self._fork_locked = False
            self._lock.release()

    def after_fork_in_child(self) -> None:
        """Make this monitor inert in a forked child (``core_monitor.shutdown`` calls it).

        No thread of the parent exists in the child and no queued call is kept; the child
        closes its copies of the writers' pipes (so it neither writes to a writer nor keeps
        one alive); nothing is ever sent to a backend again from here (the parent owns the
        runs).
        """
        self._closed = self._forked = True
        self._lock = threading.RLock()  # another thread may have held it at the fork
        self._dispatch.forget()
        if self._system is not None:
            self._system.forget()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run (also ``True`` in a forked child)."""
        return self._closed

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:
        """Close the monitor. When an exception leaves the ``with`` block (a ``SystemExit``
        of status 0 or ``None`` aside), the run ends as crashed first: every backend is told
        why (``monitor_crash``, e.g. ``"the training process raised RuntimeError: boom"``)
        after its last write, as ``wandb.init()`` (exit code 1) and ``mlflow.start_run()``
        (status ``FAILED``) end a run their ``with`` block raised in. The exception
        propagates."""
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
            self.close()
            return
        self.close(crash=crash_reason(exc))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Monitor {self.run.project}/{self.run.name} {self.backends} {state}>"

    def _closed_error(self, method: str) -> RuntimeError:
        if self._forked:
            return RuntimeError(
                f"{method}() in process {os.getpid()} on the Monitor of run {self.run.name!r}, "
                f"created by process {self._pid}: this process is a fork of it, and a forked "
                "child never writes to its parent's runs. Log from the parent, or create a new "
                "Monitor in the child (a run of its own)"
            )
        return RuntimeError(
            f"{method}() on the closed Monitor of run {self.run.name!r}; call it before "
            "close(), or create a new Monitor"
        )


def _check_wall_time(wall_time: Any) -> float:
    """``log(wall_time=...)`` as a float, or a ``TypeError``/``ValueError`` naming it."""
    if isinstance(wall_time, bool) or not isinstance(wall_time, (int, float)):
        raise TypeError(f"wall_time={wall_time!r} must be seconds since the epoch as a float "
                        "(time.time()), or None for now")
    if not math.isfinite(wall_time) or wall_time < 0:
        raise ValueError(f"wall_time={wall_time!r} must be finite and >= 0 (time.time())")
    return float(wall_time)


#: A folder given as a URL (fsspec's ``protocol://path``: ``s3://``, ``gs://``, ``memory://``).
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def local_folder(log_dir: str | os.PathLike[str] | None) -> Path | None:
    """``log_dir`` as a ``Path``, refusing a URL, which ``Path`` would turn into a local folder
    (``s3://b/x`` -> ``./s3:/b/x``).

    Raises:
        ConfigError: ``log_dir`` is a URL; the message names it and the backends' options
            that write there.
    """
    if log_dir is None:
        return None
    if URL.match(os.fspath(log_dir)):
        raise ConfigError(
            f"log_dir={os.fspath(log_dir)!r} is a URL, and log_dir is a local folder (every "
            "local backend writes under it); give a local folder, or the remote folder to the "
            "backend that writes there: csv={'run_dir': '<URL>/<project>/<run name>'} (the "
            "csv and tensorboard backends write through fsspec), or "
            "MonitorLogger(save_dir=<URL>) in Lightning")
    return Path(log_dir)


#: The longest reason ``crash_reason`` returns (characters): trackers keep it as a tag or a
#: status message, some with a limit (MLflow tags: 5000 characters).
CRASH_REASON_CHARS = 1000


def crash_reason(error: BaseException) -> str:
    """What the backends are told (``monitor_crash``) when ``error`` left a monitor's ``with``
    block: ``"the training process (pid N) raised <type>: <first line of the message>"``, at
    most ``CRASH_REASON_CHARS`` characters."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"the training process (pid {os.getpid()}) raised {type(error).__name__}" + (
        f": {message}" if message else "")
    return text if len(text) <= CRASH_REASON_CHARS else text[:CRASH_REASON_CHARS - 1] + "…"
