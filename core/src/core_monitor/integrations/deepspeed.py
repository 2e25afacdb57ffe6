"""DeepSpeed: a config section naming any installed backend reaches it, through ``Monitor``.

::

    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config, ...)
    monitor = attach(engine)              # engine.monitor now logs through core_monitor
    monitor.monitor.log({"train/loss": loss.item()}, step=engine.global_samples)

Backends come from the DeepSpeed config (``engine.config``, which keeps unknown top-level
sections), in DeepSpeed's own monitor convention (``deepspeed.monitor.config``): a top-level
section named after an installed backend with ``"enabled": true``::

    {"trackio": {"enabled": true, "project": "llm"},
     "tensorboard": {"enabled": true, "output_path": "runs", "job_name": "baseline"},
     "wandb": {"enabled": true, "project": "llm", "group": "g", "team": "my-team"}}

or an ``"experiment_monitors"`` section in ``Monitor.from_config`` layout (``backends``,
``project``, ``name``, ``log_dir``, one section per backend). In a backend's section, the keys
``project``, ``name``, ``log_dir`` go to ``Monitor`` and the others are that backend's options;
DeepSpeed's own keys are mapped: ``output_path`` -> ``log_dir``, ``job_name`` -> ``name``
(``tensorboard``), ``team`` -> the wandb option ``entity`` (``wandb``). Without any project the
project is ``"deepspeed"`` (DeepSpeed's wandb default). ``csv_monitor`` and ``comet`` have no
backend here and keep going to DeepSpeed's own writers.

Importing this module imports ``deepspeed``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import deepspeed  # noqa: F401  (the integration's framework: imported with this module)
from deepspeed.monitor.monitor import Monitor as _DeepSpeedMonitorBase

from ..errors import ConfigError
from ..monitor import Monitor
from ..settings import MONITOR_KEYWORDS, backend_sections, load_monitor_config

__all__ = ["SECTION", "DeepSpeedMonitor", "attach", "monitor_from_ds_config"]

#: The DeepSpeed config section in ``Monitor.from_config`` layout.
SECTION = "experiment_monitors"
#: DeepSpeed's own monitor sections this project has no backend for: left to DeepSpeed.
DEEPSPEED_ONLY = ("csv_monitor", "comet")
#: Keys of a backend section that are ``Monitor`` keywords, not backend options.
_MONITOR_LEVEL = ("project", "name", "log_dir")
#: DeepSpeed's names for ``Monitor`` keywords and backend options, per section.
_RENAMES = {
    "tensorboard": {"output_path": "log_dir", "job_name": "name"},
    "wandb": {"team": "entity"},
}
_DEFAULT_PROJECT = "deepspeed"


def _enabled_sections(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The sections of installed backends with ``"enabled": true``, their options (the same
    reading as ``Monitor.from_config``'s sections)."""
    sections = backend_sections(config, origin="DeepSpeed config")
    return {name: sections.options[name] for name in sections.enabled}


def monitor_arguments(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``Monitor`` keyword arguments (with ``backends``) a DeepSpeed config asks for.

    Returns ``None`` when no section enables an installed backend (nothing to take over).
    Reads only metadata: no plugin is imported.

    Raises:
        ConfigError: two sections give different ``project``/``name``/``log_dir``; a backend
            is configured both ways; the ``experiment_monitors`` section is malformed.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"a DeepSpeed config is a mapping, not {type(config).__name__}")
    kwargs: dict[str, Any] = {}
    origin: dict[str, str] = {}
    backends: list[str] = []

    def put(key: str, value: Any, where: str) -> None:
        if key in kwargs and kwargs[key] != value:
            raise ConfigError(
                f"DeepSpeed config: {where} sets {key}={value!r} but {origin[key]} sets "
                f"{key}={kwargs[key]!r}; one run has one {key}: make them equal or drop one"
            )
        kwargs[key], origin[key] = value, where

    if SECTION in config:
        section = load_monitor_config(config[SECTION]) if isinstance(
            config[SECTION], Mapping) else None
        if section is None:
            raise ConfigError(f"DeepSpeed config: {SECTION!r} must be a mapping in "
                              "Monitor.from_config layout, e.g. {'backends': ['trackio'], "
                              "'project': 'llm'}")
        for key, value in section.items():
            if key == "backends":
                backends.extend(value)
            else:
                put(key, value, f"section {SECTION!r}")
    for name, section in _enabled_sections(config).items():
        if name in backends:
            raise ConfigError(
                f"DeepSpeed config: backend {name!r} is enabled by its own section and listed "
                f"in {SECTION!r}; configure it in one place"
            )
        backends.append(name)
        options = {}
        for key, value in section.items():
            key = _RENAMES.get(name, {}).get(key, key)
            if key in _MONITOR_LEVEL:
                put(key, value, f"section {name!r}")
            else:
                options[key] = value
        if options:
            put(name, options, f"section {name!r}")
    if not backends:
        return None
    kwargs.setdefault("project", _DEFAULT_PROJECT)
    return {"backends": backends, **kwargs}


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
    arguments = monitor_arguments(_as_mapping(config))
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
        enabled: ``True`` when the config enables a backend here or a DeepSpeed-only writer
            (``csv_monitor``, ``comet``). Decided from the config alone, so it is the same on
            every rank (DeepSpeed's pipeline engine runs a broadcast when it is ``True``).
        monitor: the ``core_monitor.Monitor`` (``None`` when no backend here is enabled); log
            your own scalars with it, e.g. at ``engine.global_samples``. It writes on rank 0
            only (unless the config sets ``rank_zero_only = false``).
        deepspeed_monitor: the engine's own ``MonitorMaster``, still writing ``csv_monitor``/
            ``comet`` (its TensorBoard/wandb writers removed), or ``None``.
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

    def close(self) -> None:
        """Flush and close the ``Monitor`` (it is also closed at exit)."""
        if self.monitor is not None:
            self.monitor.close()


def attach(engine: Any, config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
           **overrides: Any) -> DeepSpeedMonitor:
    """Make ``engine`` log through ``core_monitor``: replaces ``engine.monitor``.

    Call it on every rank right after ``deepspeed.initialize``. DeepSpeed opened its own
    TensorBoard/wandb writers in ``initialize`` for the ``tensorboard``/``wandb`` sections; for
    a section taken over here, that writer is closed before it logs anything (DeepSpeed's
    TensorBoard writer leaves one event file without scalars in ``<output_path>/<job_name>``;
    its wandb run is finished empty). To avoid them, configure those backends in the
    ``experiment_monitors`` section instead.

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
    config = _as_mapping(config)
    arguments = monitor_arguments(config)  # checked before DeepSpeed's writers are touched
    taken = set(arguments["backends"] if arguments else ()) | (
        set(_RENAMES) & set(_enabled_sections(config)))
    # DeepSpeed's own writers go first, so that e.g. its wandb run is finished before the
    # wandb backend starts the run of this project.
    _close_taken_over(getattr(engine, "monitor", None), taken)
    monitor = monitor_from_ds_config(config, **overrides)
    # csv_monitor/comet stay with the engine's own MonitorMaster, minus the writers taken over.
    own = getattr(engine, "monitor", None)
    remaining = [k for k in DEEPSPEED_ONLY
                 if isinstance(config.get(k), Mapping) and config[k].get("enabled")]
    deepspeed_monitor = own if remaining and own is not None else None
    wrapper = DeepSpeedMonitor(monitor, deepspeed_monitor)
    engine.monitor = wrapper
    return wrapper


def _close_taken_over(own: Any, taken: set[str]) -> None:
    """Close DeepSpeed's own TensorBoard/wandb writers of sections this project took over."""
    if own is None:
        return
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


def _as_mapping(config: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    if isinstance(config, Mapping):
        return config
    if isinstance(config, (str, os.PathLike)) and Path(config).is_file():
        text = Path(config).read_text(encoding="utf-8")
        try:
            import hjson  # DeepSpeed's own config reader (a DeepSpeed dependency)

            return dict(hjson.loads(text))
        except ImportError:
            return json.loads(text)
    raise ConfigError(f"a DeepSpeed config is a mapping or a JSON file path, not {config!r:.80}")
