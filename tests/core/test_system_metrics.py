"""``Monitor(system_metrics=...)`` in the core: the switch, the samples' own step axis, which
processes are the job's and which are the monitor's, and the ranks of one node."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import jsonl_monitor
import pytest
from interpreter import run_python

from core_monitor import Monitor, RunInfo
from core_monitor.errors import ConfigError
from core_monitor.system import DEFAULT_INTERVAL, check_interval, job
from core_monitor.system.probes import GpuMeter

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc through psutil")


@pytest.mark.parametrize(("given", "interval"), [
    (False, None), (None, None), (True, DEFAULT_INTERVAL), (2, 2.0), (0.25, 0.25)])
def test_system_metrics_switch(given, interval):
    assert check_interval(given) == interval


@pytest.mark.parametrize("given", [0, -1, math.nan, math.inf, "10", [10]])
def test_system_metrics_bad_value_names_it(given):
    with pytest.raises(ConfigError, match=r"system_metrics=.* must be False .*True .*seconds"):
        Monitor(["jsonl"], project="p", system_metrics=given)


def test_without_psutil_the_error_says_what_to_install():
    done = run_python("""
        import sys
        sys.modules["psutil"] = None  # as if it were not installed
        from core_monitor import Monitor, RunInfo
        from core_monitor.errors import ConfigError
        try:
            Monitor(["jsonl"], project="p", system_metrics=True)
        except ConfigError as error:
            print(error)
    """)
    assert "pip install psutil nvidia-ml-py" in done.stdout


def test_samples_have_a_step_axis_of_their_own(tmp_path):
    with Monitor(["jsonl"], project="p", name="r", log_dir=tmp_path, system_metrics=0.2,
                 dispatch="thread") as monitor:
        sampler = monitor._system.sampler
        for step in range(3):
            monitor.log({"loss": float(step)})
            deadline = time.monotonic() + 60  # the sampler process starts behind Monitor()
            while sampler.samples <= step and time.monotonic() < deadline:
                time.sleep(0.05)
        assert monitor.log({"loss": 9.0}) == 3  # the samples never moved the next step
    rows = jsonl_monitor.read_rows(monitor.run)
    assert [s for t, s, _ in rows if t == "loss"] == [0, 1, 2, 3]
    samples = [s for t, s, _ in rows if t == "system/memory_rss_bytes"]
    assert samples == list(range(len(samples))) and len(samples) >= 2
    tags = {t for t, _, _ in rows if t.startswith("system/")}
    assert {"system/cpu_percent", "system/memory_rss_bytes", "system/threads",
            "system/processes"} <= tags
    # GPU tags exactly where NVML finds a GPU; without one (or without NVML), no error.
    assert any(t.startswith("system/gpu0/") for t in tags) == GpuMeter().available


def test_advance_false_needs_a_step_and_wall_time_is_checked(tmp_path):
    with Monitor(["jsonl"], project="p", name="r", log_dir=tmp_path) as monitor:
        with pytest.raises(ValueError, match="advance=False"):
            monitor.log({"x": 1.0}, advance=False)
        with pytest.raises(TypeError, match="wall_time"):
            monitor.log({"x": 1.0}, wall_time="now")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="wall_time"):
            monitor.log({"x": 1.0}, wall_time=math.nan)
        monitor.log({"x": 1.0}, step=50, advance=False, wall_time=1_000.0)
        assert monitor.log({"x": 2.0}) == 0


def test_writers_are_the_monitors_children_not_the_jobs(tmp_path):
    import psutil

    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # This process's children before the monitor: the worker, and whatever earlier tests
        # in this pytest process left running (wandb's service, a server): all the job's.
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        with Monitor(["jsonl"], project="p", name="r", log_dir=tmp_path,
                     dispatch="process", wait=True) as monitor:
            writer = next(w for w in monitor._dispatch.writers).process.pid
            trainer, monitors = job.split(job.job_processes(None))
            trainer_pids = {p.pid for p in trainer}
            assert {os.getpid(), worker.pid} <= trainer_pids
            # nothing the monitor started is counted as the job's
            assert trainer_pids <= before | {os.getpid()}, trainer_pids - before
            assert writer in {p.pid for p in monitors} and writer not in trainer_pids
    finally:
        worker.kill()
        worker.wait()


RANK = """
import json, os, sys, time
from core_monitor import Monitor

rank, done = int(sys.argv[1]), sys.argv[3] + "/rank0-done"
with Monitor(["jsonl"], project="p", name="r", log_dir=sys.argv[2],
             system_metrics=0.5) as monitor:
    print("ready", flush=True)
    started, cpu = time.time(), time.process_time()
    if rank == 1:  # the busy rank: one core, as long as rank 0 samples
        while not os.path.exists(done):
            pass
    else:
        time.sleep(5.0)
    print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.time() - started}),
          flush=True)
if rank == 0:
    open(done, "w").close()
"""


def test_every_local_rank_is_sampled_by_local_rank_zero(tmp_path):
    """Two ranks of one torchrun job on one node (its environment, no torch needed): rank 0
    samples both; rank 1 writes nothing and samples nothing, but its CPU is in rank 0's."""
    common = {"TORCHELASTIC_RUN_ID": f"test-{os.getpid()}", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "29999", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
              "GROUP_RANK": "0"}
    ranks = []
    for rank in (1, 0):
        env = {**os.environ, **common, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        ranks.append(subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RANK), str(rank), str(tmp_path / "runs"),
             str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True))
        assert ranks[-1].stdout is not None
        assert ranks[-1].stdout.readline() == "ready\n"
    outs = [json.loads(p.communicate(timeout=120)[0].splitlines()[-1]) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0]
    rows = jsonl_monitor.read_rows(RunInfo(project="p", name="r", log_dir=tmp_path / "runs"))
    processes = [v for t, _, v in rows if t == "system/processes"]
    cpu = [v for t, _, v in rows if t == "system/cpu_percent"]
    assert max(processes) == 2.0, rows
    # Rank 1 spun a core the whole time rank 0 sampled: rank 0's figure is mostly rank 1's
    # own share of the machine (rank 0 itself slept), far above a sleeper's few percent.
    busy = 100 * outs[0]["cpu"] / outs[0]["wall"]
    context = f"rank 1 used {busy:.0f} % of a core; samples {cpu}"
    assert sorted(cpu)[len(cpu) // 2] > 0.4 * busy, context
