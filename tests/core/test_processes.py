"""Writer processes (``dispatch="process"``, the default): isolation, start-up, crashes, drops,
forks and priority, against the installed test backends ``jsonl`` and ``faulty`` (which
segfaults, hangs, exits or raises on command), read back from their files. The first-party
trackers after a crash of the training process: tests/plugins/test_crash.py."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
import warnings
from pathlib import Path

import pytest
from faulty_monitor import read_calls, read_steps
from interpreter import run_python
from jsonl_monitor import read_rows
from trackers import READERS

from core_monitor import BackendWarning, ConfigError, Monitor, RunInfo, hookimpl
from core_monitor.dispatch.wire import DRAIN_SECONDS
from core_monitor.dispatch.writer import NICE, in_autogroup
from core_monitor.errors import BackendError, FlushTimeout, RemoteTraceback, WriterDied

#: Seconds a deadline may be overrun on a loaded machine (reaping, a thread's wake-up, a CPU
#: hog on every core): far below what a call stuck behind a hung writer would take (forever),
#: so the check still tells a kept deadline from a missed one.
SLACK = 10.0

# Every test here is about writer processes: the users' default dispatch, not the suite's thread.
pytestmark = pytest.mark.process


def run_of(monitor: Monitor) -> RunInfo:
    return monitor.run


def jsonl_steps(monitor: Monitor) -> list[int]:
    return [step for _, step, _ in read_rows(monitor.run)]


def writer_pid(monitor: Monitor, name: str = "faulty") -> int:
    """The pid the backend recorded at its start (writers start behind ``Monitor()``)."""
    deadline = time.monotonic() + 60
    while True:
        found = [detail for hook, detail in read_calls(monitor.run) if hook == "start"]
        if found or time.monotonic() > deadline:
            return found[0]
        time.sleep(0.02)


def gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (and been reaped) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def make(monitor_factory, tmp_path):
    def make(backends=("faulty", "jsonl"), **kwargs):
        kwargs.setdefault("project", "p")
        kwargs.setdefault("name", "r")
        kwargs.setdefault("log_dir", tmp_path)
        return monitor_factory(list(backends), **kwargs)
    return make


def test_each_backend_runs_in_a_writer_process_of_its_own(make):
    monitor = make()
    assert monitor.dispatch == "process"
    for step in range(5):
        monitor.log({"x": float(step)}, step=step)
    monitor.flush()
    pid = writer_pid(monitor)
    assert pid != os.getpid()
    assert read_steps(monitor.run) == list(range(5))
    assert jsonl_steps(monitor) == list(range(5))
    monitor.close()
    assert gone(pid, 10)  # the writer exits with the monitor, and is reaped
    assert [hook for hook, _ in read_calls(monitor.run)][-2:] == ["flush", "close"]


def test_a_writer_starts_without_a_second_copy_of_its_module(make, tmp_path):
    """Writers run ``python -m core_monitor.dispatch.writer``: nothing the training process
    imports may import that module, or each writer holds two copies of it (one as
    ``__main__``) and ``runpy`` prints a ``RuntimeWarning`` on every start."""
    from interpreter import modules_after

    loaded = modules_after("import core_monitor; from core_monitor import Monitor", tmp_path)
    assert "core_monitor.dispatch.writer" not in loaded
    done = run_python("""
        import sys
        from core_monitor import Monitor
        with Monitor(["jsonl"], project="p", name="r", log_dir=sys.argv[1],
                     dispatch="process") as monitor:
            monitor.log({"x": 1.0}, step=1)
        """, tmp_path)
    assert "RuntimeWarning" not in done.stderr, done.stderr


def autogroup_nice(pid: int | str) -> int:
    """The nice value of the scheduling group of ``pid``'s session (Linux autogroup)."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def test_a_writer_runs_at_a_lower_priority_than_the_training_process(make):
    """Its own nice value, and on Linux with autogroup its session's group's and that of the
    session its SDK started (wandb's service): a process in a session of its own would
    otherwise weigh as much as the training process's whole session. The training process's
    own group keeps its nice value."""
    # Empty where autogroup is off or the tests run in a CPU cgroup of their own (CI's machine).
    mine = autogroup_nice("self") if in_autogroup("self") else None
    # Three groups lowered at once: the kernel's rate limit makes the writers retry.
    monitor = make(["faulty", "jsonl"], faulty={"service": True}, wait=True)
    pids = [writer.process.pid for writer in monitor._dispatch.writers]
    service = [detail for hook, detail in read_calls(monitor.run) if hook == "service"]
    assert len(service) == 1
    deadline = time.monotonic() + 10  # it lowers itself right after it reported ready
    for pid in pids:
        while os.getpriority(os.PRIO_PROCESS, pid) <= os.getpriority(os.PRIO_PROCESS, 0):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    if mine is not None:
        for pid in (*pids, *service):
            while autogroup_nice(pid) != NICE:
                assert time.monotonic() < deadline, autogroup_nice(pid)
                time.sleep(0.02)
        assert autogroup_nice("self") == mine
    monitor.close()


def test_writers_started_behind_monitor_take_turns_to_start(make, monkeypatch):
    """With one start slot (a 2-core machine: ``start_slots()`` is the CPUs less one), a writer
    imports and starts its backend only once another has started, so that the loop run right
    after ``Monitor()`` keeps a core. Each writer reports when its start began and ended.
    (``wait=True`` starts them all at once: ``Monitor()`` waits for every writer anyway.)"""
    from core_monitor.dispatch import host

    monkeypatch.setattr(host, "start_slots", lambda: 1)
    monitor = make(["faulty", "jsonl"], faulty={"start_delay": 3.0})
    monitor.flush()  # every writer started
    (_, ended), (second, _) = sorted(w.facts["started"] for w in monitor._dispatch.writers)
    assert second >= ended  # the second began once the first had started
    for step in range(5):
        monitor.log({"x": float(step)}, step=step)
    monitor.close()
    assert read_steps(monitor.run) == jsonl_steps(monitor) == list(range(5))


def test_a_segfault_in_one_backend_affects_only_that_backend(make):
    # Without the run journal, as before it: a writer that dies is not started again (with
    # it, see tests/core/test_journal.py::test_a_killed_writer_starts_again_at_its_cursor...)
    monitor = make(faulty={"segfault_at": 3}, journal=False)
    with pytest.warns(BackendWarning, match=r"'faulty' failed .*WriterDied.*SIGSEGV"):
        for step in range(3):
            monitor.log({"x": float(step)}, step=step)
        monitor.flush()  # what the backend holds in its own buffers dies with its process
        for step in range(3, 10):
            monitor.log({"x": float(step)}, step=step)
        monitor.flush()
        time.sleep(0.5)  # the report reaches the caller at its next call
        monitor.log({"x": 10.0}, step=10)
    with pytest.warns(BackendWarning, match=r"'faulty': 8 call\(s\) were not delivered"):
        monitor.close()
    assert jsonl_steps(monitor) == list(range(11))
    assert read_steps(monitor.run) == [0, 1, 2]
    assert monitor.failures == {"faulty": 1}
    assert monitor.undelivered == {"faulty": 8}  # steps 3-10: exactly what it never wrote


def test_strict_reraises_a_writer_failure_with_its_type_and_traceback(make):
    monitor = make(faulty={"raise_at": 1}, strict=True)
    monitor.log({"x": 0.0}, step=0)
    monitor.log({"x": 1.0}, step=1)
    with pytest.raises(ConnectionError, match="faulty: step 1 is unreachable") as raised:
        monitor.flush()
    cause = raised.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "in monitor_write" in cause.text and "ConnectionError" in cause.text
    monitor.log({"x": 2.0}, step=2)
    monitor.close()
    assert read_steps(monitor.run) == [0, 2]
    assert jsonl_steps(monitor) == [0, 1, 2]


def test_without_strict_a_writer_failure_is_warned_once_at_the_callers_next_call(make):
    monitor = make(faulty={"raise_at": 0})
    monitor.log({"x": 0.0}, step=0)
    with pytest.warns(BackendWarning, match="'faulty' failed in monitor_write: "
                                            "ConnectionError: faulty: step 0") as seen:
        monitor.flush()
    assert seen[0].filename == __file__
    monitor.close()
    assert monitor.failures == {"faulty": 1}


def test_a_hung_backend_is_given_up_on_at_the_close_timeout_and_named(make):
    monitor = make(faulty={"hang_at": 2})
    for step in range(6):
        monitor.log({"x": float(step)}, step=step)
    pid = writer_pid(monitor)
    started = time.monotonic()
    with pytest.warns(BackendWarning, match=r"'faulty': 4 call\(s\) were not delivered"):
        monitor.close(timeout=1.0)
    assert time.monotonic() - started < 1.0 + SLACK
    assert monitor.undelivered == {"faulty": 4}
    assert jsonl_steps(monitor) == list(range(6))
    assert gone(pid, 5)  # killed and reaped, not left behind


def test_with_wait_a_start_failure_raises_in_monitor_with_the_backends_own_error(make, tmp_path):
    # faulty refuses bad=True in its constructor, in the writer: only the start sees it.
    with pytest.raises(ConfigError, match=r"faulty: bad=True is not a value this backend "
                                          r"accepts; pass bad=False"):
        make(faulty={"bad": True}, wait=True)
    assert read_rows(RunInfo(project="p", name="r", log_dir=tmp_path)) == []


def test_a_log_dir_that_is_a_file_fails_at_start_as_in_the_training_process(make, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(BackendWarning, match=r"'faulty' failed in start: (FileExistsError|"
                                            r"NotADirectoryError)") as seen:
        monitor = make(("faulty",), log_dir=blocker)
    assert seen[0].filename == __file__  # replayed at the caller's Monitor(...) line
    assert monitor.backends == []
    assert monitor.failures == {"faulty": 1}
    monitor.close()


def test_a_class_defined_in_a_test_runs_in_a_thread_with_one_info_line(make, caplog):
    class Local:
        name = "local"

        def __init__(self, run):
            self.steps = []

        @hookimpl
        def monitor_write(self, events):
            self.steps.extend(e.step for e in events)

    with caplog.at_level(logging.INFO, logger="core_monitor"):
        monitor = make(("jsonl", Local))
    assert [r.getMessage() for r in caplog.records if "worker thread" in r.getMessage()] == [
        "backend 'local' runs in a worker thread, not a writer process: its class "
        "test_a_class_defined_in_a_test_runs_in_a_thread_with_one_info_line.<locals>.Local "
        "is defined in test_processes (not importable)"]
    monitor.log({"x": 1.0}, step=7)
    monitor.flush()
    assert monitor._dispatch.get("local").instance.steps == [7]
    assert jsonl_steps(monitor) == [7]
    assert monitor.backends == ["jsonl", "local"]
    monitor.close()


def test_drop_counts_exactly_beside_a_backend_that_keeps_up(make):
    """A slow backend (50 ms per write) beside a fast one, a small buffer, calls as fast as
    they come (a loaded machine slows the calls down too, so they must outrun 50 ms, not 5):
    the slow one drops, and each backend counts each drop exactly (what is stored plus what is
    counted is every call). That the fast one drops nothing is a speed, measured in
    benchmarks/ (a CPU hog on every core can leave its writer unscheduled past the grace: a
    clean-clone run of the suite beside a CPU hog on each core once made the fast one warn too,
    so its warning is allowed here; ``pytest.warns(match=...)`` would re-raise it)."""
    monitor = make(faulty={"delay": 0.05}, queue_size=2, on_full="drop")
    tags = {f"t{i}": float(i) for i in range(10)}
    with pytest.warns(BackendWarning) as caught:
        for step in range(300):
            monitor.log(tags, step=step)
    assert any("'faulty' is slower than the logging" in str(w.message) for w in caught)
    with pytest.warns(BackendWarning, match="dropped"):
        monitor.close()
    stored = sorted(set(read_steps(monitor.run)))
    assert monitor.dropped["faulty"] > 0
    assert len(stored) + monitor.dropped["faulty"] == 300
    assert len(set(jsonl_steps(monitor))) + monitor.dropped.get("jsonl", 0) == 300


CRASHING = '''
import ctypes, os, signal, sys
from core_monitor import Monitor
monitor = Monitor(["faulty", "jsonl"], project="p", name="r", log_dir=sys.argv[1])
for step in range(300):
    monitor.log({f"t{i}": float(step + i) for i in range(10)}, step=step)
how = sys.argv[2]
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "exit":
    os._exit(1)
elif how == "segfault":
    ctypes.string_at(0)
'''


KILLED_WHILE_STARTING = f'''
import os, signal, sys
from core_monitor import Monitor
monitor = Monitor(["faulty", "jsonl"], project="p", name="r", log_dir=sys.argv[1],
                  faulty={{"start_delay": {DRAIN_SECONDS + 5.0}}})
for step in range(300):
    monitor.log({{"x": float(step)}}, step=step)
os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.mark.heavy
def test_a_trainer_killed_while_a_writer_starts_loses_nothing_past_the_drain_limit(tmp_path):
    """Writers start behind Monitor(): a trainer may die while one still imports its SDK. Its
    drain limit counts from the end of its start, so a start longer than the limit (faulty
    sleeps DRAIN_SECONDS + 5 s in its constructor) still writes every call."""
    done = run_python(KILLED_WHILE_STARTING, tmp_path, check=False, timeout=120)
    assert done.returncode == -signal.SIGKILL
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    deadline = time.monotonic() + DRAIN_SECONDS + 60
    while "close" not in [hook for hook, _ in read_calls(run)]:
        assert time.monotonic() < deadline, read_calls(run)
        time.sleep(0.2)
    assert read_steps(run) == list(range(300))
    assert [hook for hook, _ in read_calls(run)][-3:] == ["flush", "crash", "close"]


@pytest.mark.heavy
@pytest.mark.parametrize("how", ["kill", "exit", "segfault"])
def test_a_dead_training_process_loses_no_row_and_the_writer_marks_the_crash(tmp_path, how):
    done = run_python(CRASHING, tmp_path, how, check=False, timeout=120)
    assert done.returncode != 0
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    deadline = time.monotonic() + 60
    # Each writer drains on its own (they start behind Monitor()): wait for both to finish.
    while "close" not in [hook for hook, _ in read_calls(run)] or len(read_rows(run)) < 3000:
        assert time.monotonic() < deadline, (read_calls(run), len(read_rows(run)))
        time.sleep(0.1)
    assert sorted(set(read_steps(run))) == list(range(300))
    assert len(read_steps(run)) == 3000
    assert len(read_rows(run)) == 3000
    hooks = [hook for hook, _ in read_calls(run)]
    assert hooks[-3:] == ["flush", "crash", "close"]
    reason = next(detail for hook, detail in read_calls(run) if hook == "crash")
    assert "ended without closing the monitor" in reason
    assert gone(read_calls(run)[0][1], 10)


EXITING = '''
import sys
from core_monitor import Monitor
monitor = Monitor(["faulty"], project="p", name="r", log_dir=sys.argv[1])
monitor.log({"x": 1.0}, step=0)
'''


def test_exit_without_close_closes_the_writer_normally(tmp_path):
    run_python(EXITING, tmp_path)
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    assert read_steps(run) == [0]
    assert [hook for hook, _ in read_calls(run)][1:] == ["flush", "close"]  # no crash


FORKING = '''
import os, signal, sys, time
from core_monitor import Monitor
monitor = Monitor(["faulty"], project="p", name="r", log_dir=sys.argv[1])
monitor.log({"x": 1.0}, step=0)
pid = os.fork()
if pid == 0:
    try:
        monitor.log({"x": 2.0}, step=1)
    except RuntimeError:
        pass
    time.sleep(30)  # a DataLoader worker that lives on: it must not keep the writer alive
    os._exit(0)
print(pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the trainer dies; its forked child lives on
'''


@pytest.mark.heavy
def test_a_forked_child_neither_writes_nor_keeps_the_writer_alive(tmp_path):
    done = run_python(FORKING, tmp_path, check=False)
    child = int(done.stdout.split()[-1])
    try:
        run = RunInfo(project="p", name="r", log_dir=tmp_path)
        deadline = time.monotonic() + 30
        while "close" not in [hook for hook, _ in read_calls(run)]:
            assert time.monotonic() < deadline, read_calls(run)
            time.sleep(0.1)
        assert read_steps(run) == [0]
        assert [hook for hook, _ in read_calls(run)][1:] == ["flush", "crash", "close"]
        assert gone(read_calls(run)[0][1], 10)
    finally:
        os.kill(child, signal.SIGKILL)


def test_the_writer_error_types_are_exported_where_documented():
    assert issubclass(WriterDied, BackendError)
    assert BackendError("pkg.Error", "text").remote_type == "pkg.Error"


HUNG_TRAINER = '''
import json, os, signal, sys, time
from core_monitor import Monitor
monitor = Monitor(["faulty"], project="p", name="r", log_dir=sys.argv[1], dispatch="process",
                  faulty={"hang_at": 1})
for step in range(3):
    monitor.log({"x": float(step)}, step=step)
writer = monitor._dispatch.writers[0].process.pid
time.sleep(1.0)  # the writer is inside the hook at step 1 by now
fds = {}
for fd in os.listdir(f"/proc/{writer}/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/{writer}/fd/{fd}")
    except OSError:
        pass
mine = {name: os.readlink(f"/proc/self/fd/{fd}") for name, fd in (("stdout", 1), ("stderr", 2))}
print(json.dumps({"writer": writer, "fds": fds, "mine": mine}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.mark.process
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_a_writer_hung_in_a_hook_never_outlives_its_trainer_by_more_than_the_drain_limit(
        tmp_path):
    # capture_output: subprocess.run returns when the trainer dies, as a shell or a CI step
    # waiting on the job's output does, because the writer holds neither stdout nor stderr.
    done = run_python(HUNG_TRAINER, tmp_path, check=False, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-4000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    held = set(seen["fds"].values())
    assert not held & set(seen["mine"].values()), seen
    assert all(link.startswith(("pipe:", "/dev/null", "/memfd:", "anon_inode:"))
               or link.startswith(str(tmp_path)) for link in held), held
    assert gone(seen["writer"], DRAIN_SECONDS + 10)
    calls = read_calls(RunInfo(project="p", name="r", log_dir=tmp_path))
    assert [hook for hook, _ in calls] == ["start"]  # ended by its watchdog, still in the hook


@pytest.mark.process
@pytest.mark.parametrize("tags", [5, 8, 40])
@pytest.mark.parametrize("order", [("faulty", "jsonl"), ("jsonl", "faulty")])
def test_flush_and_close_keep_their_deadline_whatever_a_hung_writers_pipe_holds(
        make, tags, order):
    """The case of issue 34: a 132-byte frame (5 tags) left a full pipe 4 bytes that a stop
    frame behind it could never take. Control requests go on a pipe of their own, naming the
    journal's next record."""
    monitor = make(order, dispatch="process", queue_size=1, on_full="drop",
                   faulty={"hang_at": 0})
    # jsonl may drop too: its one-page pipe holds a few calls, and a loaded machine can leave
    # its writer unscheduled past the drop grace (counted below; this test is about deadlines)
    with pytest.warns(BackendWarning) as caught:
        for step in range(300):
            monitor.log({f"t{i}": float(step) for i in range(tags)}, step=step)
    assert any("'faulty' is slower than the logging" in str(w.message) for w in caught)
    started = time.monotonic()
    with pytest.raises(FlushTimeout) as late:
        monitor.flush(timeout=1.0)
    assert time.monotonic() - started < 1.0 + SLACK
    assert "faulty" in late.value.pending
    pid = writer_pid(monitor)
    started = time.monotonic()
    with pytest.warns(BackendWarning) as caught:  # and jsonl's drops, if any (above)
        monitor.close(timeout=1.0)
    assert any(re.search(r"'faulty': \d+ call\(s\) were not delivered", str(w.message))
               for w in caught)
    assert time.monotonic() - started < 1.0 + SLACK
    assert "jsonl" not in monitor.failures  # a healthy writer is never reported dead
    assert "jsonl" not in monitor.undelivered
    assert len(jsonl_steps(monitor)) // tags + monitor.dropped.get("jsonl", 0) == 300
    assert gone(pid, 5)


@pytest.mark.process
@pytest.mark.parametrize("slow_first", [True, False])
def test_every_backend_counts_its_drops_exactly_beside_a_slow_one(make, slow_first):
    """The case of issue 34: ``queue_size=8``, ``on_full="drop"``, a backend taking 20 ms per
    write beside Trackio, TensorBoard and jsonl, 300 calls as fast as they come: the slow one
    drops, and every backend stores or counts each call, exactly. That the fast ones drop
    nothing (a writer reads its pipe as soon as bytes arrive) is a speed, measured in
    benchmarks/: a CPU hog on every core can leave a writer unscheduled past the drop grace.

    wandb is not among the fast ones: one of its hooks now and then takes longer than the 50 ms
    drop grace on a loaded 2-core machine (its Go service shares the cores), and a call that
    finds the pipe full then is rightly dropped; seen with the newest wandb on Python 3.13."""
    fast = ["jsonl", "trackio", "tensorboard"]
    order = ["faulty", *fast] if slow_first else [*fast, "faulty"]
    monitor = make(order, dispatch="process", queue_size=8, on_full="drop",
                   faulty={"delay": 0.02})
    tags = {f"t{i}": float(i) for i in range(10)}
    # A fast one may drop too, counted (below): the test is about exact counts, not speed.
    with pytest.warns(BackendWarning) as caught:
        for step in range(300):
            monitor.log(tags, step=step)
    assert any("'faulty' is slower than the logging" in str(w.message) for w in caught)
    with pytest.warns(BackendWarning, match="dropped"):
        monitor.close()
    assert monitor.dropped["faulty"] > 0
    assert monitor.failures == {}
    assert len(set(read_steps(monitor.run))) + monitor.dropped["faulty"] == 300
    assert len(set(jsonl_steps(monitor))) + monitor.dropped.get("jsonl", 0) == 300
    for name in ("trackio", "tensorboard"):
        steps = [step for _, step, _ in READERS[name](monitor.run)]
        assert len(steps) == 10 * len(set(steps)), name  # a call is stored whole or not at all
        assert len(set(steps)) + monitor.dropped.get(name, 0) == 300, name


@pytest.mark.process
def test_monitor_returns_before_any_writer_is_ready_and_loses_nothing_logged_meanwhile(make):
    monitor = make(dispatch="process", faulty={"start_delay": 3.0})  # wait=False: the default
    # The backend records its start after its 3 s sleep: Monitor() did not wait for it.
    assert read_calls(monitor.run) == []
    for step in range(50):
        monitor.log({"x": float(step)}, step=step)
    monitor.close()
    assert read_steps(monitor.run) == list(range(50))
    assert jsonl_steps(monitor) == list(range(50))
    assert [hook for hook, _ in read_calls(monitor.run)] == ["start", "flush", "close"]


@pytest.mark.process
def test_close_out_of_time_leaves_a_starting_writer_to_write_everything_by_itself(make, caplog):
    """Killing a writer still importing its SDK (a slow start on a loaded node, or SIGTERM soon
    after ``Monitor()``) would lose every call it holds while nothing is wrong with it."""
    monitor = make(dispatch="process", faulty={"start_delay": 3.0})
    for step in range(50):
        monitor.log({"x": float(step)}, step=step)
    writers = list(monitor._dispatch.writers)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="core_monitor"):
        monitor.close(timeout=0.5)
    assert time.monotonic() - began < 0.5 + SLACK
    # (jsonl's writer is named too when a loaded machine has not started it within 0.5 s)
    assert re.search(r"backend\(s\) ('\w+', )*'faulty'(, '\w+')*: the writer process was "
                     "still starting", caplog.text), caplog.text
    assert monitor.undelivered == {} and monitor.failures == {}
    for writer in writers:  # each ends by itself once it has written everything
        writer.process.wait(timeout=60)
        assert writer.process.returncode == 0, writer.name
    assert jsonl_steps(monitor) == list(range(50))
    assert read_steps(monitor.run) == list(range(50))
    assert [hook for hook, _ in read_calls(monitor.run)] == ["start", "flush", "close"]


@pytest.mark.process
def test_a_start_failure_only_the_backend_sees_is_raised_at_the_next_call_when_strict(make):
    monitor = make(dispatch="process", faulty={"bad": True}, strict=True, wait=False)
    with pytest.raises(ConfigError, match="faulty: bad=True is not a value"):
        for step in range(1000):  # until the writer's answer has come back
            monitor.log({"x": float(step)}, step=step)
            time.sleep(0.01)
    monitor.close()
    assert monitor.failures == {"faulty": 1}
    assert monitor.undelivered == {}
    assert jsonl_steps(monitor) == list(range(len(jsonl_steps(monitor))))
    assert jsonl_steps(monitor)  # the other backend got every call before the report


@pytest.mark.process
def test_a_start_failure_is_a_warning_at_the_next_call_and_the_others_lose_nothing(make):
    monitor = make(dispatch="process", faulty={"bad": True}, wait=False)
    writer = next(w for w in monitor._dispatch.writers if w.name == "faulty")
    writer.process.wait(timeout=60)  # it ended after its start failed
    with pytest.warns(BackendWarning, match="'faulty' failed in start: ConfigError: faulty: "
                                            "bad=True"):
        monitor.log({"x": 0.0}, step=0)
    for step in range(1, 20):
        monitor.log({"x": float(step)}, step=step)
    monitor.close()
    assert monitor.failures == {"faulty": 1}
    assert monitor.undelivered == {}
    assert jsonl_steps(monitor) == list(range(20))


@pytest.mark.process
def test_flush_after_a_start_failure_reports_the_failure_not_a_timeout(make):
    """A writer whose start failed has ended, so its flush request cannot be written: it is
    not waited for (it holds nothing), and ``flush()`` reports the start failure, never a
    ``FlushTimeout`` saying ``flush(timeout=None)`` ran out of time."""
    monitor = make(dispatch="process", faulty={"bad": True}, wait=False)
    writer = next(w for w in monitor._dispatch.writers if w.name == "faulty")
    writer.process.wait(timeout=60)  # it ended after its start failed
    with pytest.warns(BackendWarning, match="'faulty' failed in start: ConfigError"):
        monitor.flush()
    monitor.log({"x": 1.0}, step=1)
    monitor.close()
    assert monitor.failures == {"faulty": 1}
    assert jsonl_steps(monitor) == [1]


@pytest.mark.process
def test_wait_false_still_reports_a_log_dir_that_is_a_file_in_monitor(make, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(BackendWarning, match=r"'faulty' failed in start: (FileExistsError|"
                                            r"NotADirectoryError)") as seen:
        monitor = make(("faulty",), log_dir=blocker, dispatch="process", wait=False)
    assert seen[0].filename == __file__
    assert monitor.backends == []
    assert monitor.failures == {"faulty": 1}
    monitor.close()


START_FAILS = """
import logging, sys
if sys.argv[1] == "debug":
    logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s %(message)s")
from core_monitor import Monitor
monitor = Monitor(["faulty", "jsonl"], project="p", name="r", log_dir="runs",
                  dispatch="process", faulty={"bad": True})
monitor.log({"x": 1.0}, step=0)
monitor.close()
"""


@pytest.mark.process
def test_a_backend_failing_to_start_is_one_line_and_its_traceback_only_at_debug(tmp_path):
    done = run_python(START_FAILS, "plain", cwd=tmp_path, timeout=120)
    reports = [line for line in done.stderr.splitlines() if "failed in start" in line]
    assert len(reports) == 1, done.stderr  # was: the logger's line, then the warning's
    assert "BackendWarning: backend 'faulty' failed in start: ConfigError" in reports[0]
    assert "Traceback" not in done.stderr  # was: the writer's and the chained one, 15 lines
    debug = run_python(START_FAILS, "debug", cwd=tmp_path, timeout=120)
    assert debug.stderr.count("ERROR core_monitor backend 'faulty' failed in start") == 1
    assert "DEBUG core_monitor the traceback of: backend 'faulty'" in debug.stderr
    assert debug.stderr.count("faulty_monitor/__init__.py") == 1, debug.stderr  # raised here


@pytest.mark.process
def test_a_writer_stopped_while_finishing_its_run_says_nothing_was_lost(make, caplog):
    """A forgotten ``close()`` closes at exit within a deadline; an SDK slow to finish its run
    (SwanLab's) is stopped then, after writing every call: that is no loss."""
    monitor = make(dispatch="process", faulty={"finish_delay": 60.0})
    for step in range(20):
        monitor.log({"x": float(step)}, step=step)
    monitor.flush()
    with caplog.at_level(logging.WARNING, logger="core_monitor"), warnings.catch_warnings():
        warnings.simplefilter("error")  # no BackendWarning of calls not delivered
        monitor.close(timeout=5.0)
    assert monitor.undelivered == {}
    assert "not delivered" not in caplog.text and "was killed" not in caplog.text
    assert "'faulty': every call was written, nothing logged was lost" in caplog.text
    assert read_steps(monitor.run) == list(range(20))
    assert [hook for hook, _ in read_calls(monitor.run)][-1] == "close"
