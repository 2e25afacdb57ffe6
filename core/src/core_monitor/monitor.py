"""``Monitor``: the one object training code logs through; it fans each batch out to backends.

The public API only: validating each call and deciding its step. Finding and checking backends
is ``core_monitor.discovery``; calling them under the failure policy is ``core_monitor.dispatch``;
background or sync dispatch is ``core_monitor.channel`` (threads: ``core_monitor.worker``);
closing what is open at exit is ``core_monitor.shutdown``; the process the monitor belongs to
is ``core_monitor.base``; the settings rules and file reader are ``core_monitor.settings``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from . import resume as _resume  # [resume]
from . import shutdown
from .base import MonitorBase
from .channel import check_dispatch
from .config import sanitize_config
from .dispatch import Dispatcher
from .distributed import Reducer
from .errors import ConfigError
from .events import MAX_STEP, Batch, Event, check_events, check_step, metric_rows, rows_by_step
from .media import MediaItem, media_taker
from .run import RunInfo, default_run_name, detect_rank
from .settings import check_keywords, load_monitor_config
from .worker import DEFAULT_QUEUE_SIZE

#: Tags a monitor remembers as valid (a call of known tags skips the tag rules), at most.
KNOWN_TAGS = 4096


class Monitor(MonitorBase):
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
            and write nothing (they import no SDK). ``False`` writes from every rank.
        dispatch: ``"background"``: ``log()`` checks and queues, one thread per backend writes
            (``core_monitor.worker``); ``"sync"``: backends are called before ``log()`` returns.
        queue_size: calls each backend's queue holds (background), 10,000 (about 10 MB at 10
            scalars per call).
        on_full: a full queue makes ``log()`` wait (``"block"``, nothing lost) or drop that
            call for that backend only (``"drop"``: counted in ``dropped``, warned once).
        resume: ``"never"`` (a new run), ``"allow"`` (continue the run of this project, name
            and log_dir in every backend when it exists, else start it) or ``"must"``
            (continue it; ``NoRunToResume`` naming each backend without it, nothing logged).
            See ``core_monitor.resume``.
        **backend_options: one mapping per backend name, its keyword options, e.g.
            ``wandb={"mode": "offline"}``; an installed backend's are ignored when unselected.

    Attributes:
        run: the ``RunInfo`` every backend got, with ``resumed`` and ``last_step`` filled
            in after the start (``core_monitor.resume``).
        last_steps: backend name -> the largest step its run already held (``None``: new run).
        failures: backend name -> hook calls of it that raised.
        dropped: backend name -> calls dropped for it (``on_full="drop"``).
        undelivered: backend name -> calls still queued when ``close(timeout=...)`` gave up.

    Its methods may be called from several threads; in a forked child it is inert (``log``).

    Raises:
        ConfigError: no backend selected; a keyword of the wrong type or value; a keyword
            naming no installed backend (``logdir``: "did you mean 'log_dir'?"); an option the
            backend does not accept (naming backend, option and accepted ones); ``strict=True``
            and a disabled backend selected, or an unknown name in
            ``EXPERIMENT_MONITORS_DISABLE``; ``resume`` not one of its values.
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
        dispatch: str = "background",
        queue_size: int = DEFAULT_QUEUE_SIZE,
        on_full: str = "block",
        resume: str = "never",
        **backend_options: Mapping[str, Any],
    ) -> None:
        backends = check_keywords(backends, project, name, strict, rank_zero_only)
        check_dispatch(dispatch, queue_size, on_full)
        rank, world_size = detect_rank()
        self.run = RunInfo(
            project=project,
            name=name or default_run_name(),
            config=sanitize_config(config),
            log_dir=Path(log_dir) if log_dir is not None else None,
            rank=rank,
            world_size=world_size,
            resume=_resume.check_resume(resume),  # [resume]
        )
        self._dispatch = Dispatcher(strict=strict)
        self.failures: dict[str, int] = self._dispatch.failures
        self._reports = self._dispatch.reports  # worker failures to report on this thread
        #: (backend, media kind) -> media values not sent there: the backend lacks the kind.
        self.media_skipped: dict[tuple[str, str], int] = self._dispatch.media_skipped
        self.dispatch = dispatch  # "background" or "sync"
        self._channel = None  # _start sets it, and dropped/undelivered, once backends started
        self._lock = threading.RLock()  # step assignment + queueing; re-entered on SIGTERM
        self._pid, self._forked, self._closed = os.getpid(), False, False
        self._tags: set[str] = set()
        self._next_step = 0
        self._reducer = Reducer()  # log(reduce=...): the ranks' agreed tags
        self._start(backends, backend_options, rank == 0 or not rank_zero_only,
                    (dispatch, queue_size, on_full))
        # [resume] what each backend found of an earlier run (core_monitor.resume)
        self.run, self.last_steps, self._next_step = _resume.collect(self.run, {
            b.name: _resume.backend_state(b.instance) for b in self._dispatch.backends})
        shutdown.register(self)

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
        self, metrics: Mapping[str, Any], step: int | None = None, *, reduce: str | None = None
    ) -> int:
        """Log scalars and media at one step, as ``wandb.log``/``accelerate.Accelerator.log`` do.

        Every rule is checked here, on the caller's thread; in background mode the call is then
        queued for every backend (all of them or none, even when a ``KeyboardInterrupt`` or
        SIGTERM arrives) and ``log()`` returns: ``flush()`` waits for the writes.

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
                Without a process group and a world size of 1 the values stay as they are.

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
            In every case nothing of this call is written.
        """
        if self._closed:
            raise self._closed_error("log")
        if self._reports:
            self._dispatch.deliver()
        if reduce is not None:
            metrics = self._reducer.reduce_metrics(metrics, reduce)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"log() takes a mapping of {{tag: value}}, not "
                            f"{type(metrics).__name__}; e.g. monitor.log({{'loss': 0.5}}, step=1)")
        known = self._tags
        rows = media = None  # the common case: every tag known, every value a float
        for tag, value in metrics.items():
            if type(value) is not float or tag not in known:
                media = []  # (tag, media value), taken out of the rows
                rows = metric_rows(metrics, known, KNOWN_TAGS, media_taker(media))
                break
        if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
            step = check_step(step)
        now = time.time()
        with self._lock:
            if self._closed:
                raise self._closed_error("log")
            if step is None:
                step = self._next_step
                if step > MAX_STEP:
                    raise ValueError(f"the next step would be {step}, past the largest step "
                                     "2**63 - 1; pass explicit steps")
            if step >= self._next_step:
                self._next_step = step + 1
            if rows is None:
                if metrics:
                    self._send("monitor_write", {"events": Batch(((step, now, dict(metrics)),))})
            elif rows:
                self._send("monitor_write", {"events": Batch(tuple((step, now, r) for r in rows))})
            if media:
                items = tuple(MediaItem(tag, step, now, value) for tag, value in media)
                if self._dispatch.media.skip(self.backends, items):
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
            self._dispatch.deliver()
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
