"""P7-sustained: P7's training loop run long enough that the writers' pipes fill, and what each
backend's writer costs in CPU per row.

P7's torch MLP (``torch.set_num_threads(1)``), its width calibrated for about 2 and 5 ms per
step, runs 20,000 steps (quick: 2,000) logging 10 scalars a step to the four backends in
process mode, against the same loop without a monitor; the two arms alternate, order rotated per
repetition and step size. A new monitor per arm: 10 rows logged and ``flush()``-ed first (so
every writer is started and the figures hold no start-up), then the timed loop until its last
``log()`` returns, then the ``flush()`` that drains what the pipes still hold, timed apart.

Each backend's writer CPU per row: the CPU seconds of its writer process and of every process
under it (``writers.py``), read after the warm-up flush and after the drain, divided by the rows
of the loop. The backend with the most CPU per row is the one that bounds the sustained rate: a
writer takes at most one core, so it keeps up with at most 1 / (its CPU per row) rows a second,
fewer when the cores are shared with the loop and the other writers.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

from harness import check_count, paired, spread
from p_dispatch import FOUR, _calibrate, _close, _Model, _monitor, _row
from writers import tree_cpu_s, writer_pids

#: Target step times, in milliseconds.
STEP_MS = (2.0, 5.0)
WARM_UP = 10


def run(quick: bool, root: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    steps, reps = (2_000, 2) if quick else (20_000, 3)
    calibrated = _calibrate(STEP_MS)
    models = {t: _Model(calibrated[t][0]) for t in STEP_MS}
    loop: dict[float, dict[str, list[float]]] = {t: {"none": [], "process": []} for t in STEP_MS}
    drain: dict[float, list[float]] = {t: [] for t in STEP_MS}
    close: dict[float, list[float]] = {t: [] for t in STEP_MS}
    cpu: dict[float, dict[str, list[float]]] = {t: {b: [] for b in FOUR} for t in STEP_MS}
    trainer_cpu: dict[float, list[float]] = {t: [] for t in STEP_MS}
    found_by = set()
    tree_size: dict[str, int] = {}  # processes in each writer's tree (the writer, its SDK's)

    def unmonitored(target: float) -> None:
        model = models[target]
        gc.collect()
        start = time.perf_counter()
        for _ in range(steps):
            float(model.step())  # the same host sync as the monitored arm
        loop[target]["none"].append(time.perf_counter() - start)

    def monitored(target: float) -> None:
        model, lr = models[target], 0.01
        monitor, name, log_dir = _monitor(FOUR, root, dispatch="process")
        log = monitor.log
        for step in range(WARM_UP):
            log(_row(0.0, lr, step), step=step)
        monitor.flush()  # every writer started and idle
        pids, how = writer_pids(monitor, FOUR)
        found_by.add(how)
        before = tree_cpu_s(pids)
        gc.collect()
        cpu_start = time.process_time()
        start = time.perf_counter()
        for step in range(WARM_UP, WARM_UP + steps):
            log(_row(float(model.step()), lr, step), step=step)
        loop[target]["process"].append(time.perf_counter() - start)
        start = time.perf_counter()
        monitor.flush()
        drain[target].append(time.perf_counter() - start)
        trainer_cpu[target].append(time.process_time() - cpu_start)
        after = tree_cpu_s(pids)  # before close(): the writers exit there
        for backend in pids:
            cpu[target][backend].append(after[backend][0] - before[backend][0])
            tree_size[backend] = max(tree_size.get(backend, 0), after[backend][1])
        close[target].append(_close(monitor))
        for backend in FOUR:
            check_count(backend, "bench-p", name, log_dir, (WARM_UP + steps) * 10)

    for rep in range(reps):
        for k, target in enumerate(STEP_MS):
            arms = [unmonitored, monitored]
            if (rep + k) % 2:
                arms.reverse()
            for arm in arms:
                time.sleep(0.3)  # what an SDK's own process still does after its close settles
                arm(target)

    out: dict[str, Any] = {
        "workload": f"torch MLP on CPU (1 thread), {steps:,} steps of 10 scalars to the four "
                    f"backends, process mode, vs the same loop unmonitored; {reps} "
                    "repetitions, arms alternated",
        "steps": steps, "writers_found_by": sorted(found_by), "writer_processes": tree_size,
        "step_ms": {},
    }
    for target in STEP_MS:
        t = loop[target]
        row: dict[str, Any] = {
            "width": calibrated[target][0], "calibrated_ms": calibrated[target][1],
            "none_ms_per_step": spread([x / steps * 1e3 for x in t["none"]]),
            "process": paired(t["process"], t["none"], steps),
            "with_drain": paired([x + d for x, d in zip(t["process"], drain[target],
                                                        strict=True)], t["none"], steps),
            "drain_s": spread(drain[target]),
            "close_s": spread(close[target]),
            "trainer_cpu_us_per_row": spread([c / steps * 1e6 for c in trainer_cpu[target]]),
        }
        per_row = {b: spread([c / steps * 1e6 for c in cpu[target][b]])
                   for b in FOUR if cpu[target][b]}
        row["writer_cpu_us_per_row"] = per_row
        if per_row:
            bound = max(per_row, key=lambda b: per_row[b]["median"])
            row["bound_by"] = bound
            row["bound_rows_per_s"] = 1e6 / max(per_row[bound]["median"], 1e-3)
            row["writers_cpu_us_per_row"] = sum(p["median"] for p in per_row.values())
        out["step_ms"][f"{target:g}"] = row
    return out
