"""Hugging Face accelerate: ``Accelerator(log_with=MonitorTracker([...]))`` reaches every backend.

Two forms (the tracker API is accelerate's ``accelerate.tracking.GeneralTracker``)::

    from core_monitor.integrations.accelerate import MonitorTracker
    accelerator = Accelerator(log_with=MonitorTracker(["trackio", "wandb"]), project_dir="out")
    accelerator.init_trackers("digits", config={"lr": 3e-4})

    from core_monitor.integrations import accelerate as monitors_accelerate
    monitors_accelerate.register()              # once, before Accelerator(...)
    accelerator = Accelerator(log_with="monitors")
    accelerator.init_trackers("digits", config={"lr": 3e-4},
                              init_kwargs={"monitors": {"backends": ["trackio", "wandb"]}})

In both, the project is the one given to ``init_trackers`` and the local backends write under
the ``Accelerator``'s ``logging_dir`` (its ``project_dir`` unless set apart), as accelerate's
own trackers. ``accelerator.log(values, step=s)`` stores every value at exactly ``s`` in every
backend; ``accelerator.end_training()`` closes the run, and a later ``init_trackers`` starts a
new one. Importing this module imports accelerate.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from accelerate import Accelerator
from accelerate.tracking import GeneralTracker, register_tracker_class

from ..errors import ConfigError
from ..monitor import Monitor
from ._common import check_arguments, loggable
from ._runs import LazyRun

__all__ = ["TRACKER_NAME", "MonitorTracker", "register"]

#: The name ``register()`` gives the tracker: ``Accelerator(log_with="monitors")``.
TRACKER_NAME = "monitors"


class MonitorTracker(GeneralTracker):
    """An accelerate tracker that logs through one ``core_monitor.Monitor``.

    Where each step happens, on which process:

    * Construction, on every process (a script builds its ``Accelerator`` everywhere): the
      backend names, ``Monitor``'s keywords and each backend's option names are checked here,
      importing no SDK and touching no ``PartialState``, so a misspelt option is the same
      ``ConfigError`` on every process before training starts.
    * ``start()`` and ``log()``: accelerate calls them on the main process only
      (``init_trackers`` and ``log`` are ``@on_main_process``), which creates and writes the
      ``Monitor``. So ``rank_zero_only=False`` (a run per rank) is not available here.
    * ``finish()`` (``end_training``) on every process: closes the run where there is one.

    ``start()`` takes the project given to ``init_trackers`` and, unless ``log_dir`` is given,
    the ``Accelerator``'s ``logging_dir`` (accelerate passes neither to a tracker instance: they
    are read from that ``init_trackers`` call, see ``init_trackers_call``). After
    ``end_training()``, ``init_trackers`` again starts a new run (``<run_name>-2`` when the
    project is the same, with a warning: a finished run cannot be reopened).

    Args:
        backends: backend names as installed (``monitors list``) or backend classes, or one
            name; ``None``: those in ``EXPERIMENT_MONITORS``.
        run_name: the run name (``Monitor``'s ``name``); default: made up by the core.
        **monitor_kwargs: other ``Monitor`` keyword arguments: ``project`` (optional; when given
            it must equal the one given to ``init_trackers``), ``log_dir``, ``config``,
            ``strict`` and one options mapping per backend (``wandb={"mode": "offline"}``).

    Raises:
        ConfigError: at construction, as ``Monitor`` raises it for names and options
            (``UnknownBackendError``, ``BackendLoadError`` likewise); in ``start()``, the project
            given here differs from ``init_trackers``' or there is none.
    """

    name = TRACKER_NAME
    requires_logging_directory = False
    main_process_only = False

    def __init__(
        self, backends: Sequence[str | type] | str | None = None, *,
        run_name: str | None = None, **monitor_kwargs: Any,
    ) -> None:
        super().__init__()
        if "name" in monitor_kwargs:
            raise ConfigError("MonitorTracker takes the run name as run_name=..., not name=")
        self._project: str | None = monitor_kwargs.pop("project", None)
        check_arguments(backends, self._project or "project", run_name, monitor_kwargs)
        self.backends = backends
        self.run_name = run_name
        self.monitor_kwargs = monitor_kwargs
        self._runs: LazyRun | None = None
        self._warned: set[str] = set()

    @property
    def monitor(self) -> Monitor | None:
        """The run's ``Monitor`` (``None`` before ``init_trackers``; closed after
        ``end_training``)."""
        return None if self._runs is None else self._runs.last

    def start(self) -> None:
        """Start the run (called by ``Accelerator.init_trackers`` on the main process; a
        second call while the run is open does nothing).

        Raises:
            ConfigError: ``project=`` given here differs from ``init_trackers``', or neither
                ``init_trackers`` nor this tracker names a project.
        """
        call = init_trackers_call()
        project, kwargs = self._project, dict(self.monitor_kwargs)
        if call is not None:
            accelerator, given, logging_dir = call
            # init_trackers appends a tracker instance to accelerator.trackers at every call:
            # after end_training() and init_trackers() again it would be there twice, and
            # every accelerator.log() would log twice. Keep the first.
            trackers = accelerator.trackers
            repeats = [i for i, t in enumerate(trackers) if t is self][1:]
            for i in reversed(repeats):
                del trackers[i]
            if project is not None and project != given:
                raise ConfigError(
                    f"MonitorTracker(project={project!r}) but init_trackers({given!r}): a run "
                    "has one project; drop project= from MonitorTracker (the project given to "
                    "init_trackers is used) or pass the same name to both"
                )
            project = given
            if kwargs.get("log_dir") is None and logging_dir is not None:
                kwargs["log_dir"] = logging_dir
        if not project:
            raise ConfigError(
                "MonitorTracker needs a project: call accelerator.init_trackers('name'), or "
                "pass MonitorTracker(backends, project='name') when calling start() yourself"
            )
        if self._runs is None or self._runs.project != project:
            self._runs = LazyRun(self.backends, project=project, name=self.run_name,
                                 source="MonitorTracker", **kwargs)
        self._runs.monitor()

    @property
    def tracker(self) -> Monitor | None:
        """The ``Monitor`` (``None`` before ``init_trackers``); ``accelerator.get_tracker(
        "monitors", unwrap=True)`` returns it."""
        return self.monitor

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Store the config given to ``init_trackers`` (``Monitor.log_config``: sanitised,
        merged, shown where each tracker shows a run's config)."""
        self._started()
        assert self._runs is not None  # _started raised otherwise
        self._runs.log_config(values)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log ``values`` at exactly ``step`` (``None``: the next step, as ``Monitor.log``).

        Tensors and numpy scalars become floats, strings ``Text`` (accelerate's TensorBoard
        tracker writes them with ``add_text``); nested dicts are flattened with ``/``. Other
        values are skipped with one warning naming the key. ``kwargs`` (accelerate's
        per-tracker ``log_kwargs``) are not used.

        Raises:
            TypeError, ValueError: a bad ``step``, as ``Monitor.log`` raises.
            RuntimeError: called before ``init_trackers`` or after ``end_training``.
        """
        self._started().log(loggable(values, self._warned, "accelerate"), step=step)

    def finish(self) -> None:
        """Flush and close the run (``Accelerator.end_training``, on every process)."""
        if self._runs is not None:
            self._runs.close()

    def _started(self) -> Monitor:
        monitor = None if self._runs is None else self._runs.started
        if monitor is None:
            raise RuntimeError("MonitorTracker: call accelerator.init_trackers(...) before "
                               "logging (again after end_training())")
        return monitor


def init_trackers_call() -> tuple[Accelerator, str, str | None] | None:
    """``(accelerator, project_name, logging_dir)`` of the ``Accelerator.init_trackers`` call
    now running
    (``MonitorTracker.start`` and a registered tracker's constructor are called from it), read
    from its frame; ``None`` when there is none.

    accelerate hands neither value to a tracker instance (its own instance trackers ignore
    both), and has no public way to ask for them. The frame is that of a method named
    ``init_trackers`` of an ``accelerate.Accelerator`` holding a ``str`` ``project_name``: the
    signature accelerate has had since its trackers exist (1.15 tested).
    """
    frame = inspect.currentframe()
    try:
        for _ in range(8):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            found = frame.f_locals
            if (frame.f_code.co_name == "init_trackers"
                    and isinstance(found.get("self"), Accelerator)
                    and isinstance(found.get("project_name"), str)):
                accelerator = found["self"]
                logging_dir = getattr(accelerator, "logging_dir", None)
                return (accelerator, found["project_name"],
                        None if logging_dir is None else str(logging_dir))
        return None
    finally:
        del frame


class _RegisteredMonitorTracker(MonitorTracker):
    """The form accelerate builds for ``log_with="monitors"``: ``(project_name, **init_kwargs)``
    with ``init_kwargs = init_trackers(..., init_kwargs={"monitors": {...}})["monitors"]``."""

    def __init__(self, project_name: str, backends: Sequence[str | type] | str | None = None,
                 **kwargs: Any) -> None:
        if backends is None:
            raise ConfigError(
                "log_with='monitors' needs the backends: accelerator.init_trackers(project, "
                "init_kwargs={'monitors': {'backends': ['trackio', ...]}})"
            )
        kwargs.setdefault("project", project_name)
        super().__init__(backends, **kwargs)


def register() -> None:
    """Register the tracker with accelerate (``register_tracker_class``) as ``"monitors"``.

    Afterwards ``Accelerator(log_with="monitors")`` works; ``init_trackers(project_name,
    config=..., init_kwargs={"monitors": {"backends": [...], "run_name": ..., ...}})`` gives
    the project, the config and the ``MonitorTracker`` arguments (accelerate builds this
    tracker on the main process only, so its options are checked there). Call it before
    creating the ``Accelerator``; calling it again is harmless.
    """
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    if LOGGER_TYPE_TO_CLASS.get(TRACKER_NAME) is _RegisteredMonitorTracker:
        return
    register_tracker_class(_RegisteredMonitorTracker)
