"""P7-system: what ``Monitor(system_metrics=1)`` costs a training loop, and the sampler's CPU.

The P7 loop (a torch MLP on the CPU, one thread, about 3 and 15 ms per step, 10 scalars per step
to the four backends, ``dispatch="process"``) in three arms: no monitor, a monitor with
``system_metrics`` off, and one with ``system_metrics=1`` (a sample every second); arms
alternate, order rotated every repetition. Each monitored arm opens its own monitor
(``wait=True``, not timed), so the sampler runs only during its own arm. Timed: the steps until
the last ``log()`` returned. Also the sampler process's CPU per sample (its CPU time between
its first and last sample of the arm, over the samples in between): what one reading of the
job's processes costs.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

from harness import paired, spread
from p_dispatch import FOUR, _calibrate, _close, _Model, _monitor, _row

STEP_MS = (3.0, 15.0)
ARMS = ("none", "off", "on")


def run(quick: bool, root: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    reps = 2 if quick else 4
    loop_s = 3.0 if quick else 6.0  # at least a few samples per "on" arm
    calibrated = _calibrate(STEP_MS)
    models = {t: _Model(calibrated[t][0]) for t in STEP_MS}
    steps = {t: max(15, int(loop_s * 1e3 / t)) for t in STEP_MS}
    times: dict[float, dict[str, list[float]]] = {t: {a: [] for a in ARMS} for t in STEP_MS}
    per_sample: list[float] = []
    samples: list[int] = []

    for rep in range(reps):
        for target in STEP_MS:
            k = (rep + STEP_MS.index(target)) % len(ARMS)
            for arm in ARMS[k:] + ARMS[:k]:
                gc.collect()
                model = models[target]
                monitor = None
                if arm != "none":
                    monitor, _, _ = _monitor(FOUR, root, wait=True,
                                             system_metrics=1 if arm == "on" else False)
                sampler = monitor._system.sampler if monitor and monitor._system else None
                if sampler is not None:
                    deadline = time.monotonic() + 30
                    while sampler.samples < 1 and time.monotonic() < deadline:
                        time.sleep(0.05)  # its first sample: the process has started
                    first_cpu, first_n = sampler.cpu_seconds, sampler.samples
                time.sleep(0.3)
                start = time.perf_counter()
                for step in range(steps[target]):
                    loss = float(model.step())
                    if monitor is not None:
                        monitor.log(_row(loss, 0.01, step), step=step)
                times[target][arm].append(time.perf_counter() - start)
                if sampler is not None:
                    n = sampler.samples - first_n
                    if n > 0:
                        per_sample.append((sampler.cpu_seconds - first_cpu) / n)
                        samples.append(n)
                if monitor is not None:
                    _close(monitor)

    out: dict[str, Any] = {"steps": {}}
    for target in STEP_MS:
        t = times[target]
        out["steps"][f"{target:g}"] = {
            "width": calibrated[target][0], "steps": steps[target],
            "off": paired(t["off"], t["none"], steps[target]),
            "on": paired(t["on"], t["none"], steps[target]),
            "on_vs_off": paired(t["on"], t["off"], steps[target]),
        }
    out["sampler_cpu_ms_per_sample"] = spread([x * 1e3 for x in per_sample])
    out["samples_per_arm"] = spread([float(n) for n in samples])
    out["workload"] = (f"P7's MLP, 10 scalars per step to the four backends (process), "
                       f"~{loop_s:g} s per arm, {reps} repetitions, system_metrics=1 vs off")
    out["target"] = "system_metrics=1 vs off <= 1.03x"
    out["pass"] = all(row["on_vs_off"]["ratio"]["median"] <= 1.03
                      for row in out["steps"].values())
    return out
