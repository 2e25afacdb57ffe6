"""Dispatch off the caller's thread: buffers per backend, slow and failing backends, drops,
timeouts, interrupts. The test backends written here run in worker threads (a class defined in
a test module is not importable by a fresh interpreter), the JSON-lines backend (``jsonl``,
installed) in its writer process, so most tests cover both sides of the default mode; storage
read back from ``jsonl``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import ClassVar

import pytest
from faulty_monitor import read_steps
from jsonl_monitor import read_rows

from core_monitor import BackendWarning, ConfigError, RunInfo, hookimpl
from core_monitor.errors import FlushTimeout


class Slow:
    """Sleeps ``delay`` seconds in every write (a remote server, a full disk)."""

    name = "slow"
    delay = 2.0
    instances: ClassVar[list] = []

    def __init__(self, run) -> None:
        self.steps: list[int] = []
        Slow.instances.append(self)

    @hookimpl
    def monitor_write(self, events):
        time.sleep(self.delay)
        self.steps.extend(e.step for e in events)


class Gated:
    """Blocks in its first write until ``gate`` is set; ``entered`` tells it is blocked."""

    name = "gated"
    instances: ClassVar[list] = []

    def __init__(self, run) -> None:
        self.steps: list[int] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        Gated.instances.append(self)

    @hookimpl
    def monitor_write(self, events):
        self.entered.set()
        self.gate.wait(30)
        self.steps.extend(e.step for e in events)


class FailsOnce:
    """Raises in its first write only."""

    name = "failsonce"

    def __init__(self, run) -> None:
        self.writes = 0

    @hookimpl
    def monitor_write(self, events):
        self.writes += 1
        if self.writes == 1:
            raise ConnectionError("tracker unreachable")


@pytest.fixture(autouse=True)
def _fresh():
    Slow.instances.clear()
    Gated.instances.clear()


def stored_steps(monitor):
    return [step for _, step, _ in read_rows(monitor.run)]


class Fast:
    """Keeps the steps it got; ``got(n, timeout)`` waits until it has ``n`` of them."""

    name = "fast"
    instances: ClassVar[list] = []

    def __init__(self, run) -> None:
        self.steps: list[int] = []
        self.changed = threading.Condition()
        Fast.instances.append(self)

    @hookimpl
    def monitor_write(self, events):
        with self.changed:
            self.steps.extend(e.step for e in events)
            self.changed.notify_all()

    def got(self, n: int, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.steps) >= n, timeout)


def test_a_slow_backend_slows_neither_log_nor_the_other_backends(make):
    """Writes take 2 s each on one backend: log() returns at once while its queue has room,
    the other backend has every row long before the slow one's first write ends, and the slow
    one has every row after close()."""
    Fast.instances.clear()
    monitor = make([Slow, Fast, "jsonl"], queue_size=4)
    started = time.monotonic()
    for step in range(5):  # one in the slow backend's hands + 4 queued
        monitor.log({"loss": float(step)}, step=step)
    took = time.monotonic() - started
    assert took < Slow.delay / 2, f"log() waited for the slow backend ({took:.2f} s)"
    assert Fast.instances[0].got(5, timeout=Slow.delay / 2), "the fast backend was held up"
    assert Slow.instances[0].steps == []  # still in its first write
    monitor.close()
    assert Slow.instances[0].steps == [0, 1, 2, 3, 4]
    assert stored_steps(monitor) == [0, 1, 2, 3, 4]
    assert monitor.undelivered == {} and monitor.dropped == {}


@pytest.mark.parametrize(("dispatch", "kinds"), [
    ("process", ["thread", "process"]),  # Fast cannot be imported by a fresh interpreter
    ("thread", ["thread", "thread"]),
    ("background", ["thread", "thread"]),
    ("sync", ["inline", "inline"]),
])
def test_the_mode_is_each_backends_default_channel_and_one_fan_out_reaches_all(make, dispatch,
                                                                                 kinds):
    """``dispatch=`` picks the channel every backend gets by default; a class a writer process
    cannot import gets a thread channel while its neighbour keeps its writer, and one fan-out
    hands every call to both."""
    Fast.instances.clear()
    monitor = make([Fast, "jsonl"], dispatch=dispatch)
    assert [c.kind for c in monitor._dispatch.channels] == kinds
    assert [c.name for c in monitor._dispatch.channels] == monitor.backends == ["fast", "jsonl"]
    for step in range(3):
        monitor.log({"loss": float(step)}, step=step)
    monitor.flush()
    assert Fast.instances[0].steps == [0, 1, 2]
    assert stored_steps(monitor) == [0, 1, 2]
    monitor.close()
    assert monitor.undelivered == {} and monitor.dropped == {} and monitor.failures == {}


class Keeper:
    """Keeps each event's ``(tag, step, value)`` as handed to it, and the dicts of the rows."""

    name = "keeper"
    instances: ClassVar[list] = []

    def __init__(self, run) -> None:
        self.events: list[tuple[str, int, float]] = []
        Keeper.instances.append(self)

    @hookimpl
    def monitor_write(self, events):
        self.events.extend((e.tag, e.step, e.value) for e in events)


@pytest.mark.parametrize(("dispatch", "backends"), [
    ("process", ["jsonl"]),  # writers only: log() pickles the caller's dict as it is
    ("process", [Keeper, "jsonl"]),  # a thread channel beside the writer
    ("thread", [Keeper, "jsonl"]),
    ("sync", [Keeper, "jsonl"]),
])
def test_a_dict_changed_after_log_returns_changes_nothing_stored(make, dispatch, backends):
    """``log()`` takes its values when it is called: the caller reusing one dict for every
    step (as training loops do) stores each step's own values in every backend, whether the
    call went to the journal without a copy (writers only) or to a thread or in-line backend."""
    Keeper.instances.clear()
    monitor = make(backends, dispatch=dispatch)
    values = {"loss": 0.0, "lr": 1.0}
    for step in range(3):
        values["loss"], values["lr"] = float(step), float(10 * step)
        monitor.log(values, step=step)
    values["loss"] = values["lr"] = -1.0
    monitor.close()
    expected = [(tag, step, value) for step in range(3)
                for tag, value in (("loss", float(step)), ("lr", float(10 * step)))]
    assert read_rows(monitor.run) == expected
    if Keeper in backends:
        assert Keeper.instances[0].events == expected


def test_a_full_queue_blocks_log_by_default_and_loses_nothing(make):
    monitor = make([Gated, "jsonl"], queue_size=2)
    monitor.log({"x": 0.0}, step=0)
    gated = Gated.instances[0]
    assert gated.entered.wait(10)
    monitor.log({"x": 1.0}, step=1)
    monitor.log({"x": 2.0}, step=2)  # the queue is full now
    blocked = threading.Thread(target=monitor.log, args=({"x": 3.0},), kwargs={"step": 3})
    blocked.start()
    blocked.join(0.5)
    assert blocked.is_alive(), "log() did not wait for room in the full queue"
    gated.gate.set()
    blocked.join(10)
    assert not blocked.is_alive()
    monitor.close()
    assert gated.steps == [0, 1, 2, 3]
    assert stored_steps(monitor) == [0, 1, 2, 3]


def test_on_full_drop_counts_exactly_what_it_dropped_and_reports_it(make):
    Fast.instances.clear()
    monitor = make([Gated, Fast], queue_size=3, on_full="drop")
    monitor.log({"x": 0.0}, step=0)
    gated, fast = Gated.instances[0], Fast.instances[0]
    assert gated.entered.wait(10)  # step 0 is in the backend's hands; the queue is empty
    with pytest.warns(BackendWarning, match="'gated' is slower than the logging") as seen:
        for step in range(1, 10):
            monitor.log({"x": float(step)}, step=step)
            assert fast.got(step + 1, timeout=10)  # the fast backend's queue never fills
    assert len(seen) == 1  # once per backend
    assert monitor.dropped == {"gated": 6}  # steps 1-3 queued, 4-9 dropped
    gated.gate.set()
    with pytest.warns(BackendWarning, match="'gated': 6 call.* dropped"):
        monitor.close()
    assert gated.steps == [0, 1, 2, 3]
    assert fast.steps == list(range(10))  # the other backend got every call


def test_flush_timeout_reports_what_each_backend_has_not_written(make):
    monitor = make([Gated, "jsonl"])
    for step in range(3):
        monitor.log({"x": 1.0}, step=step)
    with pytest.raises(FlushTimeout, match="'gated': 3") as raised:
        monitor.flush(timeout=0.3)
    assert raised.value.pending == {"gated": 3}
    assert stored_steps(monitor) == [0, 1, 2]  # jsonl flushed in time
    Gated.instances[0].gate.set()
    monitor.flush()
    assert Gated.instances[0].steps == [0, 1, 2]


def test_close_timeout_gives_up_on_a_hung_backend_and_counts_what_it_had(make):
    monitor = make([Gated, "jsonl"])
    for step in range(4):
        monitor.log({"x": 1.0}, step=step)
    assert Gated.instances[0].entered.wait(10)
    started = time.monotonic()
    with pytest.warns(BackendWarning, match="'gated': 4 call.* not delivered"):
        monitor.close(timeout=0.3)
    assert time.monotonic() - started < 10  # the deadline, and room for a loaded machine
    assert monitor.undelivered == {"gated": 4}
    assert stored_steps(monitor) == [0, 1, 2, 3]
    Gated.instances[0].gate.set()


def test_strict_surfaces_a_workers_exception_on_the_next_call(make):
    monitor = make([FailsOnce, "jsonl"], strict=True)
    monitor.log({"x": 1.0}, step=0)  # fails on the backend's thread, not here
    with pytest.raises(ConnectionError, match="unreachable"):
        monitor.flush()
    monitor.log({"x": 2.0}, step=1)  # raised once; the backend works again
    monitor.close()
    assert monitor.failures == {"failsonce": 1}
    assert stored_steps(monitor) == [0, 1]


def test_strict_flush_flushes_every_other_backend_before_it_raises(make):
    """A strict failure kept from an earlier call is raised by ``flush()`` once the other
    backends have flushed, not instead of flushing them: the writer's rows, written slowly,
    are readable when the exception arrives."""
    monitor = make([FailsOnce, "faulty", "jsonl"], strict=True, faulty={"delay": 0.5})
    monitor.log({"x": 1.0}, step=0)  # fails on the backend's thread, at once
    deadline = time.monotonic() + 10
    while not monitor.failures and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ConnectionError, match="unreachable"):
        monitor.flush()
    assert read_steps(monitor.run) == [0]  # the faulty writer took 0.5 s to write it
    assert stored_steps(monitor) == [0]
    monitor.close()


def test_strict_raises_on_the_next_log_too(make):
    monitor = make([FailsOnce, "jsonl"], strict=True)
    monitor.log({"x": 1.0}, step=0)
    deadline = time.monotonic() + 10
    while not monitor.failures and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ConnectionError):
        monitor.log({"x": 2.0}, step=1)  # nothing of this call is written
    monitor.close()
    assert stored_steps(monitor) == [0]


def test_without_strict_a_worker_failure_is_warned_once_on_the_callers_thread(make):
    monitor = make([FailsOnce, "jsonl"])
    monitor.log({"x": 1.0}, step=0)
    with pytest.warns(BackendWarning, match="'failsonce' failed in monitor_write: "
                                            "ConnectionError") as seen:
        monitor.flush()
    assert seen[0].filename == __file__  # points at the caller
    monitor.log({"x": 2.0}, step=1)
    monitor.close()
    assert monitor.failures == {"failsonce": 1}


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dispatch": "threads"}, "dispatch='threads' must be 'process'"),
    ({"queue_size": 0}, "queue_size=0 must be an int >= 1"),
    ({"queue_size": True}, "queue_size=True must be an int >= 1"),
    ({"on_full": "wait"}, "on_full='wait' must be 'block'"),
])
def test_dispatch_options_are_checked(make, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make(**kwargs)


def test_the_config_file_takes_the_dispatch_options(tmp_path):
    from core_monitor.settings import load_monitor_config

    path = tmp_path / "monitor.toml"
    path.write_text('backends = ["jsonl"]\nproject = "p"\ndispatch = "sync"\nqueue_size = 5\n'
                    'on_full = "drop"\n')
    kwargs = load_monitor_config(path)
    assert (kwargs["dispatch"], kwargs["queue_size"], kwargs["on_full"]) == ("sync", 5, "drop")


# An interrupt inside log() never splits a call between backends ---------------------------

INTERRUPTED = r'''
import json, os, signal, sys, threading, time
from pathlib import Path
from core_monitor import Monitor, hookimpl

class Second:
    name = "second"
    def __init__(self, run):
        self.file = (Path(run.log_dir) / "second.txt").open("w")
    @hookimpl
    def monitor_write(self, events):
        self.file.writelines(f"{e.step}\n" for e in events)
    @hookimpl
    def monitor_close(self):
        self.file.close()

monitor = Monitor(["jsonl", Second], project="p", name="r", log_dir=sys.argv[1],
                  dispatch=sys.argv[2])
go, stop, stopped = threading.Event(), threading.Event(), threading.Event()
def interrupt():
    go.wait()
    while not stop.is_set():
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.0003)
    stopped.set()
threading.Thread(target=interrupt, daemon=True).start()
inside = False  # KeyboardInterrupt only while main is in the try below: never in the loop


def on_sigint(signum, frame):
    if inside:
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, on_sigint)
returned, interrupted = [], 0
go.set()
for step in range(20000):
    try:
        inside = True
        returned.append(monitor.log({"a": 1.0, "b": 2.0}, step=step))
        inside = False
    except KeyboardInterrupt:
        inside = False
        interrupted += 1
stop.set()
stopped.wait()
monitor.close()
print(json.dumps({"interrupted": interrupted, "returned": len(returned)}))
'''


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.heavy
def test_keyboard_interrupts_inside_log_never_split_a_call_between_backends(tmp_path):
    """Background dispatch only: in sync mode an interrupt can land inside a backend's SDK."""

    done = subprocess.run([sys.executable, "-c", INTERRUPTED, str(tmp_path), "background"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["interrupted"] > 0, "no interrupt landed inside log(); the test proves nothing"
    jsonl = [s for t, s, _ in read_rows(RunInfo("p", "r", log_dir=tmp_path)) if t == "a"]
    second = [int(line) for line in (tmp_path / "second.txt").read_text().split()[::2]]
    assert jsonl == second, "an interrupted log() reached one backend and not the other"
    assert len(jsonl) >= result["returned"]
    assert sorted(set(jsonl)) == jsonl  # each step at most once, in order


# The default dispatch from the environment (EXPERIMENT_MONITORS_DISPATCH) ------------------

def test_dispatch_env_names_the_default_mode(make, monkeypatch):
    monkeypatch.setenv("EXPERIMENT_MONITORS_DISPATCH", "sync")
    assert make().dispatch == "sync"
    assert make(dispatch="thread").dispatch == "thread"  # an explicit dispatch wins


def test_dispatch_env_unset_or_empty_means_process(monkeypatch):
    from core_monitor.dispatch import default_dispatch

    monkeypatch.delenv("EXPERIMENT_MONITORS_DISPATCH", raising=False)
    assert default_dispatch(None) == "process"
    monkeypatch.setenv("EXPERIMENT_MONITORS_DISPATCH", " ")
    assert default_dispatch(None) == "process"


def test_dispatch_env_naming_no_mode_is_a_config_error(make, monkeypatch):
    from core_monitor import ConfigError

    monkeypatch.setenv("EXPERIMENT_MONITORS_DISPATCH", "procss")
    with pytest.raises(ConfigError, match=r"EXPERIMENT_MONITORS_DISPATCH='procss'.*'process'"):
        make()
