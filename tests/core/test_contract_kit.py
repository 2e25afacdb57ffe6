"""The contract kit, run against the JSON-lines backend written for the tests.

This proves the kit itself: every kit test passes for a correct backend, and (at the end)
the kit fails backends that break the contract.
"""

from __future__ import annotations

import pytest
from jsonl_monitor import JsonlMonitor, read_rows

from core_monitor.testing import MonitorContract


class TestJsonlBackend(MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return JsonlMonitor

    @pytest.fixture
    def read_rows(self):
        return read_rows

    @pytest.fixture
    def monitor_factory(self):
        """A plugin's tests may have their own fixture of this name: the kit must not use it."""
        return "the plugin's own fixture, unrelated to the kit"


# The kit must fail a backend that breaks the contract. Each backend below breaks one rule; the
# kit runs against it in a separate pytest process and must report the failures named.

WRONG_BACKENDS = '''
import json
import pytest
from core_monitor import hookimpl
from core_monitor.testing import MonitorContract

STORE = {}


class Base:
    def __init__(self, run):
        self.rows = STORE.setdefault((str(run.log_dir), run.project, run.name), [])

    @hookimpl
    def monitor_write(self, events):
        self.rows.extend((e.tag, self.step_of(e), e.value) for e in events)

    def step_of(self, event):
        return event.step


class OwnCounter(Base):
    """Numbers points itself: the adapter that dropped the caller's step."""
    def step_of(self, event):
        self.counter = getattr(self, "counter", -1) + 1
        return self.counter


class DropsOutOfOrder(Base):
    """Drops a point whose step is lower than an earlier one."""
    @hookimpl
    def monitor_write(self, events):
        for e in events:
            if not self.rows or e.step > self.rows[-1][1]:
                self.rows.append((e.tag, e.step, e.value))


class LosesNan(Base):
    """Stores NaN as 0."""
    def __init__(self, run):
        self.rows = STORE.setdefault((str(run.log_dir), run.project, run.name), _NanToZero())


class _NanToZero(list):
    def extend(self, rows):
        super().extend((t, s, 0.0 if v != v else v) for t, s, v in rows)


def read(run):
    return list(STORE.get((str(run.log_dir), run.project, run.name), []))


class KitFor:
    @pytest.fixture
    def read_rows(self):
        return read


class TestOwnCounter(KitFor, MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return OwnCounter


class TestDropsOutOfOrder(KitFor, MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return DropsOutOfOrder


class TestLosesNan(KitFor, MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return LosesNan
'''


def test_the_kit_fails_backends_that_break_the_contract(pytester):
    pytester.makepyfile(test_wrong=WRONG_BACKENDS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    failed = {line.split("::", 1)[1].split(" ")[0] for line in result.outlines
              if line.startswith("FAILED")}
    assert {
        "TestOwnCounter::test_explicit_steps_are_stored_exactly",
        "TestOwnCounter::test_step_lower_than_previous_is_stored",
        "TestDropsOutOfOrder::test_step_lower_than_previous_is_stored",
        "TestDropsOutOfOrder::test_repeated_step_is_stored_twice",
        "TestLosesNan::test_nan_and_infinities_round_trip",
    } <= failed
    assert not any(name.startswith("TestLosesNan") for name in failed - {
        "TestLosesNan::test_nan_and_infinities_round_trip"
    })
    assert "TestDropsOutOfOrder::test_explicit_steps_are_stored_exactly" not in failed

