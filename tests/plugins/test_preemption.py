"""A job terminated by its scheduler: SIGTERM to every process of the job at once (Slurm's
``scancel``, its time limit and preemption signal every process of the job step; SIGKILL follows
after ``KillWait``, 30 s by default). No accepted row is lost in any backend, and the run shows
how it ended. Read back from each tracker's own storage."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import jsonl_monitor
import pytest
from faulty_monitor import read_calls, read_steps
from jobs import alive, descendants
from trackers import BACKENDS, READERS, assert_crash_marks

from core_monitor import Capabilities, Monitor, RunInfo, discovery
from core_monitor.dispatch.writer import TERM_SECONDS
from core_monitor.errors import BackendWarning
from core_monitor.readers import load_reader

STEPS, TAGS = 300, 10
#: Seconds every process of the job gets to end after the SIGTERM (Slurm's default KillWait).
SLURM_KILL_WAIT = 30.0

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and ps")]

TRAIN = """
import json, os, sys, time
from core_monitor import Monitor

log_dir = sys.argv[1]
# wait=True: every writer has started its SDK (and what the SDK starts, such as wandb-core)
# before the signal, as in a job preempted mid-training.
monitor = Monitor(json.loads(sys.argv[2]), project="term", name="job", log_dir=log_dir,
                  dispatch="process", wait=True)
images = sys.argv[3] == "image"
if images:
    import numpy as np
    from core_monitor import Image
for step in range(300):
    row = {f"m{i}": step + i / 8 for i in range(10)}
    if images:
        row["img"] = Image(np.full((8, 8, 3), step % 256, np.uint8))
    monitor.log(row, step=step)
print(json.dumps({"logged": os.getpid()}), flush=True)
time.sleep(600)
"""


def expected_rows() -> list[tuple[str, int, float]]:
    return sorted((f"m{i}", step, step + i / 8) for step in range(STEPS) for i in range(TAGS))



def capabilities(name: str) -> Capabilities:
    return Capabilities.of(discovery.load_backend(discovery.find_backend(name)))


@pytest.mark.parametrize(("delivery", "payload"),
                         [("group", "scalars"), ("job", "scalars"), ("job", "image")])
def test_sigterm_to_the_job_loses_no_row(tmp_path, delivery, payload):
    """``group``: ``kill -TERM -- -PGID`` of the training process's group (writers run in
    sessions of their own, so only the training process gets it); ``job``: every process of
    the job at once, as Slurm delivers it (the writers, and what their SDKs started).
    ``image``: each call also holds an 8x8 image, read back from every backend that stores
    images."""
    log_dir = tmp_path / "runs"
    trainer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(TRAIN), str(log_dir),
                                json.dumps(BACKENDS), payload],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=tmp_path, start_new_session=True)
    assert trainer.stdout is not None
    seen = []
    for line in trainer.stdout:
        seen.append(line)
        if line.startswith('{"logged"'):
            break
    else:
        trainer.stdout.close()
        pytest.fail("".join(seen)[-4000:])
    job = [trainer.pid, *descendants(trainer.pid)]  # the writers and what their SDKs started
    assert len(job) > len(BACKENDS)
    sent = time.monotonic()
    if delivery == "group":
        os.killpg(trainer.pid, signal.SIGTERM)
    else:
        for pid in job:
            with contextlib.suppress(ProcessLookupError):  # a short-lived one that has ended
                os.kill(pid, signal.SIGTERM)
    rest = trainer.stdout.read()
    trainer.stdout.close()
    code = trainer.wait(timeout=SLURM_KILL_WAIT)
    assert code == -signal.SIGTERM, "".join(seen) + rest
    left = [pid for pid in job if alive(pid)]
    while left and time.monotonic() - sent < SLURM_KILL_WAIT:
        time.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    assert not left, f"{left} still running {SLURM_KILL_WAIT:g} s after SIGTERM"

    run = RunInfo(project="term", name="job", log_dir=log_dir)
    for name, read in READERS.items():
        assert sorted(read(run)) == expected_rows(), name
    if payload == "image":
        for name in BACKENDS:
            read_media = load_reader(name).read_media
            if read_media is None or "image" not in capabilities(name).media_kinds:
                continue
            images = sorted((step, int(value.array[0, 0, 0])) for tag, step, value
                            in read_media(run) if tag == "img")
            assert images == [(step, step % 256) for step in range(STEPS)], name
    reason = f"the training process (pid {trainer.pid}) received SIGTERM"
    assert_crash_marks(run, reason)


@pytest.mark.parametrize("journal", [True, False])
def test_sigterm_to_one_writer_drains_it(tmp_path, journal):
    """SIGTERM to one writer alone: it writes everything, marks the run and ends. With the
    run journal (the default) the monitor starts it again at its cursor at the next call
    (docs/operations/journal.md, a writer that dies), so the call after the signal is stored
    too; without one the backend stays stopped and that call is counted as not delivered."""
    monitor = Monitor(["faulty", "jsonl"], project="p", name="r", log_dir=tmp_path,
                      dispatch="process", journal=journal)
    for step in range(STEPS):
        monitor.log({"loss": float(step)}, step=step)
    writer = next(w for w in monitor._dispatch.writers if w.name == "faulty")
    writer.process.send_signal(signal.SIGTERM)
    # It waits TERM_SECONDS for this process to close the monitor, then ends by itself.
    writer.process.wait(timeout=TERM_SECONDS + 60)
    assert writer.process.returncode == 0
    with writer.changed:  # the monitor's reply thread has seen its end (it reads on)
        assert writer.changed.wait_for(lambda: writer.ended, timeout=60)
    with pytest.warns(BackendWarning, match=r"'faulty' failed .*WriterDied.*SIGTERM"):
        monitor.log({"loss": -1.0}, step=STEPS)
    if journal:
        monitor.close()
        assert monitor.undelivered == {}
        assert monitor._dispatch.restarts == {"faulty": 1}
        # every call exactly once: the new writer started at the cursor the drain left
        assert read_steps(monitor.run) == [*range(STEPS), STEPS]
        calls = read_calls(monitor.run)
        hooks = [hook for hook, _ in calls]
        assert hooks[:5] == ["start", "flush", "crash", "close", "start"], hooks
        assert hooks[-1] == "close" and hooks.count("crash") == 1
        assert calls[0][1] != calls[4][1]  # another writer process
    else:
        with pytest.warns(BackendWarning, match=r"'faulty': 1 call\(s\) were not delivered"):
            monitor.close()
        assert monitor.undelivered == {"faulty": 1}  # the call after it ended, exactly
        assert read_steps(monitor.run) == list(range(STEPS))
        calls = read_calls(monitor.run)
        assert [hook for hook, _ in calls] == ["start", "flush", "crash", "close"]
    assert "received SIGTERM" in calls[2][1]
    # The other writer never got the signal: it got every call, the last one too.
    assert jsonl_monitor.read_rows(monitor.run) == [
        ("loss", step, float(step)) for step in range(STEPS)] + [("loss", STEPS, -1.0)]
