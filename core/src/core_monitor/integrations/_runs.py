"""One run per framework logger: started at first use, kept open from one stage to the next.

A framework runs several stages with one logger (Lightning's ``fit`` then ``test``, the
Trainer's ``train()`` then ``evaluate()``), and its built-in loggers write them all into one
run. So the end of a stage only flushes (``LazyRun.pause``: everything logged is readable); the
run stays open for the next stage and is closed by ``close()``, at interpreter exit, or when
another integration object in this process starts a run (as ``wandb.init()`` finishes the
previous run) while this one is "finished":

* it waits between stages (``LazyRun.pause``: Lightning's ``finalize``, the Trainer's
  ``on_train_end``), or
* the object owning it was garbage-collected with its run open (a sweep that drops each
  trial's logger or callback without ``close()``; DeepSpeed's ``DeepSpeedMonitor`` likewise).

So a sweep loop that makes a new logger per trial keeps at most one finished trial's run (and
its writer processes) open, whether or not the old logger was collected yet. A collected
object's run is not closed by the garbage collector itself: closing waits for the backends
(writer processes, a wandb run to finish), which must not happen at whatever point of the
program, on whatever thread, the collector runs; it is closed at the next start or at exit.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..hyperparameters import sanitize_config
from ..monitor import Monitor
from ..run import default_run_name

#: Every ``LazyRun`` of this process by token: a copy made by pickling in this process (the
#: Trainer pickled with its logger) shares the original's run instead of starting another.
_live: weakref.WeakValueDictionary[str, LazyRun] = weakref.WeakValueDictionary()
#: Open monitors of finished runs (see the module docstring) by ``id``: closed when any
#: ``LazyRun`` starts a run (``close_finished``).
_finished: dict[int, Monitor] = {}


class _Slot:
    """The ``Monitor`` of one owner, where a finalizer of the owner can find it."""

    __slots__ = ("monitor",)

    def __init__(self) -> None:
        self.monitor: Monitor | None = None


def _collected(slot: _Slot) -> None:
    """The owner of ``slot`` was garbage-collected: its open run is finished. Only recorded
    here (any thread, any point of the program); closed by ``close_finished``."""
    monitor = slot.monitor
    if monitor is not None and not monitor.closed:
        _finished[id(monitor)] = monitor


def close_when_collected(owner: object, monitor: Monitor) -> None:
    """Make ``monitor`` a finished run once ``owner`` is garbage-collected (see the module
    docstring): for an integration object that holds a ``Monitor`` without a ``LazyRun``."""
    slot = _Slot()
    slot.monitor = monitor
    weakref.finalize(owner, _collected, slot).atexit = False


def close_finished() -> None:
    """Close every finished run (waiting between stages, or its owner collected)."""
    while _finished:
        _, monitor = _finished.popitem()
        monitor.close()


class LazyRun:
    """The ``Monitor`` of one framework logger, created at first use (see the module docstring).

    Hyperparameters given before the run starts (``log_config``) are kept and become the
    ``config`` the run starts with, so a logger that only received hyperparameters in the main
    process (Lightning's ``ddp_spawn`` pickles it into the worker processes) has started no run
    there. After ``close()`` the next use starts a NEW run ``<name>-2`` (then ``-3``, ...),
    with the same config and a ``UserWarning`` (a finished run cannot be reopened).

    Pickling keeps the names, options and config, never the ``Monitor``: unpickled in the same
    process it is the same object (one run); in another process (a spawned worker) it starts
    the run of the same name there at first use.

    Args:
        backends: as ``Monitor``'s ``backends`` (``None``: ``EXPERIMENT_MONITORS``).
        project: the project.
        name: the run name; ``None``: made up once, here (``core_monitor.run.default_run_name``).
        source: the integration's name, for warnings.
        **monitor_kwargs: other ``Monitor`` keyword arguments.
    """

    _slot: _Slot

    def __init__(self, backends: Sequence[str | type] | str | None, *, project: str,
                 name: str | None, source: str, **monitor_kwargs: Any) -> None:
        self.backends = backends
        self.project = project
        self.base_name = name or default_run_name()
        self.source = source
        self.monitor_kwargs = monitor_kwargs
        self.count = 0
        #: Hyperparameters given so far (sanitised), the config of any run started later.
        self.config: dict[str, Any] = dict(sanitize_config(monitor_kwargs.pop("config", None)))
        self._same_name = False  # restored in another process: its first run keeps the name
        self._token = uuid.uuid4().hex
        _live[self._token] = self
        _watch(self)

    @property
    def _monitor(self) -> Monitor | None:
        return self._slot.monitor

    def _unfinish(self) -> None:
        """This run is in use again: not a finished run."""
        if self._slot.monitor is not None:
            _finished.pop(id(self._slot.monitor), None)

    @property
    def name(self) -> str:
        """The current (or next) run's name."""
        return self.base_name if self.count <= 1 else f"{self.base_name}-{self.count}"

    @property
    def last(self) -> Monitor | None:
        """The latest ``Monitor``, open or closed, or ``None``."""
        return self._monitor

    @property
    def started(self) -> Monitor | None:
        """The open ``Monitor``, or ``None``."""
        monitor = self._monitor
        return monitor if monitor is not None and not monitor.closed else None

    def monitor(self, resume: bool = False) -> Monitor:
        """The open ``Monitor``, created now if there is none (see the class docstring).

        Args:
            resume: the framework resumes training from a checkpoint (the Trainer's
                ``resume_from_checkpoint``, Lightning's ``ckpt_path``): a run started now
                reattaches to the run of the current name, ``Monitor(resume="allow")``
                (unless the logger was given its own ``resume``), instead of ``<name>-2``
                after a close, so one training job stays one run in every tracker, also
                across processes when the run has a fixed name.
        """
        self._unfinish()
        if self._monitor is not None and not self._monitor.closed:
            return self._monitor
        if self._same_name:
            self._same_name = False
        elif not (resume and self.count >= 1):  # resume: the same name again
            self.count += 1
        if self.count > 1 and self._monitor is not None and not resume:
            warnings.warn(
                f"{self.source}: run {self._monitor.run.name!r} was closed; logging again "
                f"starts a new run {self.name!r} in project {self.project!r} (backends cannot "
                "reopen a finished run)", UserWarning, stacklevel=3,
            )
        close_finished()
        kwargs = dict(self.monitor_kwargs)
        if resume:
            kwargs.setdefault("resume", "allow")
        monitor = Monitor(self.backends, project=self.project, name=self.name,
                          config=self.config, **kwargs)
        self._slot.monitor = monitor
        return monitor

    def log_config(self, config: Any) -> None:
        """Add hyperparameters: to the open run, else kept for the run that starts next.

        Only keys that are new or changed reach the open run: a framework hands the same
        hyperparameters over again at every stage (Lightning's ``test`` after ``fit``), and a
        tracker that keeps the first config of a run (TensorBoard's HParams) would warn."""
        changed = {k: v for k, v in sanitize_config(config).items()
                   if k not in self.config or self.config[k] != v}
        self.config.update(changed)
        monitor = self.started
        if monitor is not None and changed:
            monitor.log_config(changed)

    def pause(self) -> None:
        """A stage ended: make what was logged readable (``Monitor.flush``) and keep the run
        open for the next stage. Hyperparameters given to a run never started start it now,
        so they are stored.

        In a ``multiprocessing`` child (Lightning's ``ddp_spawn`` workers, one set per stage)
        the run is closed instead: such a child exits without running ``atexit`` handlers, so
        nothing else would close it."""
        if self._monitor is None and self.config:
            self.monitor()
        if multiprocessing.parent_process() is not None:
            self.close()
            return
        monitor = self.started
        if monitor is not None:
            monitor.flush()
            _finished[id(monitor)] = monitor

    def close(self, crash: str | None = None) -> None:
        """Close the open run, if any; as crashed, for ``crash`` (``Monitor.close``)."""
        self._unfinish()
        if self._monitor is not None:
            self._monitor.close(crash=crash)

    def __reduce__(self) -> tuple[Any, ...]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_slot", "_same_name")}
        state["_started"] = self._monitor is not None
        return _restore, (self._token, os.getpid(), state)


def _restore(token: str, pid: int, state: Mapping[str, Any]) -> LazyRun:
    """Unpickle a ``LazyRun``: the live one in the process that pickled it, else a copy whose
    first run keeps the name of the run that was open (see ``LazyRun``)."""
    if pid == os.getpid() and token in _live:
        return _live[token]
    run = LazyRun.__new__(LazyRun)
    state = dict(state)
    started = state.pop("_started")
    run.__dict__.update(state)
    run._same_name = started and run.count >= 1
    _live[token] = run
    _watch(run)
    return run


def _watch(run: LazyRun) -> None:
    """Give ``run`` the slot of its ``Monitor`` and the finalizer that makes its open run a
    finished one when ``run`` (its logger, callback or tracker) is collected."""
    run._slot = _Slot()
    weakref.finalize(run, _collected, run._slot).atexit = False
