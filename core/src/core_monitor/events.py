"""Events and the step and value rules: the one place a tag, value and step become an ``Event``.

The rules (docs/steps-and-values.md states them for users):

* A step is an ``int`` (Python or numpy integer), ``0 <= step < 2**63``. ``bool`` and ``float``
  steps are rejected. ``None`` means "the next step": one more than the largest step seen so far,
  starting at 0, shared by every backend.
* A value is an ``int``, ``float``, ``bool`` or anything whose ``.item()`` returns one (numpy
  scalars, 0-d arrays and tensors). It becomes a Python ``float``; NaN and +/-inf are kept. A
  value that is not a number, or whose ``.item()`` raises (a multi-element tensor), is a
  ``TypeError`` naming the tag; an ``int`` too large for a float (beyond about 1.8e308) is a
  ``ValueError`` naming the tag.
* Nested mappings are flattened with ``/``: ``{"train": {"loss": 1}}`` is the tag ``train/loss``.
* A tag is a non-empty ``str`` that can be encoded as UTF-8 (no lone surrogate such as
  ``"\\ud800"``): every backend stores tags as UTF-8 text.

``log()`` hands backends a ``Batch``: its rows as the caller gave them, its ``Event`` records
built only when a backend asks for them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, overload

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
            (``str``, ``None``, lists, multi-element arrays or tensors, an ``.item()`` that
            raises anything); the message names ``tag`` and the value's type.
        ValueError: ``value`` is an integer too large for a float (``OverflowError`` of
            ``float()``); the message names ``tag``.
    """
    scalar = value
    if not isinstance(value, (int, float)):  # bool is an int
        item = getattr(value, "item", None)
        scalar = None
        if item is not None and not isinstance(value, (str, bytes)):
            try:
                scalar = item()
            except Exception:  # numpy ValueError, torch RuntimeError ("more than one element")
                scalar = None
        if not isinstance(scalar, (int, float)):
            raise TypeError(
                f"metric {tag!r} has a value of type {type(value).__name__} ({_short(value)}); "
                "log numbers (int, float, bool, a numpy/torch scalar or 0-d array), or wrap "
                "media: core_monitor.Image(array), Histogram(values) or Text(str)"
            )
    try:
        return float(scalar)
    except OverflowError:
        raise ValueError(
            f"metric {tag!r} has an int value too large for a float "
            f"({type(value).__name__} with {len(str(abs(int(scalar))))} digits); log it as a "
            "float (e.g. math.log10 of it) or a smaller number"
        ) from None


def _short(value: Any) -> str:
    """``repr(value)`` cut to 60 characters; never raises (a broken ``__repr__`` is named)."""
    try:
        return f"{value!r:.60}"
    except Exception as error:
        return f"<repr failed: {type(error).__name__}>"


def check_tag(tag: Any, where: str = "") -> str:
    """Return ``tag`` if it is a non-empty ``str`` that UTF-8 can encode.

    Args:
        tag: the metric name.
        where: text placed after the tag in the message, e.g. ``" under 'train'"``.

    Raises:
        TypeError: ``tag`` is not a ``str``, is empty, or holds a lone surrogate (e.g.
            ``"\\ud800"``, which no backend can store); the message names the tag.
    """
    if type(tag) is not str or not tag:
        raise TypeError(
            f"metric name {tag!r}{where} is not a non-empty str; use string tags such as "
            "'train/loss'"
        )
    if not tag.isascii():
        try:
            tag.encode("utf-8")
        except UnicodeEncodeError as error:
            raise TypeError(
                f"metric name {tag!r}{where} cannot be encoded as UTF-8 ({error.reason} at "
                f"index {error.start}); backends store tags as UTF-8 text: remove the lone "
                "surrogate (e.g. decode file names with errors='replace')"
            ) from None
    return tag


def flatten(metrics: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(tag, value)`` pairs of ``metrics``, nested mappings joined with ``/``.

    Raises:
        TypeError: a key is not a non-empty ``str`` or cannot be encoded as UTF-8.
    """
    for key, value in metrics.items():
        check_tag(key, f" under {prefix.rstrip('/')!r}" if prefix else "")
        tag = prefix + key
        if isinstance(value, Mapping):
            yield from flatten(value, tag + "/")
        else:
            yield tag, value


def metric_rows(metrics: Mapping[str, Any], known: set[str] | None = None,
                limit: int = 0, take: Callable[[str, Any], bool] | None = None,
                ) -> list[dict[str, float]]:
    """``metrics`` checked, flattened and converted: one ``{tag: value}`` row, or more where a
    flattened tag repeats (``{"a/b": 1, "a": {"b": 2}}``); ``[]`` when empty.

    Args:
        metrics: what ``Monitor.log`` was given.
        known: tags found valid are added here while it holds fewer than ``limit``.
        take: ``take(tag, value)`` returns ``True`` for a value it keeps itself (media: see
            ``core_monitor.media.media_taker``), which then goes in no row.

    Raises:
        TypeError, ValueError: as ``check_tag`` and ``to_float`` (and ``take``).
    """
    rows: list[dict[str, float]] = [{}]
    for tag, value in flatten(metrics):
        if take is not None and take(tag, value):
            continue
        row = rows[-1]
        if tag in row:
            row = {}
            rows.append(row)
        row[tag] = to_float(tag, value)
        if known is not None and len(known) < limit:
            known.add(tag)
    return rows if rows[0] else []


def check_events(events: Iterable[Any]) -> list[tuple[str, float, int | None]]:
    """DeepSpeed-style ``(tag, value, step)`` tuples checked: ``(tag, float, step or None)``.

    Raises:
        TypeError: an item is not a 3-sequence, or as ``check_tag``/``to_float``/``check_step``.
        ValueError: as ``to_float``/``check_step``.
    """
    checked = []
    for item in events:
        if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 3:
            raise TypeError(f"event {item!r:.80} is not a (tag, value, step) tuple")
        tag, value, step = item
        check_tag(tag)
        checked.append((tag, to_float(tag, value), None if step is None else check_step(step)))
    return checked


#: One row of a batch: ``(step, wall_time, {tag: value})``, every scalar at that step.
Row = tuple[int, float, dict[str, float]]


class Batch(Sequence[Event]):
    """What one ``Monitor.log`` or ``write_events`` call hands every backend's ``monitor_write``.

    To a backend it is a ``Sequence[Event]`` (iterate, index, ``len``), in the caller's order.
    The core builds it from rows, so a backend that writes one record per step can take them
    ready-made with ``rows_by_step(batch)`` instead of regrouping events; the ``Event``
    records are built on first use only (once, shared by every backend). Never changed after
    construction; ``rows_by_step`` hands out copies of the rows' dicts.

    Args:
        rows: ``Row`` tuples, in the caller's order: within a row no tag repeats; one step
            per row (consecutive rows may share a step).

    Attributes:
        rows: as given.
    """

    __slots__ = ("_events", "rows")

    def __init__(self, rows: tuple[Row, ...]) -> None:
        self.rows = rows
        self._events: tuple[Event, ...] | None = None

    @property
    def events(self) -> tuple[Event, ...]:
        """The batch as ``Event`` records (built at first access)."""
        events = self._events
        if events is None:
            new = tuple.__new__
            events = self._events = tuple([
                new(Event, (tag, value, step, wall_time))
                for step, wall_time, row in self.rows for tag, value in row.items()
            ])
        return events

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Event, ...]: ...
    def __getitem__(self, index: int | slice) -> Event | tuple[Event, ...]:
        return self.events[index]

    def __len__(self) -> int:
        return sum(len(row) for _, _, row in self.rows)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __repr__(self) -> str:
        return f"Batch({list(self.events)!r})"


def rows_by_step(events: Iterable[Event]) -> Iterator[tuple[int, float, dict[str, float]]]:
    """Group a batch into ``(step, wall_time, {tag: value})`` rows, keeping the caller's order.

    Consecutive events that share a step form one row; a new row starts when the step changes
    or when a tag repeats within the row, so no event is lost to a dict overwrite. A backend
    that writes one record per step (Trackio's ``log``, one TensorBoard ``Event``, one wandb
    ``log``) writes one record per row. ``wall_time`` is the row's first event's.
    """
    if type(events) is Batch:  # built by the core: the rows exist already
        for step, wall_time, row in events.rows:
            yield step, wall_time, dict(row)  # a copy: a backend may change it
        return
    current: dict[str, float] = {}
    step, wall_time = 0, 0.0  # set by the first event, before any row is yielded
    for event in events:
        if current and (event.step != step or event.tag in current):
            yield step, wall_time, current
            current = {}
        if not current:
            step, wall_time = event.step, event.wall_time
        current[event.tag] = event.value
    if current:
        yield step, wall_time, current

