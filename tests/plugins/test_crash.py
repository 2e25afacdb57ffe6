"""A training process that dies without closing its monitor (SIGKILL, ``os._exit``, a
segfault): every writer process writes what was logged, marks the run as crashed where the
tracker can (``monitor_crash``), closes it and exits. Read back from each tracker's own storage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from interpreter import imported, modules_after
from trackers import BACKENDS, READERS, assert_crash_marks

import trackio_monitor
from core_monitor import Monitor, RunInfo

STEPS, TAGS = 300, 10
#: Seconds the writers get to exit by themselves once the training process is gone.
WRITERS_EXIT_SECONDS = 120.0

# About writer processes (they outlive a killed trainer; each holds its own SDK and Trackio
# folder), so the monitors here, and the trainers' scripts, get the users' default dispatch.
pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and ps"),
              pytest.mark.process]

TRAIN = """
import ctypes, json, os, signal, subprocess, sys
from core_monitor import Monitor

log_dir, death, backends = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
monitor = Monitor(backends, project="crash", name="job", log_dir=log_dir)
listing = subprocess.run(["ps", "-A", "-ww", "-o", "pid=,ppid=,args="], capture_output=True,
                         text=True, check=True).stdout
writers = [int(line.split()[0]) for line in listing.splitlines()
           if int(line.split()[1]) == os.getpid() and "core_monitor.dispatch.writer" in line]
print(json.dumps({"writers": writers}), flush=True)
for step in range(300):
    monitor.log({f"m{i}": step + i / 8 for i in range(10)}, step=step)
if death == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
elif death == "exit":
    os._exit(1)
else:
    ctypes.string_at(0)
"""

EXPECTED_EXIT = {"sigkill": -signal.SIGKILL, "exit": 1, "segfault": -signal.SIGSEGV}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                           text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Poll until none of ``pids`` is alive or ``timeout`` seconds passed; the ones left."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [pid for pid in left if alive(pid)]
    return left


def expected_rows() -> list[tuple[str, int, float]]:
    # step + i/8 is exact in float32 too (TensorBoard's simple_value)
    return sorted((f"m{i}", step, step + i / 8) for step in range(STEPS) for i in range(TAGS))


@pytest.mark.parametrize("death", ["sigkill", "exit", "segfault"])
def test_every_writer_writes_all_marks_the_crash_and_exits(tmp_path, death):
    log_dir = tmp_path / "runs"
    output = tmp_path / "trainer.out"
    with output.open("w") as out:
        trainer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(TRAIN), str(log_dir),
                                    death, json.dumps(BACKENDS)],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                   env=os.environ.copy())
        code = trainer.wait(timeout=300)
    text = output.read_text()
    assert code == EXPECTED_EXIT[death], text[-4000:]
    line = next((line for line in text.splitlines() if line.startswith('{"writers"')), None)
    assert line is not None, text[-4000:]
    writers = json.loads(line)["writers"]
    assert len(writers) == len(BACKENDS), text[-4000:]
    left = wait_gone(writers, WRITERS_EXIT_SECONDS)
    assert not left, f"writer processes {left} still running {WRITERS_EXIT_SECONDS:g} s after"

    run = RunInfo(project="crash", name="job", log_dir=log_dir)
    for name, read in READERS.items():
        assert sorted(read(run)) == expected_rows(), name

    reason = f"the training process (pid {trainer.pid}) ended without closing the monitor"
    assert_crash_marks(run, reason)


def test_two_monitors_in_one_process_write_trackio_at_once(tmp_path):
    """Trackio has one folder per process; each writer process has a Trackio of its own."""
    first = Monitor(["trackio"], project="p", name="a", log_dir=tmp_path / "a", strict=True)
    second = Monitor(["trackio"], project="p", name="b", log_dir=tmp_path / "b", strict=True)
    try:
        for step in range(100):
            first.log({"loss": float(step)}, step=step)
            second.log({"loss": -float(step), "acc": 0.5}, step=step)
    finally:
        first.close()
        second.close()
    assert trackio_monitor.read_rows(first.run) == [("loss", s, float(s)) for s in range(100)]
    assert sorted(trackio_monitor.read_rows(second.run)) == sorted(
        [("loss", s, -float(s)) for s in range(100)] + [("acc", s, 0.5) for s in range(100)])
    assert (tmp_path / "a" / "trackio").is_dir() and (tmp_path / "b" / "trackio").is_dir()
    assert trackio_monitor.read_alerts(first.run) == []


def test_the_training_process_imports_no_sdk(tmp_path):
    modules = modules_after(f"""
        from core_monitor import Monitor
        monitor = Monitor({BACKENDS!r}, project="p", name="light", log_dir={str(tmp_path)!r})
        for step in range(10):
            monitor.log({{"loss": 1.0 / (step + 1)}}, step=step)
        monitor.flush()
        assert not any(monitor.failures.values()), monitor.failures
    """, cwd=tmp_path)
    assert imported(modules, "core_monitor")
    loaded = [sdk for sdk in ("wandb", "mlflow", "trackio", "tensorboard", "tensorflow", "torch",
                              "gradio", "google.protobuf", "comet_ml") if imported(modules, sdk)]
    assert loaded == []
    run = RunInfo(project="p", name="light", log_dir=Path(tmp_path))
    for name, read in READERS.items():
        assert [s for t, s, _ in read(run) if t == "loss"] == list(range(10)), name
