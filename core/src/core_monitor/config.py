"""Hyperparameter sanitising and monitor configuration files.

``sanitize_config`` turns whatever a training script calls its config (dataclasses, nested dicts,
``argparse.Namespace``, paths, enums, numpy values, arbitrary objects) into a flat mapping every
backend can store. ``load_monitor_config`` reads the ``Monitor.from_config`` format.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath
from types import MappingProxyType, SimpleNamespace
from typing import Any

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: Separator joining nested config keys: ``{"optimizer": {"lr": 1}}`` -> ``"optimizer.lr"``.
#: A dot, as Hydra/OmegaConf and the wandb UI show nested config, which keeps config keys
#: visibly apart from metric tags (joined with ``/``).
CONFIG_SEP = "."

def sanitize_config(config: Any) -> Mapping[str, Any]:
    """Return ``config`` as a flat, read-only, JSON-safe mapping. Never raises on odd values.

    Rules, applied recursively:

    * mappings, dataclass instances, ``argparse.Namespace`` and ``types.SimpleNamespace`` are
      flattened, keys joined with ``.`` (``CONFIG_SEP``); non-``str`` keys become ``str(key)``;
    * ``None``, ``bool``, ``int``, ``str`` and finite ``float`` become those plain Python types
      (so ``numpy.float64`` and ``numpy.str_`` too); NaN and +/-inf become the strings ``"nan"``,
      ``"inf"``, ``"-inf"`` (JSON has no such numbers);
    * numpy scalars and arrays, and tensors, become Python values (through ``.tolist()``);
    * ``enum.Enum`` members become their ``name``; ``pathlib`` paths become ``str``;
    * lists, tuples and sets become lists of JSON-safe values, containers inside them
      serialised as JSON text;
    * a container that contains itself becomes ``"<cycle>"`` where it comes round again;
    * anything else becomes ``repr(value)`` (or ``<TypeName object>`` if that raises).

    Args:
        config: a mapping, a dataclass instance, a namespace, or ``None``.
    """
    flat: dict[str, Any] = {}
    root = _as_mapping(config)
    if root is not None:
        _flatten_into(flat, root, "", frozenset({id(config)}))
    elif config is not None:
        flat["config"] = _leaf(config, frozenset())
    return MappingProxyType(flat)


_CYCLE = "<cycle>"


def _as_mapping(value: Any) -> Mapping[Any, Any] | None:
    if isinstance(value, Mapping):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (argparse.Namespace, SimpleNamespace)):
        return vars(value)
    return None


def _flatten_into(
    flat: dict[str, Any], mapping: Mapping[Any, Any], prefix: str, seen: frozenset[int]
) -> None:
    for key, value in mapping.items():
        name = prefix + (key if isinstance(key, str) else _safe_repr(key, str))
        nested = _as_mapping(value)
        if nested is None:
            flat[name] = _leaf(value, seen)
        elif id(value) in seen:
            flat[name] = _CYCLE
        elif not nested:
            flat[name] = {}
        else:
            _flatten_into(flat, nested, name + CONFIG_SEP, seen | {id(value)})


def _leaf(value: Any, seen: frozenset[int]) -> Any:
    if value is None or isinstance(value, bool):
        return None if value is None else bool(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(float(value))
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        if id(value) in seen:
            return _CYCLE
        items = sorted(value, key=_safe_repr) if isinstance(value, (set, frozenset)) else value
        return [_in_list(item, seen | {id(value)}) for item in items]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        try:
            converted = tolist()
        except Exception:
            return _safe_repr(value)
        if converted is not value:
            return _leaf(converted, seen)
    return _safe_repr(value)


def _in_list(item: Any, seen: frozenset[int]) -> Any:
    mapping = _as_mapping(item)
    if mapping is None:
        leaf = _leaf(item, seen)
    elif id(item) in seen:
        return _CYCLE
    else:
        leaf = {}
        _flatten_into(leaf, mapping, "", seen | {id(item)})
    return json.dumps(leaf, sort_keys=True) if isinstance(leaf, (list, dict)) else leaf


def _safe_repr(value: Any, to_text: Any = repr) -> str:
    try:
        return str(to_text(value))
    except Exception:
        return f"<{type(value).__qualname__} object>"


#: Top-level keys of a monitor configuration file, mapped to ``Monitor`` keyword arguments.
MONITOR_KEYS = ("backends", "project", "name", "config", "log_dir", "strict", "rank_zero_only")


def load_monitor_config(source: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """Read a monitor configuration and return ``Monitor`` keyword arguments.

    The format (TOML shown; JSON has the same shape)::

        backends = ["trackio", "tensorboard"]   # required
        project = "digits"                      # required
        name = "run-1"                          # optional
        log_dir = "runs"                        # optional, relative to the current directory
        strict = false                          # optional
        rank_zero_only = true                   # optional
        [config]                                # optional: hyperparameters
        lr = 3e-4
        [tensorboard]                           # optional: options of one selected backend
        flush_secs = 5

    Args:
        source: a mapping of that shape, or the path of a ``.toml`` or ``.json`` file.

    Raises:
        ConfigError: the file is missing, cannot be parsed, or has an unknown key or a section
            for a backend that is not selected; the message names the key and the accepted ones.
    """
    if isinstance(source, Mapping):
        data: Mapping[str, Any] = source
        origin = "monitor config"
    else:
        path = Path(source)
        origin = str(path)
        data = _read_file(path)
    if "backends" not in data or "project" not in data:
        missing = [k for k in ("backends", "project") if k not in data]
        raise ConfigError(f"{origin}: missing required key(s) {missing}; add e.g. "
                          'backends = ["trackio"] and project = "my-project"')
    backends = data["backends"]
    if isinstance(backends, str) or not isinstance(backends, list) or not all(
        isinstance(b, str) for b in backends
    ):
        raise ConfigError(f"{origin}: backends={backends!r} must be a list of backend names, "
                          'e.g. backends = ["trackio", "tensorboard"]')
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in MONITOR_KEYS:
            kwargs[key] = value
        elif key in backends:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{origin}: [{key}] must be a table of {key}'s options, "
                                  f"not {value!r}")
            kwargs[key] = dict(value)
        else:
            accepted = ", ".join([*MONITOR_KEYS, *(f"[{b}]" for b in backends)])
            raise ConfigError(
                f"{origin}: unknown key {key!r}. Accepted keys: {accepted} (a backend's options "
                "go in a section named after it, and only for a backend listed in backends)"
            )
    return kwargs


def _read_file(path: Path) -> Mapping[str, Any]:
    if path.suffix not in (".toml", ".json"):
        raise ConfigError(f"monitor config {path} must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read monitor config {path}: {error}") from error
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot parse monitor config {path}: {error}") from error
    if not isinstance(data, Mapping):
        raise ConfigError(f"monitor config {path} must hold a table/object at the top level")
    return data
