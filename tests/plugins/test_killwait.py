"""Preemption as a scheduler does it, with every first-party backend in one job: SIGTERM to
every process of the job, SIGKILL to what is left 30 s later (Slurm's ``KillWait``, Kubernetes's
``terminationGracePeriodSeconds``), on a machine whose every core a busy process holds. Then the
job's next attempt continues the run (``resume="allow"``: the leftovers first), logs more and is
SIGKILLed whole at once; then ``monitors sync`` from another process, as from a login node.
Every call whose ``log()`` returned, in either attempt, is read back from each backend's own
storage exactly once (docs/operations/journal.md, guarantees per backend); for SwanLab and
ClearML, which cannot continue a run, once across the runs of that name (what a resume or a
sync delivers to them lands in a new run beside the killed one).

Where each writer is when the signals come depends on the machine (one that has confirmed
everything ends well within the grace; one still starting, or writing, is killed), so each
run of the test checks the guarantee whichever way the kill fell; the case where a killed
writer stored every call past its cursor is made certain in ``test_journal_sync.py``.

The job is a process that makes itself the child subreaper of what it starts
(``PR_SET_CHILD_SUBREAPER``, as ``slurmstepd`` holds a job step): every process the job ever
started stays its descendant, whatever session it made, so "every process of the job" is its
descendants at each moment, as a cgroup has it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from interpreter import KILL_THE_JOB, run_python
from jobs import alive, descendants
from trackers import BACKENDS, stored

from core_monitor import RunInfo
from core_monitor import journal as J

pytestmark = [pytest.mark.process, pytest.mark.heavy,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="PR_SET_CHILD_SUBREAPER (prctl) is Linux's")]

TAGS = 10
#: The first attempt's checkpoint: ``flush()`` after this many steps (it moves the cursor of
#: every backend whose writer is up; others keep theirs).
CHECKPOINT = 10
#: The first attempt is terminated once this many of its calls returned.
TERM_AFTER = 30
#: Calls the second attempt logs before the whole job is SIGKILLed.
SECOND = 60
PROJECT, NAME = "kw", "job"
#: Seconds from the SIGTERM to the SIGKILL of what is left (Slurm's default KillWait).
SLURM_KILL_WAIT = 30.0

#: The job step: subreaper of everything the job starts; runs the trainer, reaps orphans, ends
#: when its stdin closes (what is left of the job then is the test's to kill).
STEP = """
import ctypes, os, subprocess, sys, threading
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
trainer = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]])
print(trainer.pid, flush=True)

def reap():
    while True:
        try:
            os.wait()
        except ChildProcessError:
            threading.Event().wait(0.1)

threading.Thread(target=reap, daemon=True).start()
sys.stdin.read()
"""

TRAIN = """
import json, os, signal, sys, time
from core_monitor import FlushTimeout, Monitor

log_dir, backends, attempt = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
first, checkpoint, last = map(int, sys.argv[4:7])
monitor = Monitor(backends, project="kw", name="job", log_dir=log_dir, dispatch="process",
                  resume="allow", wandb={"mode": "offline"})
print("started", flush=True)
step = first
while True:
    monitor.log({f"m{i}": step + i / 8 for i in range(10)}, step=step)
    print("returned", step, flush=True)
    step += 1
    if attempt == "first":
        if step == first + checkpoint:
            try:
                monitor.flush(timeout=2.0)  # a checkpoint: the writers that are up confirm
            except FlushTimeout:
                pass
        time.sleep(0.02)
    elif step == first + last:
        break
print("logged", flush=True)
""" + KILL_THE_JOB


@pytest.fixture
def cpu_hog():
    """One busy process per core for the test's duration (started here, killed by PID)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)]
    try:
        yield hogs
    finally:
        stop_hog(hogs)


def stop_hog(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()
        hog.wait(timeout=30)


def start_job(log_dir: Path, first: int, attempt: str) -> tuple[subprocess.Popen, int]:
    """The job step running the trainer; ``(the step's process, the trainer's pid)``."""
    step = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(STEP), textwrap.dedent(TRAIN), str(log_dir),
         json.dumps(BACKENDS), attempt, str(first), str(CHECKPOINT), str(SECOND)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    assert step.stdout is not None
    return step, int(step.stdout.readline())


def signal_job(step: subprocess.Popen, signum: int) -> list[int]:
    """Send ``signum`` to every process of the job (the step's descendants); their pids."""
    job = descendants(step.pid)
    for pid in job:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return job


def end_step(step: subprocess.Popen) -> str:
    """Kill what is left of the job, end the step; the trainer's output."""
    signal_job(step, signal.SIGKILL)
    assert step.stdin is not None and step.stdout is not None
    step.stdin.close()
    output = step.stdout.read()
    step.stdout.close()
    step.wait(timeout=60)
    return output


def returned(output: str) -> list[int]:
    return [int(line.split()[1]) for line in output.splitlines() if line.startswith("returned ")]


def preempt(log_dir: Path) -> tuple[list[int], float]:
    """The first attempt, terminated as Slurm does; ``(the steps whose log() returned, seconds
    from the SIGTERM to the last process of the job gone or killed)``."""
    step, _ = start_job(log_dir, 0, "first")
    assert step.stdout is not None
    seen = []
    try:
        for line in step.stdout:
            seen.append(line)
            if line.startswith(f"returned {TERM_AFTER - 1}"):
                break
        else:
            pytest.fail("".join(seen)[-6000:])
        sent = time.monotonic()
        job = signal_job(step, signal.SIGTERM)
        assert len(job) > len(BACKENDS), job  # the trainer, its writers, what their SDKs run
        while time.monotonic() - sent < SLURM_KILL_WAIT and any(alive(pid) for pid in
                                                                descendants(step.pid)):
            time.sleep(0.2)
        grace = time.monotonic() - sent
    finally:
        output = "".join(seen) + end_step(step)  # KillWait over: SIGKILL to what is left
    return returned(output), grace


def expected(steps: range) -> Counter[tuple[str, int]]:
    return Counter((f"m{i}", step) for step in steps for i in range(TAGS))


def sync(folder: Path) -> str:
    """``monitors sync folder`` in a process of its own, as on a login node; its output."""
    done = run_python("import sys\nfrom core_monitor.cli import main\n"
                      "raise SystemExit(main(['sync', sys.argv[1], '--quiet']))",
                      folder, check=False, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-6000:]
    return done.stdout


def test_sigterm_then_sigkill_after_killwait_then_resume_and_sync(tmp_path, cpu_hog):
    log_dir = tmp_path / "runs"
    folder = log_dir / ".journal" / PROJECT / NAME
    first, grace = preempt(log_dir)
    stop_hog(cpu_hog)  # the next attempt runs on another node; the sync on a login node
    assert first == list(range(len(first))) and len(first) >= TERM_AFTER, first
    # A call accepted as the signal came may be stored without its "returned" line: the
    # second attempt starts one step past it, so that step is checked apart.
    doubt = first[-1] + 1
    start = doubt + 1
    left = J.journal_left(folder, BACKENDS)  # what the first attempt's writers did not confirm

    step, trainer = start_job(log_dir, start, "second")
    deadline = time.monotonic() + 300
    while alive(trainer) and time.monotonic() < deadline:  # it SIGKILLs the job once it logged
        time.sleep(0.2)
    output = end_step(step)
    assert "logged" in output, output[-6000:]
    assert returned(output) == list(range(start, start + SECOND)), output[-6000:]

    said = sync(folder)
    assert J.journal_left(folder, BACKENDS) == {}, said
    again = sync(folder)  # idempotent: nothing is left, nothing is delivered again
    assert J.journal_left(folder, BACKENDS) == {} and "delivered" not in again.replace(
        " 0 call(s) delivered", ""), again

    run = RunInfo(project=PROJECT, name=NAME, log_dir=log_dir)
    want = expected(range(doubt)) + expected(range(start, start + SECOND))
    for name in BACKENDS:
        rows = stored(name, run)
        maybe = Counter({key: count for key, count in rows.items() if key[1] == doubt})
        assert sorted(maybe.values()) in ([], [1] * TAGS), (name, maybe)
        rows -= maybe
        assert rows == want, (name, f"SIGTERM to gone: {grace:.1f} s", left, said,
                              sorted((rows - want).items())[:20],
                              sorted((want - rows).items())[:20])
