"""Helpers shared by the framework integrations; imports no framework."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .. import discovery
from ..events import flatten, to_float
from ..media import MEDIA_TYPES, Text
from ..settings import check_backend_keys, check_keywords, check_options


def check_arguments(backends: Sequence[str | type] | str | None, project: str,
                    name: str | None, monitor_kwargs: Mapping[str, Any]) -> None:
    """Check what ``Monitor(backends, project=..., name=..., **monitor_kwargs)`` checks before
    it constructs a backend: the backend names, ``Monitor``'s keywords and each backend's
    option names, importing each selected plugin module but no SDK (as ``Monitor`` does on a
    rank that writes nothing).

    For a framework that creates the ``Monitor`` on one process only (accelerate's
    ``init_trackers`` runs on the main process): called where every process passes, it makes a
    misspelt option the same ``ConfigError`` on every process, before training starts.

    Raises:
        ConfigError, UnknownBackendError, BackendLoadError: as ``Monitor`` raises them.
    """
    chosen = check_keywords(backends, project, name, monitor_kwargs.get("strict", False),
                            monitor_kwargs.get("rank_zero_only", True))
    with warnings.catch_warnings():  # a disabled backend is reported by Monitor itself
        warnings.simplefilter("ignore")
        found = discovery.select(chosen, strict=monitor_kwargs.get("strict", False) is True)
    check_backend_keys(monitor_kwargs, chosen)
    for backend, target in found.items():
        cls = target if isinstance(target, type) else discovery.load_backend(target)
        check_options(backend, cls, monitor_kwargs.get(backend) or {})


def loggable(metrics: Mapping[str, Any], warned: set[str], source: str, *,
             text: bool = True) -> dict[str, Any]:
    """Return what ``Monitor.log`` can store of ``metrics``, nested tags joined with ``/``.

    Numbers (and tensors/arrays of one element) become ``float``; media values pass as they
    are; with ``text=True`` a ``str`` becomes ``core_monitor.Text``, as the frameworks' own
    TensorBoard writers store strings (accelerate's ``TensorBoardTracker`` and the Trainer's
    ``TensorBoardCallback`` call ``add_text``). Anything else (``None``, lists; a ``str`` with
    ``text=False``) is skipped with one ``UserWarning`` per tag and ``warned`` set (the caller
    keeps ``warned`` per run), never raised: a training loop that works with other trackers
    keeps working.

    Args:
        metrics: ``{tag: value}``.
        warned: tags already warned about; updated in place.
        source: who logged, for the warning (e.g. ``"accelerate"``).
        text: store strings as ``Text``.
    """
    out: dict[str, Any] = {}
    for tag, value in flatten(metrics):
        if isinstance(value, MEDIA_TYPES):
            out[tag] = value
            continue
        if text and isinstance(value, str):
            out[tag] = Text(value)
            continue
        try:
            out[tag] = to_float(tag, value)
        except TypeError:
            if tag not in warned:
                warned.add(tag)
                kind = "numbers and text" if text else "numbers"
                warnings.warn(
                    f"{source}: {tag!r} = {value!r:.60} is neither of the {kind} the monitor "
                    "stores, so this key is skipped (this warning is shown once per key)",
                    UserWarning, stacklevel=3,
                )
    return out
