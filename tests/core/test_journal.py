"""The run journal (``core_monitor.journal``): records, torn writes, segments, cursors, and
``monitors sync`` (``core_monitor.syncing``) against the JSON-lines test backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
from faulty_monitor import read_calls, read_steps
from interpreter import KILL_THE_JOB
from jsonl_monitor import read_rows

from core_monitor import BackendWarning, ConfigError, ConfigWarning, Monitor, RunInfo
from core_monitor import journal as J
from core_monitor.cli import main as monitors
from core_monitor.events import Batch
from core_monitor.syncing import sync_journal

DISPATCHES = ["process", "thread", "sync"]


def frame(step: int) -> bytes:
    return J.wire.encode((J.wire.WRITE_ROWS, ((step, 0.0, {"a": float(step)}),)))


def steps_of(folder) -> list[int]:
    return [kwargs["events"].rows[0][0] for _, hook, kwargs in J.calls(folder)
            if hook == "monitor_write"]


def test_a_torn_last_record_is_ignored_and_the_next_writer_goes_on(tmp_path):
    journal = J.Journal(tmp_path)
    for step in range(3):
        journal.append(frame(step))
    record = J.HEADER.pack(len(frame(3)), J.zlib.crc32(frame(3))) + frame(3)
    os.write(journal.fd, record[:-5])  # SIGKILL inside the write of the fourth record
    journal.forget()
    assert steps_of(tmp_path) == [0, 1, 2]
    assert J.end_seq(tmp_path) == 3
    again = J.Journal(tmp_path)  # the next attempt: a new segment after the torn one
    assert again.append(frame(7)) == 3
    again.close()
    assert steps_of(tmp_path) == [0, 1, 2, 7]


def test_a_record_failing_its_checksum_ends_the_segment(tmp_path):
    journal = J.Journal(tmp_path)
    for step in range(3):
        journal.append(frame(step))
    journal.forget()
    path = J.segment_paths(tmp_path)[0]
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF  # a bit flipped in the last record's payload
    path.write_bytes(bytes(data))
    assert steps_of(tmp_path) == [0, 1]


def test_segments_roll_and_go_once_every_cursor_passed_them(tmp_path):
    journal = J.Journal(tmp_path, segment_bytes=200)
    journal.start(RunInfo(project="p", name="r"), [("a", "m", "C", {}), ("b", "m", "C", {})])
    for step in range(20):
        journal.append(frame(step))
    segments = J.segment_paths(tmp_path)
    assert len(segments) > 3
    journal.write_cursor("a", 15)
    assert journal.collect() == []  # "b" has confirmed nothing
    journal.write_cursor("b", 10)
    deleted = journal.collect()
    assert deleted and all(J.first_seq(nxt) <= 10 for nxt in segments[1:len(deleted) + 1])
    assert steps_of(tmp_path)[-1] == 19 and J.end_seq(tmp_path) == 21
    assert all(kwargs["events"].rows[0][0] >= 9 for _, hook, kwargs in J.calls(tmp_path, 10)
               if hook == "monitor_write")


def test_keep_journal_deletes_no_segment(tmp_path):
    journal = J.Journal(tmp_path, keep=True, segment_bytes=200)
    journal.start(RunInfo(project="p", name="r"), [("a", "m", "C", {})])
    for step in range(20):
        journal.append(frame(step))
    journal.write_cursor("a", 21)
    count = len(J.segment_paths(tmp_path))
    journal.close()
    assert len(J.segment_paths(tmp_path)) == count + 0


def test_a_cursor_never_goes_back(tmp_path):
    J.write_cursor(tmp_path, "a", 5)
    J.write_cursor(tmp_path, "a", 3)
    assert J.read_cursor(tmp_path, "a") == 5
    assert J.read_cursor(tmp_path, "b") == 0


@pytest.mark.parametrize("dispatch", DISPATCHES)
def test_flush_and_close_move_each_backends_cursor(make, tmp_path, dispatch):
    monitor = make(log_dir=tmp_path, dispatch=dispatch, wait=True)
    folder = J.journal_folder(monitor.run)
    assert folder == tmp_path / ".journal" / "p" / "r"
    for step in range(5):
        monitor.log({"a": float(step)}, step=step)
    assert steps_of(folder) == list(range(5))  # on disk before log() returned
    monitor.flush()
    assert J.read_cursor(folder, "jsonl") == 6  # the START record and 5 calls
    monitor.log({"a": 9.0}, step=9)
    monitor.close()
    assert J.read_cursor(folder, "jsonl") == 7
    assert J.journal_left(folder, ["jsonl"]) == {}
    assert [s for _, s, _ in read_rows(monitor.run)] == [0, 1, 2, 3, 4, 9]


def test_journal_dir_and_rank_place_the_journal(make, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monitor = make(log_dir=tmp_path / "runs", journal_dir=tmp_path / "local",
                   rank_zero_only=False, dispatch="sync")
    monitor.log({"a": 1.0})
    monitor.close()
    assert steps_of(tmp_path / "local" / "p" / "r" / "rank-2") == [0]


def test_no_journal_when_asked(make, tmp_path):
    monitor = make(log_dir=tmp_path, journal=False, dispatch="sync")
    monitor.log({"a": 1.0})
    monitor.close()
    assert not (tmp_path / ".journal").exists()


def test_a_backend_that_raises_keeps_its_cursor_below_that_call(make, tmp_path):
    monitor = make(["jsonl", "faulty"], log_dir=tmp_path, dispatch="process", wait=True,
                   faulty={"raise_at": 2})
    for step in range(4):
        monitor.log({"a": float(step)}, step=step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monitor.close()
    folder = J.journal_folder(monitor.run)
    assert J.read_cursor(folder, "jsonl") == 5
    assert J.read_cursor(folder, "faulty") == 3  # below the call that raised (seq 3)
    assert J.journal_left(folder, ["faulty"]) == {"faulty": 2}


SLOW = """
import sys
from core_monitor import Monitor
monitor = Monitor(["jsonl", "faulty"], project="p", name="r", log_dir=sys.argv[1],
                  faulty={"delay": float(sys.argv[2])}, wait=True)
for step in range(40):
    monitor.log({"a": float(step)}, step=step)
monitor.flush(timeout=60) if sys.argv[3] == "flush" else None
print("logged", flush=True)
monitor.close(timeout=float(sys.argv[4]))
"""


def test_close_timeout_names_the_backend_the_count_and_the_sync_command(tmp_path):
    result = subprocess.run([sys.executable, "-c", SLOW, str(tmp_path), "0.2", "no", "0.5"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / ".journal" / "p" / "r"
    lines = [line for line in result.stderr.splitlines() if "monitors sync" in line]
    assert len({line for line in lines if "BackendWarning" in line}) == 1, result.stderr
    assert "'faulty'" in lines[0] and f"monitors sync {folder}" in lines[0]
    assert "'jsonl'" not in result.stderr
    left = J.journal_left(folder, ["faulty", "jsonl"])
    assert list(left) == ["faulty"] and 0 < left["faulty"] <= 40
    assert monitors(["sync", str(folder), "--quiet"]) == 0
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    stored = read_steps(run)
    assert set(stored) == set(range(40))  # every call, at least once
    assert J.journal_left(folder, ["faulty", "jsonl"]) == {}
    assert monitors(["sync", str(folder), "--quiet"]) == 0  # idempotent: nothing more
    assert read_steps(run) == stored


KILLED = """
import json, os, signal, sys
from core_monitor import Monitor
monitor = Monitor(["jsonl"], project="p", name="r", log_dir=sys.argv[1], wait=True,
                  dispatch=sys.argv[2])
for step in range(100):
    monitor.log({"a": float(step)}, step=step)
    if step == 49:
        monitor.flush()
print("logged", flush=True)
""" + KILL_THE_JOB


@pytest.mark.parametrize("dispatch", ["process", "thread"])
def test_sync_after_the_whole_job_is_killed_delivers_every_returned_call(tmp_path, dispatch):
    result = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path), dispatch],
                            capture_output=True, text=True, timeout=300,
                            start_new_session=True)
    assert result.returncode == -signal.SIGKILL and "logged" in result.stdout
    folder = tmp_path / ".journal" / "p" / "r"
    assert J.read_cursor(folder, "jsonl") >= 51  # START + 50 calls confirmed by the flush
    assert monitors(["sync", str(folder), "--quiet"]) == 0
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    steps = [step for _, step, _ in read_rows(run)]
    assert set(steps) == set(range(100))
    assert all(steps.count(step) == 1 for step in range(50))  # confirmed: never again
    assert J.journal_left(folder, ["jsonl"]) == {}
    assert monitors(["sync", str(folder), "--quiet"]) == 0
    assert [step for _, step, _ in read_rows(run)] == steps


def test_sync_to_another_backend_has_its_own_cursor(make, tmp_path, capsys):
    monitor = make(log_dir=tmp_path, dispatch="sync", config={"lr": 0.1})
    for step in range(3):
        monitor.log({"a": float(step)}, step=step)
    monitor.log_config({"extra": 1})
    monitor.close()
    folder = J.journal_folder(monitor.run)
    other = tmp_path / "other"
    assert monitors(["sync", str(folder), "--to", "faulty", "--quiet"]) == 0
    assert json.loads  # the journal's RunInfo is the run's: same project and name
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    assert read_steps(run) == [0, 1, 2]
    assert J.read_cursor(folder, "faulty") == J.end_seq(folder) - 1 or J.journal_left(
        folder, ["faulty"]) == {}
    assert monitors(["sync", str(folder), "--to", "faulty", "--quiet"]) == 0
    assert read_steps(run) == [0, 1, 2]
    assert not other.exists()


def test_sync_completes_a_call_the_backend_stored_in_part(make, tmp_path):
    """A writer killed inside a call (Aim and DVCLive store a call tag by tag) left 4 of its
    10 points: the sync skips the calls stored whole and delivers only the 6 points that call
    lacks, so that no point is stored twice."""
    monitor = make(log_dir=tmp_path, dispatch="sync", keep_journal=True)
    for step in range(3):
        monitor.log({f"m{i}": step + i / 8 for i in range(10)}, step=step)
        if step == 0:
            monitor.flush()
    monitor.close()
    folder = J.journal_folder(monitor.run)
    J.cursor_path(folder, "jsonl").write_text("2\n")  # confirmed: START and step 0 only
    path = tmp_path / "p" / "r.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-6]), encoding="utf-8")  # m4..m9 of step 2 never stored
    report = sync_journal(folder)
    assert report.complete and (report.delivered, report.skipped) == ({"jsonl": 1},
                                                                       {"jsonl": 1})
    rows = read_rows(monitor.run)
    assert sorted(rows) == sorted((f"m{i}", step, step + i / 8)
                                  for step in range(3) for i in range(10))


def test_resume_allow_delivers_the_leftovers_first(tmp_path):
    script = textwrap.dedent("""
        import os, signal, sys
        from core_monitor import Monitor
        monitor = Monitor(["jsonl"], project="p", name="r", log_dir=sys.argv[1],
                          dispatch="thread")
        for step in range(10):
            monitor.log({"a": float(step)}, step=step)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=300)
    folder = tmp_path / ".journal" / "p" / "r"
    assert J.journal_left(folder, ["jsonl"])
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    before = [step for _, step, _ in read_rows(run)]
    with pytest.warns(ConfigWarning, match="cannot continue"), Monitor(
            ["jsonl"], project="p", name="r", log_dir=tmp_path, resume="allow",
            dispatch="sync") as monitor:
        monitor.log({"a": 10.0}, step=10)
    steps = [step for _, step, _ in read_rows(run)]
    assert set(steps) == set(range(11)) and steps[-1] == 10
    assert len(steps) == 11 + len(before)  # at least once for what was unconfirmed
    assert J.journal_left(folder, ["jsonl"]) == {}


def test_sync_refuses_a_live_run_and_a_folder_without_journal(make, tmp_path, capsys):
    monitor = make(log_dir=tmp_path, dispatch="sync")
    monitor.log({"a": 1.0})
    folder = J.journal_folder(monitor.run)
    assert monitors(["sync", str(folder), "--quiet"]) == 2
    assert "still running" in capsys.readouterr().err
    monitor.close()
    assert monitors(["sync", str(tmp_path), "--quiet"]) == 2
    assert "holds no run journal" in capsys.readouterr().err


def test_a_batch_record_reads_back_as_the_batch_logged(tmp_path):
    journal = J.Journal(tmp_path)
    batch = Batch(((3, 1.5, {"x": 1.0, "y": float("nan")}),))
    journal.append(J.wire.encode((J.wire.WRITE_ROWS, batch.rows)))
    (_, hook, kwargs), = J.calls(tmp_path)
    assert hook == "monitor_write" and kwargs["events"].rows[0][2]["x"] == 1.0


def test_a_killed_writer_starts_again_at_its_cursor_and_loses_nothing(make, tmp_path):
    """The calls the killed writer stored after its last flush are read from its storage by
    the writer started in its place, and not written again (exactly once)."""
    monitor = make(log_dir=tmp_path, dispatch="process", wait=True,
                   jsonl={"line_buffered": True})
    for step in range(50):
        monitor.log({"a": float(step)}, step=step)
    monitor.flush()
    first = monitor._dispatch.writers[0].process
    for step in range(50, 80):
        monitor.log({"a": float(step)}, step=step)
    deadline = time.monotonic() + 60  # the writer stored them, with no flush after
    while len(read_rows(monitor.run)) < 80 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)  # the writer alone (an OOM kill, a segfault)
    first.wait(timeout=60)
    deadline = time.monotonic() + 60
    while not monitor._dispatch._host.died and time.monotonic() < deadline:
        time.sleep(0.05)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(80, 100):
            monitor.log({"a": float(step)}, step=step)
        monitor.close()
    assert monitor._dispatch.writers[0].process.pid != first.pid
    assert [str(w.message).split(":")[0] for w in seen
            if issubclass(w.category, BackendWarning)] == ["backend 'jsonl' failed in its "
                                                           "writer process"]  # once
    # Steps 0-49 were confirmed before the kill; 50-79 were stored by the killed writer
    # without a flush: the new writer reads the storage and does not write them again.
    assert sorted(step for _, step, _ in read_rows(monitor.run)) == list(range(100))
    assert monitor._dispatch.restarts == {"jsonl": 1}
    assert J.journal_left(J.journal_folder(monitor.run), ["jsonl"]) == {}


@pytest.mark.parametrize("closing", [False, True], ids=["mid-run", "in-close"])
def test_a_backend_whose_tracker_was_lost_starts_again_at_its_cursor(make, tmp_path, closing):
    """``TrackerLost`` (a tracker's own process died with the rows it held since the last
    flush, as wandb's service does on SIGTERM): the writer starts the backend again in place,
    hands it the calls from its cursor on, then goes on; every step is stored once, in order,
    and the other backend never notices. ``in-close``: the tracker is lost while the monitor
    closes (a job-wide SIGTERM), when no new writer could be started."""
    lose_at = 79 if closing else 40
    monitor = make(["jsonl", "faulty"], log_dir=tmp_path, dispatch="process", wait=True,
                   faulty={"lose_at": lose_at})
    writer = monitor._dispatch.writers[1].process
    with pytest.warns(BackendWarning, match=rf"'faulty': faulty: its tracker lost what it held "
                                            rf"at step {lose_at}; started again at its cursor"):
        for step in range(30):
            monitor.log({"a": float(step)}, step=step)
        monitor.flush()
        for step in range(30, 80):
            monitor.log({"a": float(step)}, step=step)
        monitor.close()
    assert writer.returncode == 0 and monitor._dispatch.writers[1].process is writer
    assert read_steps(monitor.run) == list(range(80))
    assert [s for _, s, _ in read_rows(monitor.run)] == list(range(80))
    assert [hook for hook, _ in read_calls(monitor.run)] == [
        "start", "flush", "start", "flush", "close"]  # the lost instance is not closed
    assert J.journal_left(J.journal_folder(monitor.run), ["faulty"]) == {}


def test_a_tracker_lost_after_the_crash_mark_marks_the_new_instance_crashed_too(make, tmp_path):
    """A job-wide SIGTERM may kill the tracker's process after ``monitor_crash`` marked the run
    crashed and before ``monitor_close`` ended it: the backend started again is told the crash
    again before it closes, so the run still ends as crashed (wandb: exit code 1)."""
    monitor = make(["faulty"], log_dir=tmp_path, dispatch="process", wait=True,
                   faulty={"lose_in_close": True})
    with (pytest.warns(BackendWarning, match="its tracker was lost while the run ended"),
          pytest.raises(RuntimeError, match="boom"), monitor):
        for step in range(5):
            monitor.log({"a": float(step)}, step=step)
        raise RuntimeError("boom")
    calls = read_calls(monitor.run)
    assert [hook for hook, _ in calls] == ["start", "flush", "crash", "start", "crash", "close"]
    assert calls[2][1] == calls[4][1] and "RuntimeError" in calls[4][1]
    assert read_steps(monitor.run) == list(range(5))


def test_tracker_lost_on_a_worker_thread_is_a_failure_that_sync_repairs(make, tmp_path):
    """Off a writer process nothing starts the backend again: ``TrackerLost`` is a failure
    like any other, and ``monitors sync`` delivers what the tracker did not confirm (a
    backend without a reader: at least once)."""
    monitor = make(["faulty"], log_dir=tmp_path, dispatch="thread", faulty={"lose_at": 5})
    with pytest.warns(BackendWarning, match="TrackerLost|lost what it held"):
        for step in range(10):
            monitor.log({"a": float(step)}, step=step)
        monitor.close()
    assert read_steps(monitor.run) == [6, 7, 8, 9]  # 0-4 were lost with the tracker
    folder = J.journal_folder(monitor.run)
    assert monitors(["sync", str(folder), "--quiet"]) == 0
    # A backend that raised never moves its cursor; faulty has no reader to tell what it
    # stored: at least once (docs/operations/journal.md, "Guarantees per backend").
    assert sorted(read_steps(monitor.run)) == sorted([*range(10), 6, 7, 8, 9])


@pytest.mark.parametrize("dispatch", ["process", "thread"])
def test_a_backend_past_its_budget_is_detached_and_sync_delivers_the_rest(make, tmp_path,
                                                                          dispatch):
    monitor = make(["jsonl", "faulty"], log_dir=tmp_path, dispatch=dispatch, wait=True,
                   budget={"faulty": 1024}, faulty={"delay": 0.05})
    with pytest.warns(BackendWarning, match="'faulty' is behind by its whole budget"):
        for step in range(300):
            monitor.log({"a": float(step)}, step=step)
    assert list(monitor.detached) == ["faulty"]
    with pytest.warns(BackendWarning, match=r"'faulty': .*monitors sync"):
        monitor.close()
    assert [s for _, s, _ in read_rows(monitor.run)] == list(range(300))  # the others go on
    got = read_steps(monitor.run)
    assert got == list(range(len(got))) and len(got) < 300
    folder = J.journal_folder(monitor.run)
    assert J.read_cursor(folder, "faulty") == monitor.detached["faulty"]
    assert monitors(["sync", str(folder), "--quiet"]) == 0
    assert read_steps(monitor.run) == list(range(300))  # exactly once


def test_budget_is_checked(make, tmp_path):
    with pytest.raises(ConfigError, match="budget"):
        make(log_dir=tmp_path, budget=10)


def test_monitors_sync_runs_in_a_fresh_interpreter(make, tmp_path):
    monitor = make(log_dir=tmp_path, dispatch="sync")
    monitor.log({"a": 1.0})
    monitor.close()
    folder = J.journal_folder(monitor.run)
    for code in ("from core_monitor import journal", "from core_monitor import syncing"):
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    result = subprocess.run([sys.executable, "-m", "core_monitor.cli", "sync", str(folder),
                             "--to", "faulty", "--quiet"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "faulty: 1 call(s) delivered" in result.stdout


def test_a_call_that_kills_every_writer_stops_the_restarts(make, tmp_path):
    monitor = make(["jsonl", "faulty"], log_dir=tmp_path, dispatch="process", wait=True,
                   faulty={"segfault_at": 3})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # WriterDied; what close() names
        for step in range(10):
            monitor.log({"x": float(step)}, step=step)
            if step in (2, 6, 9):
                monitor.flush()
                time.sleep(1.0)  # the reply thread sees the death
        monitor.log({"x": 10.0}, step=10)
        monitor.close()
    assert monitor._dispatch.restarts["faulty"] == 3  # once, then no more
    assert sum(1 for line in read_calls(monitor.run) if line[0] == "start") == 2
    assert read_steps(monitor.run) == [0, 1, 2]
    assert [s for _, s, _ in read_rows(monitor.run)] == list(range(11))


LIVE = """
import sys, time
from core_monitor import Monitor
monitor = Monitor(["jsonl"], project="p", name="r", log_dir=sys.argv[1], dispatch="sync")
for step in range(30):
    monitor.log({"a": float(step)}, step=step)
    time.sleep(0.1)
monitor.close()
"""


def test_sync_follow_delivers_a_live_run_until_it_closes(tmp_path):
    trainer = subprocess.Popen([sys.executable, "-c", LIVE, str(tmp_path)])
    folder = tmp_path / ".journal" / "p" / "r"
    deadline = time.monotonic() + 120
    while not J.starts(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert monitors(["sync", str(folder), "--to", "faulty", "--quiet"]) == 2  # still running
    assert monitors(["sync", str(folder), "--to", "faulty", "--follow", "--quiet"]) == 0
    assert trainer.wait(timeout=120) == 0
    assert read_steps(RunInfo(project="p", name="r", log_dir=tmp_path)) == list(range(30))


def test_without_log_dir_the_journal_goes_to_the_state_folder_not_the_cwd(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monitor = Monitor(["faulty"], project="p", name="r", dispatch="sync")
    monitor.log({"a": 1.0})
    monitor.close()
    assert steps_of(tmp_path / "state" / "experiment-monitors" / "journal" / "p" / "r") == [0]
    assert not (tmp_path / ".journal").exists()  # nothing in the current directory
    monkeypatch.setenv(J.ROOT_ENV, str(tmp_path / "ops"))
    assert J.journal_folder(monitor.run) == tmp_path / "ops" / "p" / "r"


def test_of_two_writers_ending_at_once_the_later_check_removes_the_monitors_own_journal(
        tmp_path):
    """Each writer lets its own cursor lock go before it looks for the others'
    (``Writer.leave_journal``): whichever looks last finds none held and removes the journal,
    however close together they end. Looking while still holding its own, each of two could
    find the other's held and neither remove it (seen once in CI)."""
    first, second = J.hold(tmp_path, "a"), J.hold(tmp_path, "b")
    assert first is not None and second is not None
    os.close(first)  # writer a ends, lets its lock go, looks: b still holds its own
    assert not J.remove_unheld(tmp_path, "a") and tmp_path.exists()
    os.close(second)  # writer b ends right after and looks: a's is free
    assert J.remove_unheld(tmp_path, "b") and not tmp_path.exists()
