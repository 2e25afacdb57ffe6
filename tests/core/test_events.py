"""The step and value rules, checked where they are implemented (``core_monitor.events``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core_monitor.events import (
    MAX_STEP,
    Batch,
    Event,
    check_step,
    flatten,
    rows_by_step,
    to_float,
)


@pytest.mark.parametrize("step", [0, 1, 120, MAX_STEP, np.int64(7), np.uint8(3), np.int32(0)])
def test_integer_steps_become_python_ints(step):
    checked = check_step(step)
    assert type(checked) is int
    assert checked == int(step)


@pytest.mark.parametrize("step", [True, False, 1.0, 3.5, np.float64(2.0), "3", None, [1]])
def test_non_integer_steps_are_rejected(step):
    with pytest.raises(TypeError, match="not an integer"):
        check_step(step)


@pytest.mark.parametrize("step", [-1, 2**63, 2**64, np.int64(-5)])
def test_out_of_range_steps_are_rejected(step):
    with pytest.raises(ValueError, match=r"0 <= step < 2\*\*63"):
        check_step(step)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1.0),
        (True, 1.0),
        (0.25, 0.25),
        (np.float32(0.5), 0.5),
        (np.int64(3), 3.0),
        (np.array(2.5), 2.5),
        (np.array([4.0]), 4.0),
        (np.bool_(True), 1.0),
    ],
)
def test_numbers_and_scalars_become_python_floats(value, expected):
    converted = to_float("loss", value)
    assert type(converted) is float
    assert converted == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float32("nan"), np.inf])
def test_nan_and_infinities_are_kept(value):
    converted = to_float("loss", value)
    assert type(converted) is float
    assert math.isnan(converted) if math.isnan(value) else converted == value


@pytest.mark.parametrize("value", ["0.5", b"1", None, [1.0], (1.0,), {1.0}, np.zeros(3), object()])
def test_non_numbers_raise_type_error_naming_the_tag(value):
    with pytest.raises(TypeError, match=r"metric 'train/loss' has a value of type"):
        to_float("train/loss", value)


def test_nested_mappings_are_flattened_with_slash():
    metrics = {"train": {"loss": 1, "opt": {"lr": 2}}, "epoch": 3}
    assert list(flatten(metrics)) == [("train/loss", 1), ("train/opt/lr", 2), ("epoch", 3)]


@pytest.mark.parametrize("key", ["", 1, None, ("a",)])
def test_tags_must_be_non_empty_strings(key):
    with pytest.raises(TypeError, match="is not a non-empty str"):
        list(flatten({"train": {key: 1.0}}))


def test_event_is_index_compatible_with_deepspeed_tuples():
    event = Event("Train/loss", 0.5, 10, 1.0)
    tag, value, step = event[:3]
    assert (tag, value, step) == ("Train/loss", 0.5, 10)
    assert event.step == 10


def _events(*triples):
    return [Event(tag, value, step, float(step)) for tag, value, step in triples]


def test_rows_by_step_groups_consecutive_events_of_one_step():
    rows = list(rows_by_step(_events(("a", 1.0, 5), ("b", 2.0, 5), ("a", 3.0, 3))))
    assert rows == [(5, 5.0, {"a": 1.0, "b": 2.0}), (3, 3.0, {"a": 3.0})]


def test_rows_by_step_starts_a_new_row_when_a_tag_repeats():
    rows = list(rows_by_step(_events(("a", 1.0, 5), ("a", 2.0, 5), ("b", 3.0, 5))))
    assert rows == [(5, 5.0, {"a": 1.0}), (5, 5.0, {"a": 2.0, "b": 3.0})]


def test_rows_by_step_of_nothing_is_nothing():
    assert list(rows_by_step([])) == []


def test_rows_by_step_of_a_log_batch_gives_the_same_row_as_grouping_event_by_event():
    events = _events(("a", 1.0, 5), ("b", 2.0, 5), ("a", 3.0, 5), ("c", 4.0, 6))
    batch = Batch(tuple(rows_by_step(events)))
    assert list(rows_by_step(batch)) == list(rows_by_step(tuple(events)))


def test_a_batch_is_a_sequence_of_its_events_in_the_callers_order():
    events = _events(("a", 1.0, 5), ("b", 2.0, 5), ("a", 3.0, 5))
    batch = Batch(tuple(rows_by_step(events)))
    assert len(batch) == 3
    assert list(batch) == events
    assert batch[0] == events[0] and batch[-1] == events[-1] and batch[1:] == tuple(events[1:])
    assert all(type(e) is Event for e in batch)


def test_rows_by_step_hands_each_backend_its_own_copy_of_a_log_batch_row():
    batch = Batch(((5, 5.0, {"a": 1.0}),))
    (_, _, first), = rows_by_step(batch)
    first["a"] = 99.0  # e.g. an SDK renaming or adding keys in place
    (_, _, second), = rows_by_step(batch)
    assert second == {"a": 1.0}
