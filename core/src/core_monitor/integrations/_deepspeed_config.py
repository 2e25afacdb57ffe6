"""Reading a DeepSpeed config into ``Monitor`` arguments (``core_monitor.integrations.deepspeed``).

DeepSpeed's monitor convention (``deepspeed.monitor.config``): a top-level section per tracker
with ``"enabled"``. A section named after an installed backend is that backend's, and so is
each of DeepSpeed's own four sections whose backend here is installed (``csv_monitor`` is the
``csv`` backend's: ``_deepspeed_sections.SECTIONS``). The backend's class may declare how to
read DeepSpeed's keys for it (``from_deepspeed``, see ``section_options``); DeepSpeed's
``csv_monitor`` and ``comet`` sections are read by ``_deepspeed_sections``. Imports no
framework: ``pydantic`` (a DeepSpeed dependency) is imported when an ``enabled`` value is not
a ``bool``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import discovery
from ..errors import ConfigError
from ..settings import ENABLED, MONITOR_KEYWORDS, backend_sections, load_monitor_config
from ._deepspeed_sections import READERS, SECTIONS, Read

#: The DeepSpeed config section in ``Monitor.from_config`` layout.
SECTION = "experiment_monitors"
#: Keys of a backend section that are ``Monitor`` keywords, not backend options.
MONITOR_LEVEL = ("project", "name", "log_dir")
#: The project when the config names none: DeepSpeed's wandb default.
DEFAULT_PROJECT = "deepspeed"


def as_mapping(config: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """The DeepSpeed config as a mapping: given, or read from a JSON (hjson) file.

    Raises:
        ConfigError: neither a mapping nor the path of a file.
    """
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


def deepspeed_bool(section: str, value: Any) -> bool:
    """``value`` read as DeepSpeed reads ``"enabled"``: pydantic's ``bool`` (``true``/``1``/
    ``"true"``/``"yes"``/``"on"`` and their opposites), since DeepSpeed's config models are
    pydantic models.

    Raises:
        ConfigError: a value DeepSpeed would refuse too, naming the section.
    """
    if isinstance(value, bool):
        return value
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        raise ConfigError(
            f"DeepSpeed config: section {section!r} has \"enabled\": {value!r}, which neither "
            "DeepSpeed nor this project reads as a boolean; use true or false"
        ) from None


def section_backend(key: str) -> str:
    """The backend a top-level section of a DeepSpeed config is for: DeepSpeed's
    ``csv_monitor`` is ``csv``'s; any other section is the backend of its name."""
    return SECTIONS.get(key, key)


def enabled_sections(config: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The enabled sections of installed backends: section -> (backend, its keys without
    ``enabled``), in the config's order; ``"enabled"`` read as DeepSpeed reads it.

    Raises:
        ConfigError: two enabled sections are for one backend (``csv`` and ``csv_monitor``).
    """
    installed = discovery.installed_backends()
    keys = [key for key in config if section_backend(key) in installed]
    normalised = {
        key: ({**value, ENABLED: deepspeed_bool(key, value[ENABLED])}
              if isinstance(value, Mapping) and ENABLED in value else value)
        for key, value in config.items() if key in keys
    }
    sections = backend_sections(normalised, names=keys, origin="DeepSpeed config")
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for key in sections.enabled:
        backend = section_backend(key)
        other = next((k for k, (b, _) in found.items() if b == backend), None)
        if other is not None:
            raise ConfigError(f"DeepSpeed config: sections {other!r} and {key!r} both enable "
                              f"backend {backend!r}; enable it in one of them")
        found[key] = (backend, sections.options[key])
    return found


def section_options(key: str, section: Mapping[str, Any]) -> Read:
    """The section ``key`` of a DeepSpeed config (``enabled`` removed) in this project's terms:
    ``(Monitor keyword arguments, the backend's options)``.

    DeepSpeed's ``csv_monitor`` and ``comet`` sections are read by
    ``_deepspeed_sections.READERS``. Any other section is read by its backend's class, with an
    optional classmethod ``from_deepspeed(section) -> mapping`` (the wandb backend turns
    DeepSpeed's ``team`` into its ``entity``; the TensorBoard backend ``output_path``/
    ``job_name`` into its exact folder), else taken as it is; its ``project``, ``name`` and
    ``log_dir`` are ``Monitor``'s, the rest the backend's options. Imports the plugin module of
    a backend with no reader here, no SDK.

    Raises:
        BackendLoadError: the plugin module fails to import.
        ConfigError: a reader refused the section.
    """
    if key in READERS:
        return READERS[key](section)
    options = dict(section)
    infos = discovery.installed_backends().get(section_backend(key), [])
    if len(infos) == 1:  # else a conflict: Monitor reports it
        reader = getattr(discovery.load_backend(infos[0]), "from_deepspeed", None)
        if reader is not None:
            options = dict(reader(options))
    monitor = {k: options.pop(k) for k in MONITOR_LEVEL if k in options}
    return monitor, options


def monitor_arguments(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``Monitor`` keyword arguments (with ``backends``) a DeepSpeed config asks for.

    Returns ``None`` when no section enables an installed backend (nothing to take over).
    Imports the plugin modules of the enabled sections (``section_options``), no SDK.

    Raises:
        ConfigError: two sections give different ``project``/``name``/``log_dir``; a backend
            is configured both ways; the ``experiment_monitors`` section is malformed; an
            ``"enabled"`` DeepSpeed would refuse.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"a DeepSpeed config is a mapping, not {type(config).__name__}")
    kwargs: dict[str, Any] = {}
    origin: dict[str, str] = {}
    backends: list[str] = []

    def put(key: str, value: Any, where: str) -> None:
        if (key in kwargs and key not in MONITOR_KEYWORDS and isinstance(value, Mapping)
                and isinstance(kwargs[key], Mapping)):  # one backend's options, two places
            merged = dict(kwargs[key])
            for option, given in value.items():
                if option in merged and merged[option] != given:
                    raise ConfigError(
                        f"DeepSpeed config: {where} sets {key}'s option {option}={given!r} but "
                        f"{origin[key]} sets {option}={merged[option]!r}; give it in one place"
                    )
                merged[option] = given
            kwargs[key], origin[key] = merged, f"{origin[key]} and {where}"
            return
        if key in kwargs and kwargs[key] != value:
            raise ConfigError(
                f"DeepSpeed config: {where} sets {key}={value!r} but {origin[key]} sets "
                f"{key}={kwargs[key]!r}; one run has one {key}: make them equal or drop one"
            )
        kwargs[key], origin[key] = value, where

    if SECTION in config:
        raw = config[SECTION]
        # project: optional here (a section holding only options); then "deepspeed" or another
        # section's project
        section = load_monitor_config(raw, project=raw.get("project")) if isinstance(
            raw, Mapping) else None
        if section is None:
            raise ConfigError(f"DeepSpeed config: {SECTION!r} must be a mapping in "
                              "Monitor.from_config layout, e.g. {'backends': ['trackio'], "
                              "'project': 'llm'}")
        for key, value in section.items():
            if key == "backends":
                backends.extend(value)
            elif value is not None or key != "project":
                put(key, value, f"section {SECTION!r}")
    listed = list(backends)
    for key, (name, section) in enabled_sections(config).items():
        if name in listed:
            raise ConfigError(
                f"DeepSpeed config: backend {name!r} is enabled by section {key!r} and listed "
                f"in {SECTION!r}; configure it in one place"
            )
        backends.append(name)
        monitor, options = section_options(key, section)
        for option, value in monitor.items():
            put(option, value, f"section {key!r}")
        if options:
            put(name, options, f"section {key!r}")
    if not backends:
        return None
    kwargs.setdefault("project", DEFAULT_PROJECT)
    return {"backends": backends, **kwargs}


def taken_over(arguments: Mapping[str, Any] | None) -> set[str]:
    """DeepSpeed's own sections (``tensorboard``, ``wandb``, ``csv_monitor``, ``comet``) whose
    backend here runs: enabled and installed, or listed in ``experiment_monitors``."""
    chosen = set(arguments["backends"] if arguments else ())
    return {key for key, name in SECTIONS.items() if name in chosen}


def without_taken_over(config: Mapping[str, Any], taken: set[str]) -> dict[str, Any]:
    """A copy of ``config`` for DeepSpeed itself: the taken-over sections disabled, so
    ``deepspeed.initialize`` opens no writer for them (their keys are DeepSpeed's, kept)."""
    return {key: ({**value, ENABLED: False} if key in taken and isinstance(value, Mapping)
                  else value)
            for key, value in config.items()}
