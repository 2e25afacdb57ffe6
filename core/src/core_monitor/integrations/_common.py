"""Helpers shared by the framework integrations; imports no framework."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..events import flatten, to_float


def numeric(metrics: Mapping[str, Any], warned: set[str], source: str) -> dict[str, float]:
    """Return the numeric entries of ``metrics`` as ``{tag: float}``, nested tags joined with ``/``.

    Frameworks let a caller log values that are not scalars (accelerate allows ``str``; the
    Hugging Face Trainer logs strings and lists in ``log_history``). Such an entry is skipped
    with one ``UserWarning`` per tag and ``warned`` set (the caller keeps ``warned`` per run),
    never raised: a training loop that works with other trackers keeps working.

    Args:
        metrics: ``{tag: value}``; values are numbers, tensors/arrays of one element, or other.
        warned: tags already warned about; updated in place.
        source: who logged, for the warning (e.g. ``"accelerate"``).
    """
    out: dict[str, float] = {}
    for tag, value in flatten(metrics):
        try:
            out[tag] = to_float(tag, value)
        except TypeError:
            if tag not in warned:
                warned.add(tag)
                warnings.warn(
                    f"{source}: {tag!r} = {value!r:.60} is not a number; the monitor stores "
                    "scalars only, so this key is skipped (this warning is shown once per key)",
                    UserWarning, stacklevel=3,
                )
    return out
