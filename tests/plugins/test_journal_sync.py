"""The run journal with real backends: the whole job (trainer and writers) SIGKILLed mid-run,
then ``monitors sync``, every backend's own storage read back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter

import pytest
from interpreter import KILL_THE_JOB
from trackers import BACKENDS, READERS, stored

from core_monitor import RunInfo, discovery
from core_monitor import journal as J
from core_monitor.cli import main as monitors
from core_monitor.dispatch.backends import flush_confirms
from core_monitor.syncing import sync_journal

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
              pytest.mark.process]

#: Fast to start, each with a reader of its own storage.
SYNCED = [name for name in ("trackio", "tensorboard", "csv", "mlflow", "wandb")
          if name in READERS]
STEPS, TAGS, FLUSHED = 120, 10, 60

JOB = """
import json, os, signal, sys
from core_monitor import Monitor
backends = json.loads(sys.argv[2])
monitor = Monitor(backends, project="jr", name="job", log_dir=sys.argv[1],
                  wait="faulty" not in backends, keep_journal=sys.argv[5] == "flush",
                  wandb={"mode": "offline"} if "wandb" in backends else {},
                  **({"faulty": {"start_delay": 600.0}} if "faulty" in backends else {}))
for step in range(int(sys.argv[3])):
    monitor.log({f"m{i}": step + i / 8 for i in range(10)}, step=step)
    if step == int(sys.argv[4]) - 1:
        monitor.flush()
if sys.argv[5] == "flush":  # every call stored, each cursor at the end
    monitor.flush()
print("logged", flush=True)
# Slurm's KillWait over: SIGKILL to every process of the job (KILL_THE_JOB)
""" + KILL_THE_JOB


def kill_job(tmp_path, backends, steps=STEPS, flushed=FLUSHED, final_flush=False):
    result = subprocess.run(
        [sys.executable, "-c", JOB, str(tmp_path), json.dumps(backends), str(steps),
         str(flushed), "flush" if final_flush else "-"],
        capture_output=True, text=True, timeout=600, start_new_session=True)
    assert result.returncode == -signal.SIGKILL and "logged" in result.stdout, result.stderr
    return tmp_path / ".journal" / "jr" / "job"


def test_sync_after_a_job_wide_sigkill_stores_every_returned_call(tmp_path):
    folder = kill_job(tmp_path, SYNCED)
    cursors = {name: J.read_cursor(folder, name) for name in SYNCED}
    assert all(cursor >= 1 + FLUSHED for cursor in cursors.values()), cursors
    report = sync_journal(folder)
    assert report.complete, report.failed
    # how many calls past its cursor a killed writer had stored depends on where its batched
    # reads were when the SIGKILL came (often none): each such call is found in the
    # backend's storage and skipped, the others delivered; the deterministic case is
    # test_sync_skips_every_call_the_storage_holds_past_the_cursor
    for name in SYNCED:
        assert report.delivered[name] + report.skipped[name] > 0, (name, report)
    run = RunInfo(project="jr", name="job", log_dir=tmp_path)
    expected = {(f"m{i}", step) for step in range(STEPS) for i in range(TAGS)}
    stored = {}
    for name in SYNCED:
        rows = Counter((tag, step) for tag, step, _ in READERS[name](run))
        stored[name] = rows
        # every call whose log() returned, once: those the killed writers had stored after
        # the last flush are read back from the backend's storage and skipped
        assert rows == Counter(expected), (name, rows - Counter(expected))
    assert J.journal_left(folder, SYNCED) == {}
    assert monitors(["sync", str(folder), "--quiet"]) == 0  # idempotent
    for name in SYNCED:
        assert Counter((t, s) for t, s, _ in READERS[name](run)) == stored[name], name


def test_sync_skips_every_call_the_storage_holds_past_the_cursor(tmp_path):
    """The uncertain window made certain: every call stored and flushed, then the job
    SIGKILLed and each cursor set back to where the first flush left it, as if each writer
    had stored the later calls but died before confirming them. Sync finds them all in the
    backends' own storage and delivers none again: each call is stored exactly once. Every
    first-party backend. SwanLab has no flush (its rows reach its file from a thread of its
    own, whole at close): a flush does not move its cursor, so the calls its file lacked at
    the kill are delivered by the sync (into a new run: it cannot continue one), the others
    skipped."""
    folder = kill_job(tmp_path, BACKENDS, final_flush=True)
    confirming = [name for name in BACKENDS if flush_confirms(
        discovery.load_backend(discovery.find_backend(name)))]
    for name in BACKENDS:
        if name in confirming:
            assert J.read_cursor(folder, name) > 1 + FLUSHED, name
            J.cursor_path(folder, name).write_text(f"{1 + FLUSHED}\n")  # never lowered
        else:  # confirmed at close only: the kill left its cursor at the start
            assert J.read_cursor(folder, name) == 0, name
    report = sync_journal(folder)
    assert report.complete, report.failed
    assert {name: report.delivered[name] for name in confirming} == dict.fromkeys(
        confirming, 0), report
    assert all(report.skipped[name] >= STEPS - FLUSHED for name in confirming), report
    run = RunInfo(project="jr", name="job", log_dir=tmp_path)
    expected = Counter((f"m{i}", step) for step in range(STEPS) for i in range(TAGS))
    for name in confirming:  # in the run the job wrote: the sync made no new one (ClearML)
        rows = Counter((tag, step) for tag, step, _ in READERS[name](run))
        assert rows == expected, (name, rows - expected, expected - rows)
    for name in BACKENDS:
        rows = stored(name, run)
        assert rows == expected, (name, rows - expected, expected - rows)
    assert J.journal_left(folder, BACKENDS) == {}


def test_a_writer_that_had_not_started_gets_everything_from_sync(tmp_path):
    # Aim's case from issue 41: its writer still importing when the job was killed.
    folder = kill_job(tmp_path, ["csv", "faulty"], steps=30, flushed=0)
    assert J.read_cursor(folder, "faulty") == 0
    assert monitors(["sync", str(folder), "--quiet", "--to", "faulty",
                     "--to-option", "start_delay=0"]) == 0
    from faulty_monitor import read_steps

    run = RunInfo(project="jr", name="job", log_dir=tmp_path)
    assert Counter(read_steps(run)) == Counter({s: TAGS for s in range(30)})
