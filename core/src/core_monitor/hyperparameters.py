"""Hyperparameter sanitising: a training script's config -> a flat mapping every backend stores.

``sanitize_config`` turns whatever a training script calls its config (dataclasses, nested dicts,
``argparse.Namespace``, paths, enums, numpy values, arbitrary objects) into a flat mapping every
backend can store. (The ``Monitor.from_config`` file format is read by ``core_monitor.settings``.)
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from pathlib import PurePath
from types import MappingProxyType, SimpleNamespace
from typing import Any

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
    * anything else becomes ``repr(value)`` (or ``<TypeName object>`` if that raises); the
      default ``object.__repr__`` becomes ``<module.TypeName object>``, without the memory
      address, so the same config gives the same value in every run and every call.

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
    cls = type(value)
    if to_text is repr and cls.__repr__ is object.__repr__:  # "<... object at 0x7f...>"
        module = "" if cls.__module__ == "builtins" else cls.__module__ + "."
        return f"<{module}{cls.__qualname__} object>"
    try:
        return str(to_text(value))
    except Exception:
        return f"<{type(value).__qualname__} object>"
