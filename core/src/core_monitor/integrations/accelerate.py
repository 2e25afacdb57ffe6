"""Hugging Face accelerate: ``Accelerator(log_with=MonitorTracker([...]))`` reaches every backend.

Two forms (the tracker API is accelerate's ``accelerate.tracking.GeneralTracker``)::

    from core_monitor.integrations.accelerate import MonitorTracker
    accelerator = Accelerator(log_with=MonitorTracker(["trackio", "wandb"], project="digits"))
    accelerator.init_trackers("digits", config={"lr": 3e-4})

    from core_monitor.integrations import accelerate as monitors_accelerate
    monitors_accelerate.register()              # once, before Accelerator(...)
    accelerator = Accelerator(log_with="monitors")
    accelerator.init_trackers("digits", config={"lr": 3e-4},
                              init_kwargs={"monitors": {"backends": ["trackio", "wandb"]}})

``accelerator.log(values, step=s)`` stores every numeric value at exactly ``s`` in every backend;
``accelerator.end_training()`` closes the run. Importing this module imports accelerate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelerate.tracking import GeneralTracker, register_tracker_class

from ..errors import ConfigError
from ..monitor import Monitor
from ._common import loggable

__all__ = ["TRACKER_NAME", "MonitorTracker", "register"]

#: The name ``register()`` gives the tracker: ``Accelerator(log_with="monitors")``.
TRACKER_NAME = "monitors"


class MonitorTracker(GeneralTracker):
    """An accelerate tracker that logs through one ``core_monitor.Monitor``.

    The ``Monitor`` is created in ``start()``, which ``Accelerator.init_trackers`` calls once the
    process group exists, on every process: each validates the options alike (a misspelt one is
    the same ``ConfigError`` everywhere) and, with ``rank_zero_only=True`` (the default), only
    rank 0 writes (``main_process_only`` is ``False``: the ``Monitor`` decides by rank).

    Args:
        backends: backend names as installed (``monitors list``) or backend classes, or one name.
        run_name: the run name (``Monitor``'s ``name``); default: made up by the core.
        **monitor_kwargs: other ``Monitor`` keyword arguments: ``project`` (``str``; needed in
            this form, since accelerate does not tell a tracker instance the project given to
            ``init_trackers``), ``log_dir``, ``config``, ``strict``, ``rank_zero_only`` and one
            options mapping per backend (``wandb={"mode": "offline"}``).

    Raises:
        ConfigError: in ``start()``, as ``Monitor`` raises it (no ``project``, unknown backend,
            unknown option); ``UnknownBackendError``/``BackendLoadError`` likewise.
    """

    name = TRACKER_NAME
    requires_logging_directory = False
    main_process_only = False

    def __init__(
        self, backends: Sequence[str | type] | str, *, run_name: str | None = None,
        **monitor_kwargs: Any,
    ) -> None:
        super().__init__()
        if "name" in monitor_kwargs:
            raise ConfigError("MonitorTracker takes the run name as run_name=..., not name=")
        self.backends = backends
        self.run_name = run_name
        self.monitor_kwargs = monitor_kwargs
        self.monitor: Monitor | None = None
        self._warned: set[str] = set()

    def start(self) -> None:
        """Create the ``Monitor`` (called by ``Accelerator.init_trackers``; a second call does
        nothing)."""
        if self.monitor is not None:
            return
        if not self.monitor_kwargs.get("project"):
            raise ConfigError(
                "MonitorTracker needs project=...: MonitorTracker(backends, project='name'), or "
                "register() and Accelerator(log_with='monitors'), which takes the project given "
                "to init_trackers()"
            )
        self.monitor = Monitor(self.backends, name=self.run_name, **self.monitor_kwargs)

    @property
    def tracker(self) -> Monitor | None:
        """The ``Monitor`` (``None`` before ``init_trackers``); ``accelerator.get_tracker(
        "monitors", unwrap=True)`` returns it."""
        return self.monitor

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Store the config given to ``init_trackers`` (``Monitor.log_config``: sanitised,
        merged, shown where each tracker shows a run's config)."""
        self._started().log_config(values)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log ``values`` at exactly ``step`` (``None``: the next step, as ``Monitor.log``).

        Tensors and numpy scalars become floats; nested dicts are flattened with ``/``. A value
        that is not a number (accelerate allows ``str``) is skipped with one warning naming its
        key. ``kwargs`` (accelerate's per-tracker ``log_kwargs``) are not used.

        Raises:
            TypeError, ValueError: a bad ``step``, as ``Monitor.log`` raises.
            RuntimeError: called before ``init_trackers`` or after ``end_training``.
        """
        monitor = self._started()
        monitor.log(loggable(values, self._warned, "accelerate", text=False), step=step)

    def finish(self) -> None:
        """Flush and close the run (``Accelerator.end_training``)."""
        if self.monitor is not None:
            self.monitor.close()

    def _started(self) -> Monitor:
        if self.monitor is None:
            raise RuntimeError("MonitorTracker: call accelerator.init_trackers(...) before logging")
        return self.monitor


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
    the project, the config and the ``MonitorTracker`` arguments. Call it before creating the
    ``Accelerator``; calling it again is harmless.
    """
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    if LOGGER_TYPE_TO_CLASS.get(TRACKER_NAME) is _RegisteredMonitorTracker:
        return
    register_tracker_class(_RegisteredMonitorTracker)
