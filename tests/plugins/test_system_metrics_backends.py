"""``Monitor(system_metrics=...)``: the training job's own CPU and memory, sampled once and read
back alike from every backend's storage; not the machine's, not the writers'.

No timing is asserted tightly (the suite runs on busy machines): each figure is compared with
what the trainer measured of itself, within bounds that a figure following the CPU hogs, the
machine or the writers would break by far.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from trackers import BACKENDS, READERS

from core_monitor import RunInfo

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(sys.platform != "linux", reason="reads /proc through psutil")]

INTERVAL = 0.5
HOLD = 400 * 2**20  # bytes the trainer holds while it spins

TRAIN = """
import json, sys, time
from core_monitor import Monitor

log_dir, backends, interval = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
options = {name: value for name, value in json.loads(sys.argv[4]).items() if name in backends}
monitor = Monitor(backends, project="sys", name="job", log_dir=log_dir,
                  system_metrics=interval, **options)
for step in range(3):
    monitor.log({"loss": 1.0 / (step + 1)}, step=step)
t0, c0 = time.time(), time.process_time()
time.sleep(5.0)  # the writers start meanwhile (wait=False); the hogs run
block = bytearray(HOLD)
block[::4096] = b"\\1" * len(range(0, HOLD, 4096))  # every page resident
t1, c1 = time.time(), time.process_time()
while time.time() - t1 < 4.0:
    pass
t2, c2 = time.time(), time.process_time()
monitor.log({"loss": 0.0}, step=3)
monitor.close()
print(json.dumps({"sleep": (c1 - c0) / (t1 - t0), "spin": (c2 - c1) / (t2 - t1),
                  "samples": monitor._system.sampler.samples}))
""".replace("HOLD", str(HOLD))

HOG = "while True: pass"
#: wandb's own sampler every 0.5 s, were it on: the run would hold its stats records.
OPTIONS = {"wandb": {"settings": {"x_stats_sampling_interval": 0.5}}}


def samples_by_step(rows, tag):
    return {step: value for name, step, value in rows if name == tag}


def test_the_job_is_sampled_not_the_machine_nor_the_writers(tmp_path):
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        hog_cpu = [psutil.Process(h.pid) for h in hogs]
        before = sum(sum(p.cpu_times()[:2]) for p in hog_cpu)
        started = time.time()
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(TRAIN), str(tmp_path / "runs"),
             json.dumps(BACKENDS), str(INTERVAL), json.dumps(OPTIONS)],
            capture_output=True, text=True, timeout=600, cwd=tmp_path)
        hog_percent = 100 * (sum(sum(p.cpu_times()[:2]) for p in hog_cpu) - before) / (
            time.time() - started)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 0, done.stderr[-4000:]
    own = json.loads(done.stdout.strip().splitlines()[-1])
    run = RunInfo(project="sys", name="job", log_dir=tmp_path / "runs")
    stored = {name: sorted(r for r in read(run) if r[0].startswith("system/"))
              for name, read in READERS.items()}

    # Every backend holds the same samples: each tag once per sample number.
    reference = stored["csv"]
    assert len({step for _, step, _ in reference}) == own["samples"] >= 6
    for name, rows in stored.items():
        assert [(t, s) for t, s, _ in rows] == [(t, s) for t, s, _ in reference], name
        for (tag, step, value), (_, _, expected) in zip(rows, reference, strict=True):
            assert math.isclose(value, expected, rel_tol=1e-6), (name, tag, step)
    # The samples' steps are their own: the caller's steps 0..3 stayed where they were.
    loss = sorted((s, v) for t, s, v in READERS["csv"](run) if t == "loss")
    assert [s for s, _ in loss] == [0, 1, 2, 3]

    cpu = samples_by_step(reference, "system/cpu_percent")
    memory = samples_by_step(reference, "system/memory_rss_bytes")
    baseline = min(memory.values())
    # The allocation may take seconds on a loaded machine: its samples are in neither phase.
    holding = sorted(s for s, m in memory.items() if m > baseline + 0.9 * HOLD)
    sleeping = sorted(s for s, m in memory.items() if m < baseline + 50e6 and s < holding[0])
    context = (f"hogs {hog_percent:.0f} %, trainer's own {own}, cpu {cpu}, memory {memory}, "
               f"writers {samples_by_step(reference, 'system/monitor/cpu_percent')}")
    # Memory: the 400 MiB the trainer holds, no more (no writer's memory counted).
    assert len(holding) >= 3, context
    for step in holding:
        assert memory[step] - baseline < 1.5 * HOLD, context
    # Sleeping: the trainer's own few percent, not the two hogs' (up to 200) nor the writers
    # starting their SDKs meanwhile (seconds of CPU each). The last sample before the
    # allocation may already hold some spinning.
    asleep = [cpu[s] for s in sleeping[:-1] if s in cpu]
    assert len(asleep) >= 3, context
    assert statistics.median(asleep) < 15 + 100 * own["sleep"], context
    # Spinning one core: what the trainer measured of itself (its share of a busy machine),
    # not that plus the hogs'. The first holding sample began while allocating; the last is
    # close()'s, partly after the spin.
    spinning = [cpu[s] for s in holding[1:-1]]
    assert len(spinning) >= 2, context
    assert 0.5 * 100 * own["spin"] < statistics.median(spinning) < 1.5 * 100 * own["spin"] + 15, (
        context)
    # The writers are reported apart, and they did work while the trainer slept.
    monitor_cpu = samples_by_step(reference, "system/monitor/cpu_percent")
    assert max(samples_by_step(reference, "system/monitor/processes").values()) >= len(BACKENDS)
    assert set(samples_by_step(reference, "system/processes").values()) == {1.0}, context
    assert sum(monitor_cpu[s] * INTERVAL for s in sleeping) > 100 * 1.0, context
    # wandb's own sampler was off (though set to sample every 0.5 s): its transaction log
    # holds no system stats record.
    if "wandb" in READERS:
        from wandb_monitor.reader import read_records, run_folders

        (folder,) = run_folders(run)
        assert not any(record.HasField("stats") for record in read_records(folder))
