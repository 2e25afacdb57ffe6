"""``Monitor``: the one object training code logs through; it fans each batch out to backends.

The public API only: validating each call and deciding its step. Finding and checking backends
is ``core_monitor.discovery``; calling them under the failure policy is ``core_monitor.dispatch``;
the per-backend worker threads and queues are ``core_monitor.worker``; closing what was left
open at exit (and never in a forked child) is ``core_monitor.shutdown``; the settings rules and
file reader are ``core_monitor.settings``.
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

from . import discovery, shutdown
from .config import sanitize_config
from .dispatch import Dispatcher
from .errors import ConfigError, FlushTimeout
from .events import MAX_STEP, Batch, Event, check_step, check_tag, flatten, rows_by_step, to_float
from .run import RunInfo, default_run_name, detect_rank
from .settings import check_dispatch, check_keywords, check_unselected, load_monitor_config
from .worker import DEFAULT_QUEUE_SIZE, Workers, in_worker

#: Seconds ``before_fork`` waits for the backends to write what is queued.
FORK_FLUSH_TIMEOUT = 10.0
#: Tags a monitor remembers as valid (so a call of known tags skips the tag rules), at most.
KNOWN_TAGS = 4096


class Monitor:
    """Log scalars once; every selected backend stores them at the caller's step.

    Args:
        backends: backend names as installed (``monitors list``), e.g. ``["trackio",
            "tensorboard"]``, or backend classes (a class's name is its ``name`` attribute, else
            its ``__name__``). One name may be given as a plain ``str``. Must not be empty.
        project: project name (wandb/Trackio "project"; TensorBoard's first folder level).
        name: run name; default ``YYYYmmdd-HHMMSS-host``, the same for every backend.
        config: hyperparameters; stored flat and JSON-safe (``config.sanitize_config``).
        log_dir: folder local backends write under (``str`` or ``Path``); ``None`` lets each
            SDK use its own default. When given it wins over ``TRACKIO_DIR``/``WANDB_DIR``.
        strict: re-raise a backend's exception (after every other backend got the call)
            instead of warning once and counting it in ``failures``.
        rank_zero_only: only rank 0 constructs backends; other ranks validate what they log
            and write nothing (they import no SDK). ``False`` writes from every rank.
        dispatch: ``"background"`` (default): ``log()`` validates on the caller's thread and
            queues; one thread per backend writes (README, "Dispatch"). ``"sync"``: every hook
            runs on the caller's thread before ``log()`` returns.
        queue_size: calls (``log``/``write_events``/``log_config``) each backend's queue holds
            in background mode; 10,000 by default (about 10 MB at 10 scalars per call).
        on_full: what ``log()`` does when a backend's queue is full: ``"block"`` (default)
            waits for room, losing nothing; ``"drop"`` drops that call for that backend only,
            counts it in ``dropped`` and warns once per backend and at ``close()``.
        **backend_options: one mapping per backend name, its keyword options, e.g.
            ``wandb={"mode": "offline"}``.

    Attributes:
        run: the ``RunInfo`` every backend got.
        failures: backend name -> hook calls of it that raised.
        dropped: backend name -> calls dropped for it (``on_full="drop"``).
        undelivered: backend name -> calls still queued when ``close(timeout=...)`` gave up.

    The monitor belongs to the process that created it: in a forked child it is inert (see
    ``log``). Its methods may be called from several threads.

    Raises:
        ConfigError: no backend selected; ``project``, ``name``, ``strict``,
            ``rank_zero_only``, ``dispatch``, ``queue_size`` or ``on_full`` of the wrong type; a misspelt keyword (``logdir``: "did you mean
            'log_dir'?"); options for an unselected backend; or an option the backend does not
            accept (the message names backend, option and accepted ones).
        UnknownBackendError: a name that no installed distribution declares.
        BackendLoadError: a selected plugin or its SDK fails to import.
    """

    def __init__(
        self,
        backends: Sequence[str | type] | str,
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
        )
        self._dispatch = Dispatcher(strict=strict)
        self.failures: dict[str, int] = self._dispatch.failures
        self._reports = self._dispatch.reports  # worker failures to report on this thread
        self.dispatch = dispatch
        self.dropped: dict[str, int] = {}
        self.undelivered: dict[str, int] = {}
        self._workers: Workers | None = None
        self._send = self._dispatch.send  # log()'s hot path: one bound method, no look-up
        self._lock = threading.RLock()  # step assignment + queueing; re-entered on SIGTERM
        self._pid = os.getpid()
        self._forked = False
        self._tags: set[str] = set()
        self._next_step = 0
        self._closed = False

        found = discovery.select(backends)  # every name and keyword checked before any import
        check_unselected(backend_options, list(found))
        classes = {
            k: v if isinstance(v, type) else discovery.load_backend(v) for k, v in found.items()
        }
        for backend_name, cls in classes.items():
            discovery.check_options(backend_name, cls, backend_options.get(backend_name) or {})
        if rank == 0 or not rank_zero_only:
            try:
                for backend_name, cls in classes.items():
                    options = dict(backend_options.get(backend_name) or {})
                    self._dispatch.start(backend_name, cls, self.run, options)
            except Exception:  # a ConfigError, or any start failure with strict=True
                self.close()
                raise
        if dispatch == "background" and self._dispatch.backends:
            self._workers = Workers(self._dispatch, queue_size, on_full)
            self._send = self._workers.send
            self.dropped = self._workers.dropped
            self.undelivered = self._workers.undelivered
        shutdown.register(self)

    @staticmethod
    def backend_name(cls: type) -> str:
        """The name a backend class passed directly is known by: ``cls.name`` or ``__name__``."""
        return discovery.backend_name(cls)

    @property
    def strict(self) -> bool:
        """Whether a backend's exception is re-raised (``True``) or warned about once."""
        return self._dispatch.strict

    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str], **overrides: Any
    ) -> Monitor:
        """Build a monitor from a mapping or a ``.toml``/``.json`` file.

        See ``core_monitor.settings.load_monitor_config`` for the format. ``overrides`` are
        ``Monitor`` keyword arguments that win over the file (e.g. ``name=...``).

        Raises:
            ConfigError: as ``load_monitor_config`` and ``Monitor`` do; when ``source`` is a
                file, the message starts with its path (e.g. an unknown option in a section).
        """
        kwargs = load_monitor_config(source)
        kwargs.update(overrides)
        try:
            return cls(kwargs.pop("backends"), **kwargs)
        except ConfigError as error:
            if not isinstance(source, Mapping) and error.args:
                # Same exception (and class, e.g. UnknownBackendError), pointing at the file.
                error.args = (f"{os.fspath(source)}: {error.args[0]}", *error.args[1:])
            raise

    @property
    def backends(self) -> list[str]:
        """Names of the backends this process writes to, in start order (empty off rank 0)."""
        return [backend.name for backend in self._dispatch.backends]

    # Logging ---------------------------------------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> int:
        """Log scalars at one step, as ``wandb.log``/``accelerate.Accelerator.log`` do.

        Every rule is checked here, on the caller's thread; in background mode the call is then
        queued for every backend (all of them or none, even when a ``KeyboardInterrupt`` or
        SIGTERM arrives) and ``log()`` returns: ``flush()`` waits for the writes.

        Args:
            metrics: ``{tag: value}``; nested mappings are flattened with ``/``. Values are
                numbers or anything with ``.item()`` (numpy/torch scalars, 0-d arrays).
            step: ``int`` with ``0 <= step < 2**63``, stored exactly, even when lower than an
                earlier step; ``None`` for the largest step seen so far + 1 (0 at first), also
                across threads.

        Returns:
            The step the scalars were stored at.

        Raises:
            TypeError: ``metrics`` is not a mapping; a tag is not a non-empty ``str`` or is not
                UTF-8 encodable; a value is not a number or its ``.item()`` raised (the message
                names the tag and type); ``step`` is a ``bool``/``float``.
            ValueError: an ``int`` value too large for a float; ``step`` out of range, or
                ``step=None`` after step ``2**63 - 1``.
            RuntimeError: the monitor is closed, or was created by another process (this one
                is a forked child: it never writes to its parent's runs).
            Exception: with ``strict=True``, a backend's exception from an earlier call.
            In every case nothing of this call is written.
        """
        if self._closed:
            raise self._closed_error("log")
        if self._reports:
            self._dispatch.deliver()
        if not isinstance(metrics, Mapping):
            raise TypeError(f"log() takes a mapping of {{tag: value}}, not "
                            f"{type(metrics).__name__}; e.g. monitor.log({{'loss': 0.5}}, step=1)")
        known = self._tags
        rows = None  # the common case: every tag known, every value a float
        for tag, value in metrics.items():
            if type(value) is not float or tag not in known:
                rows = self._rows(metrics)
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
                self._send("monitor_write", {"events": Batch(tuple([(step, now, r) for r in rows]))})
        return step

    def _rows(self, metrics: Mapping[str, Any]) -> list[dict[str, float]]:
        """``metrics`` checked and flattened into rows (a new row where a tag repeats)."""
        rows: list[dict[str, float]] = [{}]
        known = self._tags
        for tag, value in flatten(metrics):
            row = rows[-1]
            if tag in row:
                row = {}
                rows.append(row)
            row[tag] = to_float(tag, value)
            if len(known) < KNOWN_TAGS:
                known.add(tag)
        return rows if rows[0] else []

    def write_events(self, events: Iterable[tuple[str, Any, int | None]]) -> None:
        """Log DeepSpeed-style event tuples ``(tag, value, step)`` as one batch.

        The convention is DeepSpeed's monitor API (``deepspeed.monitor.Monitor.write_events``).
        Each tuple carries its own step; a ``None`` step means the next step (the largest seen
        so far + 1), the same number for every ``None`` of this call.

        Raises:
            TypeError, ValueError, RuntimeError: as ``log`` does; nothing of this call is
                written.
        """
        if self._closed:
            raise self._closed_error("write_events")
        if self._reports:
            self._dispatch.deliver()
        now = time.time()
        checked = []
        for item in events:
            if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 3:
                raise TypeError(f"event {item!r:.80} is not a (tag, value, step) tuple")
            tag, value, step = item
            check_tag(tag)
            checked.append((tag, to_float(tag, value), None if step is None else check_step(step)))
        with self._lock:
            if self._closed:
                raise self._closed_error("write_events")
            auto = self._next_step
            if auto > MAX_STEP and any(step is None for _, _, step in checked):
                raise ValueError(f"the next step would be {auto}, past the largest step "
                                 "2**63 - 1; pass explicit steps")
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
            timeout: seconds to wait in all (background mode), ``None`` for no limit.

        Raises:
            FlushTimeout: the time ran out; ``.pending`` counts, per backend, the calls not
                written yet (they stay queued).
            Exception: with ``strict=True``, a backend's exception.

        A no-op once closed, and in a forked child (the monitor belongs to its parent).
        """
        if self._closed:
            return
        if self._reports:
            self._dispatch.deliver()
        workers = self._workers
        if workers is None:
            with self._lock:
                self._dispatch.call("monitor_flush")
            return
        with self._lock:
            markers = workers.queue_flush()
        late = workers.wait_flushed(markers, timeout)
        self._dispatch.deliver()
        if late:
            raise FlushTimeout(late, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued, then flush and close every backend in reverse start order.

        Args:
            timeout: seconds each backend gets to write its queued calls (they drain at the
                same time); ``None`` waits for all. A backend still busy then is not flushed
                nor closed, and what it had queued is counted in ``undelivered`` and reported
                (``BackendWarning``), never dropped silently. At exit and on SIGTERM the limit
                is ``core_monitor.shutdown.EXIT_TIMEOUT``.

        Every backend is flushed and closed even when another one raises; a second call, or
        a call in a forked child, does nothing. Calls dropped with ``on_full="drop"`` are
        reported here once more.

        Raises:
            Exception: with ``strict=True``, the first exception a backend raised.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._workers is not None:
                self._workers.queue_stop()
        shutdown.unregister(self)
        finished = None
        if self._workers is not None:
            finished = self._workers.wait_stopped(timeout)
            if self.undelivered:
                self._dispatch.report_lost(self.undelivered, f"still queued when close(timeout="
                                           f"{timeout}) gave up; the backend is not closed")
            if self.dropped:
                self._dispatch.report_lost(self.dropped, "dropped, its queue was full "
                                           "(on_full='drop')")
        self._dispatch.close(finished)

    def before_fork(self) -> None:
        """Before this process forks (``core_monitor.shutdown`` calls it): hold the lock (no
        call is half-queued or half-written) and have every backend write and flush what it
        holds, within ``FORK_FLUSH_TIMEOUT`` seconds, so the child copies no buffered rows
        that it could write a second time. ``after_fork_in_parent`` lets the lock go."""
        self._lock.acquire()
        if self._workers is None:
            self._dispatch.flush_quietly()
        elif not in_worker():  # a backend forking on its own thread cannot wait for itself
            self._workers.wait_flushed(self._workers.queue_flush(), FORK_FLUSH_TIMEOUT)

    def after_fork_in_parent(self) -> None:
        """Let go of the lock ``before_fork`` took."""
        self._lock.release()

    def after_fork_in_child(self) -> None:
        """Make this monitor inert in a forked child (``core_monitor.shutdown`` calls it).

        No thread of the parent exists in the child and no queued call is kept; nothing is
        ever sent to a backend again from here (the parent owns the runs).
        """
        self._closed = self._forked = True
        self._lock = threading.RLock()  # another thread may have held it at the fork
        if self._workers is not None:
            self._workers.forget()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run (also ``True`` in a forked child)."""
        return self._closed

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
