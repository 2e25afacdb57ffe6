"""The contract kit, run against the JSON-lines backend written for the tests.

This proves the kit itself: every kit test passes for a correct backend, and (in pytest
subprocesses, below) fails a wrong one with a message that says what was expected, what was
stored, and which hook or capability to look at.
"""

from __future__ import annotations

import pytest
from jsonl_monitor import JsonlMonitor, read_config, read_rows

from core_monitor.testing import MonitorContract


class TestJsonlBackend(MonitorContract):
    """What to test, as class attributes (the way ``monitors new`` writes it)."""

    backend_class = JsonlMonitor
    read_rows = staticmethod(read_rows)
    read_config = read_config  # a plain function works too

    @pytest.fixture
    def monitor_factory(self):
        """A plugin's tests may have their own fixture of this name: the kit must not use it."""
        return "the plugin's own fixture, unrelated to the kit"


class TestJsonlBackendThroughFixtures(MonitorContract):
    """The same, as fixtures: the way for a value that needs another fixture."""

    @pytest.fixture
    def backend_class(self):
        return JsonlMonitor

    @pytest.fixture
    def backend_options(self, tmp_path):
        return {}

    @pytest.fixture
    def read_rows(self, tmp_path):
        return read_rows

    @pytest.fixture
    def read_config(self):
        return read_config


def test_class_attributes_become_the_kits_fixtures():
    """A class attribute would hide the kit's fixture of that name from pytest; the kit keeps
    the value and puts its fixture back, while a subclass's own fixture stays its own."""
    kit = vars(MonitorContract)
    assert vars(TestJsonlBackend)["backend_class"] is kit["backend_class"]
    assert TestJsonlBackend._supplied == {"backend_class": JsonlMonitor,
                                          "read_rows": read_rows, "read_config": read_config}
    assert TestJsonlBackendThroughFixtures._supplied == {}
    assert vars(TestJsonlBackendThroughFixtures)["backend_class"] is not kit["backend_class"]

    class Child(TestJsonlBackend):  # inherits the values, replaces one by a fixture
        @pytest.fixture
        def read_config(self):
            return read_config

    assert Child._supplied == {"backend_class": JsonlMonitor, "read_rows": read_rows}
    assert vars(Child)["read_config"] is not kit["read_config"]


def test_backend_options_must_be_a_mapping():
    with pytest.raises(TypeError, match=r"Bad.backend_options = \('fsync',\): give a dict"):
        class Bad(MonitorContract):
            backend_class = JsonlMonitor
            backend_options = ("fsync",)


# The kit must fail a backend that breaks the contract. Each backend below breaks one rule; the
# kit runs against it in a separate pytest process and must report the failures named.

WRONG_BACKENDS = '''
import json
import pytest
from core_monitor import Capabilities, hookimpl
from core_monitor.testing import MonitorContract

STORE = {}


def key(run):
    return (str(run.log_dir), run.project, run.name, run.rank)


class Base:
    def __init__(self, run):
        self.rows = STORE.setdefault(key(run), [])

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
        self.rows = STORE.setdefault(key(run), _NanToZero())


class _NanToZero(list):
    def extend(self, rows):
        super().extend((t, s, 0.0 if v != v else v) for t, s, v in rows)


def read(run):
    return list(STORE.get(key(run), []))


class KitFor:
    dispatch = "thread"  # these backends keep their rows in this process's memory

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


@pytest.mark.heavy
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


# Each backend below breaks one more rule; the kit's message must name the expected and stored
# data and the hook or capability to fix.

MORE_WRONG_BACKENDS = WRONG_BACKENDS + '''
import struct

CONFIGS = {}


class IgnoresRank(Base):
    """Writes every rank into rank 0's run."""
    def __init__(self, run):
        self.rows = STORE.setdefault(key(run)[:3], [])


def read_ignoring_rank(run):
    return list(STORE.get(key(run)[:3], []))


class ForgetsLateConfig(Base):
    """Stores the config given at start, drops what monitor_config brings."""
    capabilities = Capabilities(stores_config=True)

    def __init__(self, run):
        super().__init__(run)
        CONFIGS[key(run)] = dict(run.config)

    @hookimpl
    def monitor_config(self, config):
        pass


class UnmarkedFlush(Base):
    """Forgot @hookimpl on monitor_flush: the core never calls it."""
    def monitor_flush(self):
        pass


class RoundsToFloat32(Base):
    """Stores single precision but declares nothing."""
    @hookimpl
    def monitor_write(self, events):
        self.rows.extend((e.tag, e.step, struct.unpack("f", struct.pack("f", e.value))[0])
                         for e in events)


class EscapesTags(Base):
    """Renames a reserved-looking tag and does not undo it when reading."""
    @hookimpl
    def monitor_write(self, events):
        self.rows.extend(("_" + e.tag if e.tag == "step" else e.tag, e.step, e.value)
                         for e in events)


class ClosesLate(Base):
    """Claims rows are readable after flush; its file only gets them at close."""
    def __init__(self, run):
        super().__init__(run)
        self.pending = []

    @hookimpl
    def monitor_write(self, events):
        self.pending.extend((e.tag, e.step, e.value) for e in events)

    @hookimpl
    def monitor_close(self):
        self.rows.extend(self.pending)
        self.pending = []


class BadCapability(Base):
    rows_readable_after = "never"


class ConfigWithoutReader(Base):
    capabilities = Capabilities(stores_config=True)


def kit_for(backend, reader=read):
    class Kit(MonitorContract):
        backend_class = backend
        read_rows = staticmethod(reader)
        dispatch = "thread"  # the rows are kept in this process's memory

    return Kit


class TestForgetsLateConfig(kit_for(ForgetsLateConfig)):
    @pytest.fixture
    def read_config(self):
        return lambda run: CONFIGS.get(key(run), {})


TestIgnoresRank = kit_for(IgnoresRank, read_ignoring_rank)
TestUnmarkedFlush = kit_for(UnmarkedFlush)
TestRoundsToFloat32 = kit_for(RoundsToFloat32)
TestEscapesTags = kit_for(EscapesTags)
TestClosesLate = kit_for(ClosesLate)
TestBadCapability = kit_for(BadCapability)
TestConfigWithoutReader = kit_for(ConfigWithoutReader)


class TestSaysNothing(MonitorContract):
    """Names no backend class."""
    read_rows = staticmethod(read)
    dispatch = "thread"
'''


MESSAGES = [
    ("TestOwnCounter::test_explicit_steps_are_stored_exactly",
     "tag 'loss': expected steps [0, 10, 20, 120] (as logged), stored [0, 1, 2, 3]: the backend "
     "renumbered steps (its own counter from 0) — store event.step as given in monitor_write"),
    ("TestDropsOutOfOrder::test_step_lower_than_previous_is_stored",
     "tag 'loss': expected steps [5, 3, 6] (as logged), stored [5, 6]: point(s) at step(s) [3] "
     "were not stored — monitor_write must store every event, also one whose step is lower"),
    ("TestLosesNan::test_nan_and_infinities_round_trip",
     "tag 'a' at step 1: expected value nan (as logged), stored 0.0: NaN and ±inf must be "
     "stored as such"),
    ("TestIgnoresRank::test_rank_above_zero_writes_a_run_of_its_own",
     "rank 1 of run 'ddp': expected (step, value) [(0, 1.0), (1, 1.5)] for tag 'loss', "
     "read_rows returned {'loss': [(0, 1.0), (1, 1.5), (0, 2.0)]}; on run.rank > 0 the backend "
     "must write a run of its own"),
    ("TestForgetsLateConfig::test_config_given_late_is_merged",
     "config key 'lr': expected 0.002 (given late through Monitor.log_config), stored 0.001: "
     "monitor_config must merge the mapping it receives into the stored config"),
    ("TestUnmarkedFlush::test_hooks_are_marked_for_the_core",
     "UnmarkedFlush.monitor_flush has no @hookimpl marker, so the core never calls it: "
     "decorate it with core_monitor.hookimpl"),
    ("TestRoundsToFloat32::test_explicit_steps_are_stored_exactly",
     "tag 'loss' at step 0: expected value 0.3 (as logged), stored 0.30000001192092896: the "
     "storage rounds values to single precision — declare "
     "Capabilities(value_dtype='float32')"),
    ("TestEscapesTags::test_tags_a_backend_reserves_round_trip",
     "tags stored but never logged: ['_step'] (read_rows must return each tag as logged: undo "
     "any renaming or escaping your storage needs)"),
    ("TestClosesLate::test_rows_are_readable_after_flush_while_run_is_open",
     "after monitor_flush with the run still open, expected rows (tag, step) [('loss', 1)], "
     "read_rows returned []: monitor_flush must make every row written so far readable; if "
     "your storage cannot, declare rows_readable_after = 'close'"),
    ("TestBadCapability::test_explicit_steps_are_stored_exactly",
     "BadCapability declares rows_readable_after as class attributes, which the core no "
     "longer reads; declare them in one place: capabilities: ClassVar[Capabilities] = "
     "Capabilities(rows_readable_after='never')"),
    ("TestSaysNothing::test_explicit_steps_are_stored_exactly",
     "TestSaysNothing does not say what to test: set the class attribute backend_class = "
     "YourMonitor (the class your entry point names) (or define a fixture backend_class)"),
]


@pytest.mark.heavy
def test_kit_failures_say_expected_stored_and_what_to_fix(pytester):
    """One pytest run of the kit against every wrong backend: each failure names what was
    expected, what was stored and the fix; what a backend gets right still passes."""
    pytester.makepyfile(test_wrong=MORE_WRONG_BACKENDS)
    result = pytester.runpytest_subprocess("-q", "-rfEs", "-p", "no:cacheprovider")
    output = result.stdout.str()
    failed = {line.split("::", 1)[1].split(" ")[0] for line in result.outlines
              if line.startswith(("FAILED", "ERROR"))}
    problems = [f"{test_id} passed against a wrong backend" for test_id, _ in MESSAGES
                if test_id not in failed]
    problems += [f"{test_id}: message not found: {message!r}" for test_id, message in MESSAGES
                 if message not in output]
    assert not problems, "\n".join(problems) + "\n--- kit output\n" + output[-8000:]

    for wrong in ("TestIgnoresRank", "TestForgetsLateConfig", "TestEscapesTags",
                  "TestConfigWithoutReader"):
        assert f"{wrong}::test_explicit_steps_are_stored_exactly" not in failed, output[-3000:]
    assert "TestForgetsLateConfig::test_config_given_at_start_is_stored" not in failed
    assert "TestClosesLate::test_close_is_idempotent" not in failed
    assert ("the backend declares stores_config = True but the test class has no read_config "
            "fixture") in output
    # The kit tests that check the core's guarantees pass whatever the backend stores (for a
    # class that names one).
    core_checks = ("test_core_runs_a_backend_with_only_monitor_write",
                   "test_no_hook_is_called_after_close")
    assert not {f for f in failed if f.endswith(core_checks)
                and not f.startswith("TestSaysNothing")}, output[-3000:]
