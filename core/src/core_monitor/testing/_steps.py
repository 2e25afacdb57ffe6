"""The step and value contract: every backend stores the caller's steps and values exactly."""

from __future__ import annotations

import math
import re

import pytest

from ..capabilities import LARGEST_STEP


def _not_stored(tag: str):  # the warning a backend gives for what its tracker cannot store
    return pytest.warns(RuntimeWarning, match=re.escape(repr(tag)))


class StepChecks:
    """Checks of steps, values and tags; mixed into ``MonitorContract`` (which supplies
    ``make_monitor``, ``stored``, ``dtype``, ``capabilities`` and ``assert_stored``).

    A backend that declares ``repeated_steps="first"`` or a ``max_step`` below ``2**63 - 1``
    (``core_monitor.Capabilities``) is held to that declaration instead: only the first value
    of a tag at a step, or no step beyond ``max_step``, stored, and a ``RuntimeWarning`` naming
    the tag for what is not."""

    def test_explicit_steps_are_stored_exactly(self, make_monitor, stored, dtype):
        """The caller's steps, not the backend's own counter."""
        monitor = make_monitor()
        for step, loss in zip([0, 10, 20, 120], [0.3, 0.25, 0.2, 0.1], strict=True):
            monitor.log({"loss": loss}, step=step)
        self.assert_stored(
            stored(monitor), {"loss": [(0, 0.3), (10, 0.25), (20, 0.2), (120, 0.1)]}, dtype
        )

    def test_step_lower_than_previous_is_stored(self, make_monitor, stored, dtype):
        """5, then 3, then no step -> 6 (the largest step seen + 1)."""
        monitor = make_monitor()
        monitor.log({"loss": 1.0}, step=5)
        monitor.log({"loss": 2.0}, step=3)
        assert monitor.log({"loss": 3.0}) == 6
        self.assert_stored(stored(monitor), {"loss": [(5, 1.0), (3, 2.0), (6, 3.0)]}, dtype)

    def test_repeated_step_is_stored_twice(self, make_monitor, stored, dtype, capabilities):
        monitor = make_monitor()
        monitor.log({"loss": 1.0}, step=7)
        if capabilities.repeated_steps == "first":
            with _not_stored("loss"):
                monitor.log({"loss": 2.0}, step=7)
                monitor.close()
            self.assert_stored(stored(monitor), {"loss": [(7, 1.0)]}, dtype)
            return
        monitor.log({"loss": 2.0}, step=7)
        self.assert_stored(stored(monitor), {"loss": [(7, 1.0), (7, 2.0)]}, dtype)

    def test_auto_steps_start_at_zero(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        for value in (1.0, 2.0, 3.0):
            monitor.log({"loss": value})
        self.assert_stored(stored(monitor), {"loss": [(0, 1.0), (1, 2.0), (2, 3.0)]}, dtype)

    def test_largest_step_is_stored(self, make_monitor, stored, dtype, capabilities):
        monitor = make_monitor()
        top = capabilities.max_step
        monitor.log({"loss": 1.5}, step=top)
        if top < LARGEST_STEP:
            with _not_stored("loss"):
                monitor.log({"loss": 2.5}, step=top + 1)
                monitor.close()
        self.assert_stored(stored(monitor), {"loss": [(top, 1.5)]}, dtype)

    def test_nan_and_infinities_round_trip(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"a": math.nan, "b": math.inf, "c": -math.inf}, step=1)
        monitor.log({"a": 1.0, "b": 2.0, "c": 3.0}, step=2)
        self.assert_stored(
            stored(monitor),
            {
                "a": [(1, math.nan), (2, 1.0)],
                "b": [(1, math.inf), (2, 2.0)],
                "c": [(1, -math.inf), (2, 3.0)],
            },
            dtype,
        )

    def test_many_tags_in_one_batch(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        for step in range(3):
            monitor.log({f"layer{i}/grad_norm": i + step / 4 for i in range(64)}, step=step)
        want = {f"layer{i}/grad_norm": [(s, i + s / 4) for s in range(3)] for i in range(64)}
        self.assert_stored(stored(monitor), want, dtype)

    def test_nested_metrics_are_flattened_with_slash(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"train": {"loss": 0.5, "acc": 0.75}, "lr": 0.001}, step=4)
        want = {"train/loss": [(4, 0.5)], "train/acc": [(4, 0.75)], "lr": [(4, 0.001)]}
        self.assert_stored(stored(monitor), want, dtype)

    def test_deepspeed_event_tuples(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.write_events([("Train/loss", 0.5, 100), ("Train/lr", 0.1, 100)])
        monitor.write_events([("Train/loss", 0.25, 90)])
        want = {"Train/loss": [(100, 0.5), (90, 0.25)], "Train/lr": [(100, 0.1)]}
        self.assert_stored(stored(monitor), want, dtype)

    def test_same_tag_twice_in_one_batch_keeps_both(self, make_monitor, stored, dtype,
                                                    capabilities):
        monitor = make_monitor()
        events = [("loss", 1.0, 3), ("loss", 2.0, 3), ("loss", 3.0, 2)]
        if capabilities.repeated_steps == "first":
            with _not_stored("loss"):
                monitor.write_events(events)
                monitor.close()
            self.assert_stored(stored(monitor), {"loss": [(3, 1.0), (2, 3.0)]}, dtype)
            return
        monitor.write_events(events)
        self.assert_stored(stored(monitor), {"loss": [(3, 1.0), (3, 2.0), (2, 3.0)]}, dtype)

    def test_unicode_tags(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"损失/训练": 0.5, "Größe": 2.0, "loss 🔥": 1.0}, step=1)
        want = {"损失/训练": [(1, 0.5)], "Größe": [(1, 2.0)], "loss 🔥": [(1, 1.0)]}
        self.assert_stored(stored(monitor), want, dtype)

    def test_tags_a_backend_reserves_round_trip(self, make_monitor, stored, dtype):
        """Names SDKs use for themselves (Trackio renames these) come back as logged."""
        monitor = make_monitor()
        logged = {"step": 1.0, "time": 2.0, "timestamp": 3.0, "metrics": 4.0, "__x": 5.0}
        monitor.log(logged, step=2)
        self.assert_stored(stored(monitor), {t: [(2, v)] for t, v in logged.items()}, dtype)
