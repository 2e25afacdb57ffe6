"""Events and the step and value rules: the one place a tag, value and step become an ``Event``.

The rules (the README's "step contract" states them for users):

* A step is an ``int`` (Python or numpy integer), ``0 <= step < 2**63``. ``bool`` and ``float``
  steps are rejected. ``None`` means "the next step": one more than the largest step seen so far,
  starting at 0, shared by every backend.
* A value is an ``int``, ``float``, ``bool`` or anything whose ``.item()`` returns one (numpy
  scalars, 0-d arrays and tensors). It becomes a Python ``float``; NaN and +/-inf are kept.
* Nested mappings are flattened with ``/``: ``{"train": {"loss": 1}}`` is the tag ``train/loss``.
* A tag is a non-empty ``str``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

#: Steps are stored as signed 64-bit integers by every backend (SQLite, protobuf int64).
MAX_STEP = 2**63 - 1


class Event(NamedTuple):
    """One scalar at one step, as every backend receives it. Built only by the core.

    Index-compatible with DeepSpeed's monitor event tuples ``(label, value, step)``
    (``deepspeed.monitor.monitor.Monitor.write_events``), with the wall time appended.

    Attributes:
        tag: metric name, a non-empty ``str`` such as ``"train/loss"``.
        value: the scalar as a Python ``float`` (NaN and +/-inf possible).
        step: the caller's step, an ``int`` with ``0 <= step < 2**63``.
        wall_time: seconds since the Unix epoch (``time.time()``) when ``log`` was called.
    """

    tag: str
    value: float
    step: int
    wall_time: float


def check_step(step: Any) -> int:
    """Return ``step`` as a Python ``int``.

    Raises:
        TypeError: ``step`` is a ``bool``, a ``float`` or not an integer at all.
        ValueError: ``step`` is negative or ``>= 2**63``.
    """
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(
            f"step={step!r} ({type(step).__name__}) is not an integer; "
            "pass an int such as step=10, or step=None for the next step"
        )
    value = operator.index(step)
    if not 0 <= value <= MAX_STEP:
        raise ValueError(
            f"step={value} is out of range; steps must satisfy 0 <= step < 2**63"
        )
    return value


def to_float(tag: str, value: Any) -> float:
    """Return ``value`` as a Python ``float``.

    Raises:
        TypeError: ``value`` is not a number, nor has an ``.item()`` that returns one
            (``str``, ``None``, lists, multi-element arrays); the message names ``tag``.
    """
    if isinstance(value, (int, float)):  # bool is an int
        return float(value)
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, (str, bytes)):
        try:
            scalar = item()
        except (TypeError, ValueError):  # numpy: "can only convert an array of size 1"
            scalar = None
        if isinstance(scalar, (int, float)):
            return float(scalar)
    raise TypeError(
        f"metric {tag!r} has a value of type {type(value).__name__} ({value!r:.60}); "
        "log numbers (int, float, bool, a numpy/torch scalar or 0-d array), or wrap media: "
        "core_monitor.Image(array), Histogram(values) or Text(str)"
    )


def flatten(metrics: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(tag, value)`` pairs of ``metrics``, nested mappings joined with ``/``.

    Raises:
        TypeError: a key is not a non-empty ``str``.
    """
    for key, value in metrics.items():
        if type(key) is not str or not key:
            where = f" under {prefix.rstrip('/')!r}" if prefix else ""
            raise TypeError(
                f"metric name {key!r}{where} is not a non-empty str; use string tags such as "
                "'train/loss'"
            )
        tag = prefix + key
        if isinstance(value, Mapping):
            yield from flatten(value, tag + "/")
        else:
            yield tag, value


class OneRow(tuple):  # type: ignore[type-arg]
    """A batch of ``Event`` that ``Monitor.log`` built from flat ``float`` metrics.

    All its events share one step and no tag repeats, so it carries its row (``{tag: value}``,
    never changed after construction) and ``rows_by_step`` hands that out instead of rebuilding
    it event by event: about 1.2 us less per 8-scalar ``log`` call and backend (benchmark B1).
    To a backend it is just a ``Sequence[Event]``.
    """

    row: dict[str, float]


def rows_by_step(events: Iterable[Event]) -> Iterator[tuple[int, float, dict[str, float]]]:
    """Group a batch into ``(step, wall_time, {tag: value})`` rows, keeping the caller's order.

    Consecutive events that share a step form one row; a new row starts when the step changes
    or when a tag repeats within the row, so no event is lost to a dict overwrite. A backend
    that writes one record per step (Trackio's ``log``, one TensorBoard ``Event``, one wandb
    ``log``) writes one record per row. ``wall_time`` is the row's first event's.
    """
    if type(events) is OneRow:  # built by Monitor.log: the row exists already
        first = events[0]
        yield first.step, first.wall_time, dict(events.row)  # a copy: backends may change it
        return
    row: dict[str, float] = {}
    step = wall_time = None
    for event in events:
        if row and (event.step != step or event.tag in row):
            yield step, wall_time, row  # type: ignore[misc]
            row = {}
        if not row:
            step, wall_time = event.step, event.wall_time
        row[event.tag] = event.value
    if row:
        yield step, wall_time, row  # type: ignore[misc]

