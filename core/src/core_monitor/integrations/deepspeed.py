"""DeepSpeed: every monitor section of a DeepSpeed config reaches a backend, through ``Monitor``.

::

    from core_monitor.integrations.deepspeed import initialize
    engine, optimizer, _, _ = initialize(model=model, config=ds_config, ...)  # was deepspeed.
    engine.monitor.monitor.log({"train/loss": loss.item()}, step=engine.global_samples)

``initialize`` is ``deepspeed.initialize`` with the monitor sections this project takes over
switched off in the config DeepSpeed sees (so DeepSpeed opens none of its own writers for
them), then ``attach``. ``attach(engine)`` after ``deepspeed.initialize`` does the same for an
engine already made, closing the writers DeepSpeed opened.

Backends come from the DeepSpeed config, in DeepSpeed's own monitor convention
(``deepspeed.monitor.config``): a top-level section named after an installed backend, enabled
(``"enabled"`` read as DeepSpeed reads it: ``true``, ``1``, ``"true"``, ...)::

    {"tensorboard": {"enabled": true, "output_path": "runs", "job_name": "baseline"},
     "wandb": {"enabled": true, "project": "llm", "group": "g", "team": "my-team"},
     "csv_monitor": {"enabled": true, "output_path": "runs", "job_name": "baseline"},
     "comet": {"enabled": true, "online": false, "workspace": "my-team"},
     "trackio": {"enabled": true, "project": "llm", "log_dir": "runs"}}

DeepSpeed's own four sections are taken over by the backend of this project each one is for
(``tensorboard``, ``wandb``, ``csv`` for ``csv_monitor``, ``comet``) when it is installed, and
mean what they mean to DeepSpeed, with DeepSpeed's defaults: TensorBoard's event files and the
CSV files go to ``<output_path>/<job_name>`` (default ``./DeepSpeedJobName``), the CSV files in
DeepSpeed's one-file-per-tag layout; wandb's ``team`` is the wandb entity; Comet's keys are
read as DeepSpeed's ``CometConfig`` reads them (``_deepspeed_sections``). The ``tensorboard``
and ``wandb`` backends declare how they read DeepSpeed's keys (their class's
``from_deepspeed``), so a third-party backend can do the same for a section of its own name.
DeepSpeed refuses keys of its own four sections that it does not know (``Extra inputs are not
permitted``): give those backends' other options, and any other
``Monitor`` setting, in an ``"experiment_monitors"`` section in ``Monitor.from_config`` layout
(``backends``, ``project``, ``name``, ``log_dir``, ``config``, one section per backend), which
DeepSpeed leaves alone. In a section named after a backend of this project that DeepSpeed does
not know (``trackio``), any key is allowed: ``project``, ``name``, ``log_dir`` go to
``Monitor``, the others are the backend's options. Without any project the project is
``"deepspeed"`` (DeepSpeed's wandb default). A section of DeepSpeed's whose backend is not
installed keeps going to DeepSpeed's own writer.

Importing this module imports ``deepspeed``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from typing import Any

import deepspeed
from deepspeed.monitor.monitor import Monitor as _DeepSpeedMonitorBase

from ..errors import ConfigError
from ..monitor import Monitor
from ..settings import MONITOR_KEYWORDS
from ._deepspeed_config import (
    SECTION,
    as_mapping,
    deepspeed_bool,
    monitor_arguments,
    taken_over,
    without_taken_over,
)
from ._deepspeed_sections import SECTIONS
from ._runs import close_finished, close_when_collected

__all__ = ["SECTION", "DeepSpeedMonitor", "attach", "initialize", "monitor_arguments",
           "monitor_from_ds_config"]


def monitor_from_ds_config(config: Mapping[str, Any] | str | os.PathLike[str],
                           **overrides: Any) -> Monitor | None:
    """A ``Monitor`` for the backends a DeepSpeed config enables, for code with its own loop.

    Args:
        config: the DeepSpeed config, a mapping or the path of its JSON file.
        **overrides: ``Monitor`` keyword arguments that win over the config (``name=...``).

    Returns:
        The ``Monitor`` (``None`` when the config enables no installed backend).

    Raises:
        ConfigError: as ``monitor_arguments`` and ``Monitor`` raise it.
    """
    arguments = monitor_arguments(as_mapping(config))
    if arguments is None:
        return None
    arguments.update(overrides)
    backends = arguments.pop("backends")
    unknown = sorted(set(arguments) - set(MONITOR_KEYWORDS) - set(backends))
    if unknown:
        raise ConfigError(f"DeepSpeed config: unknown monitor keys {unknown}")
    return Monitor(backends, **arguments)


class DeepSpeedMonitor(_DeepSpeedMonitorBase):
    """Replaces ``engine.monitor``: DeepSpeed's events go to ``Monitor.write_events`` unchanged.

    Attributes:
        enabled: ``True`` when the config enables a backend here or a section left to
            DeepSpeed's own writer. Decided from the config alone, so it is the same on
            every rank (DeepSpeed's pipeline engine runs a broadcast when it is ``True``).
        monitor: the ``core_monitor.Monitor`` (``None`` when no backend here is enabled); log
            your own scalars with it, e.g. at ``engine.global_samples``. It writes on rank 0
            only (unless the config sets ``rank_zero_only = false``).
        deepspeed_monitor: the engine's own ``MonitorMaster``, still writing the sections whose
            backend is not installed here (the writers of the others removed), or ``None``.
    """

    def __init__(self, monitor: Monitor | None, deepspeed_monitor: Any | None) -> None:
        self.monitor_config = None
        self.monitor = monitor
        self.deepspeed_monitor = deepspeed_monitor
        self.enabled = monitor is not None or (
            deepspeed_monitor is not None and bool(deepspeed_monitor.enabled))

    def write_events(self, event_list: Iterable[tuple[str, Any, int]]) -> None:
        """Log DeepSpeed's ``(tag, value, global_samples)`` events, each at its own step."""
        events = list(event_list)
        if self.monitor is not None:
            self.monitor.write_events(events)
        if self.deepspeed_monitor is not None:
            self.deepspeed_monitor.write_events(events)

    def update_config(self, config: Mapping[str, Any]) -> None:
        """Store ``config`` (a flat mapping, e.g. ZeRO stage and parallel sizes) as the run's
        config in every backend (``Monitor.log_config``: a key given again takes the new
        value): the ``csv`` backend's ``deepspeed_config.csv``, Comet's parameters, wandb's
        config, TensorBoard's HParams. The name and meaning of the ``MonitorMaster.update_config``
        proposed to DeepSpeed (PR #8401, not in a DeepSpeed release): a DeepSpeed that calls it
        reaches the backends here. Sections left to DeepSpeed get it too, when their
        ``MonitorMaster`` has ``update_config``.

        Raises:
            TypeError: ``config`` is not a mapping (``Monitor.log_config``).
        """
        if self.monitor is not None:
            self.monitor.log_config(config)
        own = getattr(self.deepspeed_monitor, "update_config", None)
        if own is not None:
            own(config)

    def close(self) -> None:
        """Flush and close the ``Monitor``. Also closed at exit, or, once this object is
        garbage-collected (its engine dropped), when the next ``attach``/``initialize`` or
        another integration starts a run (see ``core_monitor.integrations._runs``)."""
        if self.monitor is not None:
            self.monitor.close()


def attach(engine: Any, config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
           **overrides: Any) -> DeepSpeedMonitor:
    """Make ``engine`` log through ``core_monitor``: replaces ``engine.monitor``.

    Call it on every rank right after ``deepspeed.initialize``. DeepSpeed opened its own
    writers in ``initialize`` for its enabled sections; for a section taken over here, that
    writer is closed before it logs anything (DeepSpeed's TensorBoard writer leaves one event
    file without scalars in ``<output_path>/<job_name>``; its wandb run, online, an empty run in
    your project; its CSV writer an empty ``<output_path>/<job_name>`` folder; its Comet
    experiment an empty experiment). ``initialize`` instead keeps DeepSpeed from opening them.

    Args:
        engine: the ``DeepSpeedEngine`` from ``deepspeed.initialize``.
        config: the DeepSpeed config (mapping or JSON path); default ``engine.config``.
        **overrides: ``Monitor`` keyword arguments that win over the config.

    Returns:
        The ``DeepSpeedMonitor`` now at ``engine.monitor``.

    Raises:
        ConfigError: as ``monitor_from_ds_config``; or ``engine.config`` is neither a mapping
            nor a JSON file path (pass ``config=``).
    """
    if config is None:
        config = getattr(engine, "config", None)
        if config is None:
            raise ConfigError("attach(engine): the engine has no config; pass "
                              "attach(engine, config=<the DeepSpeed config dict or path>)")
    config = as_mapping(config)
    arguments = monitor_arguments(config)  # checked before DeepSpeed's writers are touched
    # DeepSpeed's own writers go first, so that e.g. its wandb run is finished before the
    # wandb backend starts the run of this project.
    _close_taken_over(getattr(engine, "monitor", None), taken_over(arguments))
    close_finished()  # an earlier engine's run whose DeepSpeedMonitor was collected
    monitor = monitor_from_ds_config(config, **overrides)
    # Sections whose backend is not installed stay with the engine's own MonitorMaster, minus
    # the writers taken over.
    own = getattr(engine, "monitor", None)
    taken = taken_over(arguments)
    remaining = [k for k in SECTIONS if k not in taken and isinstance(config.get(k), Mapping)
                 and deepspeed_bool(k, config[k].get("enabled", False))]
    deepspeed_monitor = own if remaining and own is not None else None
    wrapper = DeepSpeedMonitor(monitor, deepspeed_monitor)
    if monitor is not None:  # a sweep of engines keeps one run open (integrations._runs)
        close_when_collected(wrapper, monitor)
    engine.monitor = wrapper
    return wrapper


def initialize(*args: Any, **kwargs: Any) -> tuple[Any, Any, Any, Any]:
    """``deepspeed.initialize`` whose engine logs through ``core_monitor``: a drop-in.

    Takes exactly ``deepspeed.initialize``'s arguments. The DeepSpeed config (``config=``,
    ``config_params=`` or ``args.deepspeed_config``, a mapping or a JSON path) is handed to
    DeepSpeed with the sections this project takes over switched off (``"enabled": false``),
    so DeepSpeed opens no writer for them (no empty event file, wandb run, CSV folder or Comet
    experiment); then ``attach(engine, config=<the config as given>)`` sets
    ``engine.monitor`` (a ``DeepSpeedMonitor``: ``engine.monitor.monitor`` is the
    ``Monitor``). Call it on every rank, as ``deepspeed.initialize``.

    Returns:
        ``(engine, optimizer, training_dataloader, lr_scheduler)``, as ``deepspeed.initialize``.

    Raises:
        ConfigError: as ``attach``, before DeepSpeed starts; DeepSpeed's own errors as it raises
            them (e.g. no config at all).
    """
    kwargs = dict(kwargs)
    ds_args: Any = args[0] if args else kwargs.get("args")
    if kwargs.get("config") is not None:
        source = kwargs["config"]
    elif kwargs.get("config_params") is not None:
        source = kwargs.pop("config_params")
    elif getattr(ds_args, "deepspeed_config", None) is not None:
        source = ds_args.deepspeed_config
        ds_args = copy.copy(ds_args)
        ds_args.deepspeed_config = None  # DeepSpeed takes config= instead, never both
        if args:
            args = (ds_args, *args[1:])
        else:
            kwargs["args"] = ds_args
    else:  # no config: DeepSpeed raises its own error
        return deepspeed.initialize(*args, **kwargs)
    config = as_mapping(source)
    arguments = monitor_arguments(config)  # a ConfigError here, before DeepSpeed starts
    kwargs["config"] = without_taken_over(config, taken_over(arguments))
    engine, optimizer, dataloader, scheduler = deepspeed.initialize(*args, **kwargs)
    attach(engine, config=config)
    return engine, optimizer, dataloader, scheduler


def _close_taken_over(own: Any, taken: set[str]) -> None:
    """Close DeepSpeed's own writers of sections this project took over."""
    if own is None:
        return
    if "csv_monitor" in taken:  # its files are opened per event: nothing is open yet
        own.csv_monitor = None
    comet = getattr(own, "comet_monitor", None)
    if "comet" in taken and comet is not None:
        if getattr(comet, "experiment", None) is not None:
            comet.experiment.end()
        own.comet_monitor = None
    writer = getattr(own, "tb_monitor", None)
    if "tensorboard" in taken and writer is not None:
        if getattr(writer, "summary_writer", None) is not None:
            writer.summary_writer.close()
        own.tb_monitor = None
    if "wandb" in taken and getattr(own, "wandb_monitor", None) is not None:
        import wandb

        if wandb.run is not None:
            wandb.run.finish()
        own.wandb_monitor = None
