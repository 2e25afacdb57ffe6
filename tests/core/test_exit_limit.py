"""The core's own exit limit (``shutdown.EXIT_TIMEOUT``, applied on SIGTERM and at exit) never
kills a writer that is still making progress (issue 41): one inside a slow closing hook (Comet's
``end()`` took 10-17 s on a loaded node) finishes; one that is stuck is still ended, a
documented few seconds later (``wire.PROGRESS_SECONDS``). A user's ``close(timeout=)`` keeps its
deadline (tests/core/test_processes.py). The limit is shortened to 1 s in these scripts."""

from __future__ import annotations

import signal

import pytest
from faulty_monitor import read_calls, read_steps
from interpreter import run_python

from core_monitor import RunInfo
from core_monitor.dispatch.wire import PROGRESS_SECONDS

pytestmark = pytest.mark.process

SCRIPT = """
import os, signal, sys
from core_monitor import Monitor, shutdown
shutdown.EXIT_TIMEOUT = 1.0
monitor = Monitor(["faulty"], project="p", name="r", log_dir=sys.argv[1], dispatch="process",
                  wait=True, faulty={options})
for step in range(5):
    monitor.log({{"x": float(step)}}, step=step)
os.kill(os.getpid(), signal.SIGTERM)
"""


def test_a_writer_in_a_slow_close_hook_is_not_killed_by_the_exit_limit(tmp_path):
    done = run_python(SCRIPT.format(options={"close_delay": 5.0}), tmp_path, check=False,
                      timeout=240)
    assert done.returncode == -signal.SIGTERM, done.stderr
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    hooks = [hook for hook, _ in read_calls(run)]
    assert hooks[-1] == "close", (hooks, done.stderr)  # monitor_close ran to its end
    assert read_steps(run) == list(range(5))
    assert "was killed" not in done.stderr


def test_a_stuck_writer_is_still_ended_after_the_exit_limit(tmp_path):
    done = run_python(SCRIPT.format(options={"hang_at": 2}), tmp_path, check=False,
                      timeout=60 + PROGRESS_SECONDS)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "did not finish within close(timeout=1.0) and was killed" in done.stderr
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    assert "close" not in [hook for hook, _ in read_calls(run)]
