"""Hyperparameter sanitising and monitor configuration files.

``sanitize_config`` turns whatever a training script calls its config (dataclasses, nested dicts,
``argparse.Namespace``, paths, enums, numpy values, arbitrary objects) into a flat mapping every
backend can store. ``load_monitor_config`` reads the ``Monitor.from_config`` format.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath
from types import MappingProxyType
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

_SCALARS = (str, int, float, bool, type(None))


def sanitize_config(config: Any) -> Mapping[str, Any]:
    """Return ``config`` as a flat, read-only, JSON-safe mapping. Never raises on odd values.

    Rules, applied recursively:

    * mappings, dataclass instances and objects with ``__dict__`` such as
      ``argparse.Namespace`` are flattened, keys joined with ``.`` (``CONFIG_SEP``); non-``str``
      keys become ``str(key)``;
    * ``None``, ``bool``, ``int``, ``str`` and finite ``float`` stay as they are;
      NaN and +/-inf become the strings ``"nan"``, ``"inf"``, ``"-inf"`` (JSON has no such numbers);
    * numpy scalars and 0-d arrays/tensors become Python numbers (through ``.item()``);
    * ``enum.Enum`` members become their ``name``; ``pathlib`` paths become ``str``;
    * lists, tuples, sets and multi-element arrays (``.tolist()``) become lists of JSON-safe
      values, nested containers inside them serialised as JSON text;
    * anything else becomes ``repr(value)``.

    Args:
        config: a mapping, a dataclass instance, an object with ``__dict__``, or ``None``.
    """
    flat: dict[str, Any] = {}
    if config is None:
        return MappingProxyType(flat)
    root = _as_mapping(config)
    if root is None:
        flat["config"] = _leaf(config)
    else:
        _flatten_into(flat, root, "")
    return MappingProxyType(flat)


def _as_mapping(value: Any) -> Mapping[Any, Any] | None:
    if isinstance(value, Mapping):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if type(value).__module__ == "argparse" and hasattr(value, "__dict__"):
        return vars(value)
    return None


def _flatten_into(flat: dict[str, Any], mapping: Mapping[Any, Any], prefix: str) -> None:
    for key, value in mapping.items():
        name = prefix + (key if isinstance(key, str) else str(key))
        nested = _as_mapping(value)
        if nested is not None and nested:
            _flatten_into(flat, nested, name + CONFIG_SEP)
        elif nested is not None:
            flat[name] = {}
        else:
            flat[name] = _leaf(value)


def _leaf(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [_in_list(item) for item in items]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        try:
            converted = tolist()
        except Exception:
            return repr(value)
        return _leaf(converted) if converted is not value else repr(value)
    return repr(value)


def _in_list(item: Any) -> Any:
    leaf = _leaf(item) if _as_mapping(item) is None else dict(sanitize_config(item))
    if isinstance(leaf, (list, dict)):
        return json.dumps(leaf, sort_keys=True)
    return leaf


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
    except OSError as error:
        raise ConfigError(f"cannot read monitor config {path}: {error}") from error
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot parse monitor config {path}: {error}") from error
    if not isinstance(data, Mapping):
        raise ConfigError(f"monitor config {path} must hold a table/object at the top level")
    return data
