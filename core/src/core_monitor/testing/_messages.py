"""What the contract kit says when a backend fails: expected vs stored, and what to fix."""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Sequence
from typing import Any


def stored_as(value: float, dtype: str) -> float:
    """``value`` as a backend of ``dtype`` stores it."""
    if dtype == "float32" and math.isfinite(value):
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def short(items: Sequence[Any], limit: int = 12) -> str:
    """``items`` as a list literal, the middle left out when long."""
    if len(items) <= limit:
        return repr(list(items))
    head = ", ".join(map(repr, items[: limit // 2]))
    tail = ", ".join(map(repr, items[-3:]))
    return f"[{head}, ... ({len(items) - limit // 2 - 3} more), {tail}]"


def is_subsequence(short: Sequence[Any], long: Sequence[Any]) -> bool:
    remaining = iter(long)
    return all(any(x == y for y in remaining) for x in short)


def step_hint(want: list[int], got: list[int]) -> str:
    """Why ``got`` (steps stored for a tag) differs from ``want`` (steps logged), and the fix."""
    if len(got) == len(want) and got == list(range(len(got))):
        return ("the backend renumbered steps (its own counter from 0) — store event.step as "
                "given in monitor_write")
    if len(got) == len(want) and sorted(got) == sorted(want):
        return ("the same steps in another order — store the events in the order monitor_write "
                "receives them and let read_rows return rows in storage order (do not sort by "
                "step)")
    if len(got) < len(want) and is_subsequence(got, want):
        missing = list((Counter(want) - Counter(got)).elements())
        return (f"point(s) at step(s) {short(missing)} were not stored — monitor_write must store "
                "every event, also one whose step is lower than or equal to an earlier one; if "
                "they are the last ones, monitor_flush did not make them readable (declare "
                "rows_readable_after = 'close' when only monitor_close does)")
    if len(got) > len(want) and is_subsequence(want, got):
        extra = list((Counter(got) - Counter(want)).elements())
        return (f"extra point(s) at step(s) {short(extra)} — read_rows returned rows this run did "
                "not log (another run's or rank's: each needs storage of its own) or monitor_write "
                "stored an event twice")
    for index, (w, g) in enumerate(zip(want, got)):  # noqa: B905 - lengths may differ
        if w != g:
            return (f"the first difference is point {index}: expected step {w}, stored {g} — store "
                    "event.step as given in monitor_write")
    return "store event.step as given in monitor_write, one row per event"


def value_hint(want: float, got: float, dtype: str) -> str:
    if not math.isfinite(want):
        return ("NaN and ±inf must be stored as such — store event.value unchanged in "
                "monitor_write and return float('nan') / float('inf') from read_rows")
    if dtype == "float64" and same(got, stored_as(want, "float32")):
        return ("the storage rounds values to single precision — declare "
                "Capabilities(value_dtype='float32')")
    return "store event.value unchanged in monitor_write, and read it back unchanged in read_rows"


def config_matches(want: Any, got: Any) -> bool:
    """Whether a stored config value is the one given, as far as the storage's types allow.

    Numbers compare by value (an ``int`` stored as a ``float`` matches); a tracker that keeps
    every value as text (MLflow params) may return ``str(value)``.
    """
    if isinstance(want, bool) or isinstance(got, bool):
        return (type(want) is type(got) and want == got) or got == str(want)
    if want == got:
        return True
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers):
        return float(want) == float(got)
    return isinstance(got, str) and got == str(want)
