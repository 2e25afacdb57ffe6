"""``core_monitor.integrations.step_time``: the per-rank step clock behind the integrations'
``step_time=`` (its cross-rank view under torchrun: tests/frameworks/test_step_time.py)."""

from __future__ import annotations

import time

import pytest

from core_monitor import ConfigError
from core_monitor.integrations.step_time import StepClock, step_time_prefix

VIEW = ("mean", "median", "min", "max", "min_rank", "max_rank")


@pytest.mark.parametrize(("given", "prefix"), [
    (True, "step_time"), (False, None), (None, None), ("timing", "timing"), ("/t/", "t")])
def test_step_time_is_off_the_default_prefix_or_the_prefix_given(given, prefix):
    assert step_time_prefix(given, "MonitorLogger") == prefix


@pytest.mark.parametrize("given", [1, 0.5, "", "/", ["step_time"]])
def test_step_time_of_another_type_is_a_config_error_naming_it(given):
    with pytest.raises(ConfigError, match=r"MonitorLogger: step_time=.* must be True"):
        step_time_prefix(given, "MonitorLogger")


def test_each_part_is_its_mean_per_step_since_the_last_collect():
    clock = StepClock("st")
    assert clock.collect() == {}  # no step yet: nothing to exchange
    clock.idle()  # an epoch starts
    for _ in range(2):
        time.sleep(0.05)  # waiting for the batch
        clock.start()
        time.sleep(0.02)  # forward
        clock.backward()
        time.sleep(0.03)  # backward, optimizer
        clock.end()
    assert clock.steps == 2
    view = clock.collect()
    assert sorted(view) == sorted(f"st/{part}/{name}" for part in ("data", "forward", "step")
                                  for name in VIEW)
    # lower bounds only: a busy machine makes every part longer, never shorter
    assert view["st/data/mean"] >= 0.05
    assert view["st/forward/mean"] >= 0.02
    assert view["st/step/mean"] >= 0.05
    assert view["st/step/mean"] >= view["st/forward/mean"]
    assert view["st/data/max_rank"] == view["st/data/min_rank"] == 0.0  # a world of one
    assert clock.steps == 0 and clock.collect() == {}  # the window starts again


def test_logging_between_steps_is_not_counted_as_a_wait_for_data():
    clock = StepClock("st", forward=False)
    clock.idle()
    clock.start()
    clock.end()
    time.sleep(0.3)  # the integration's own logging, evaluation, a checkpoint
    clock.idle()
    clock.start()
    clock.end()
    view = clock.collect()
    assert "st/forward/mean" not in view
    assert view["st/data/mean"] < 0.15  # the 0.3 s above is in no step's data time
