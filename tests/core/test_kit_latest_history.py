"""The contract kit against backends that keep only the latest point of each tag
(``Capabilities(history="latest")``, as prometheus-monitor's gauges do): it passes one that
keeps each tag's last point logged, at its step, and fails one that keeps another point."""

from __future__ import annotations

import pytest

LATEST_BACKENDS = '''
import pytest
from core_monitor import Capabilities, hookimpl
from core_monitor.testing import MonitorContract

STORE = {}


def key(run):
    return (str(run.log_dir), run.project, run.name, run.rank)


class KeepsLatest:
    """Each tag's last point logged, as a gauge and its step gauge hold it."""
    capabilities = Capabilities(history="latest")

    def __init__(self, run):
        self.points = STORE.setdefault(key(run), {})

    @hookimpl
    def monitor_write(self, events):
        for event in events:
            self.keep(event)

    def keep(self, event):
        self.points[event.tag] = (event.step, event.value)


class KeepsLargestStep(KeepsLatest):
    """Keeps the point of the largest step instead: wrong when a lower step comes last."""
    def keep(self, event):
        if event.tag not in self.points or event.step >= self.points[event.tag][0]:
            self.points[event.tag] = (event.step, event.value)


def read(run):
    return [(tag, step, value) for tag, (step, value) in STORE.get(key(run), {}).items()]


class KitFor:
    dispatch = "thread"  # these backends keep their points in this process's memory

    @pytest.fixture
    def read_rows(self):
        return read


class TestKeepsLatest(KitFor, MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return KeepsLatest


class TestKeepsLargestStep(KitFor, MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return KeepsLargestStep
'''


@pytest.mark.heavy
def test_the_kit_holds_a_latest_value_backend_to_each_tags_last_point(pytester):
    pytester.makepyfile(test_latest=LATEST_BACKENDS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    failed = {line.split("::", 1)[1].split(" ")[0] for line in result.outlines
              if line.startswith("FAILED")}
    assert not {name for name in failed if name.startswith("TestKeepsLatest::")}, result.outlines
    assert {
        "TestKeepsLargestStep::test_deepspeed_event_tuples",
        "TestKeepsLargestStep::test_same_tag_twice_in_one_batch_keeps_both",
    } <= failed, result.outlines
    passed = result.parseoutcomes().get("passed", 0)
    assert passed >= 20, result.outlines  # the kit's checks ran, not skipped
