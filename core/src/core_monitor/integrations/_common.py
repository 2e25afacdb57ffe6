"""Helpers shared by the framework integrations; imports no framework."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..events import flatten, to_float
from ..media import MEDIA_TYPES, Text


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
