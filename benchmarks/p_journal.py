"""P3-journal: what the run journal adds to ``log()`` on the caller's thread, and its size.

A: the four backends (trackio, tensorboard, wandb offline, mlflow), ``dispatch="process"``,
with the run journal (the default; on the benchmark's temp folder, a local disk). B: the same
monitor with ``journal=False``. Each ``log()`` of 10 scalars is timed alone; the arms alternate
and every call of every repetition counts (median, p99). Journal bytes per row: the size of
the journal's segments over the calls logged (before ``close()`` deletes them).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness import metrics
from p_dispatch import FOUR, _close, _monitor, _per_call

from core_monitor import journal


def _percentile(times: list[float], q: float) -> float:
    return sorted(times)[int(len(times) * q)] * 1e6


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls, reps = (1_000, 3) if quick else (2_000, 5)
    row = metrics(10)
    times: dict[str, list[float]] = {"journal": [], "none": []}
    sizes = []
    for rep in range(reps):
        for arm in (("journal", "none") if rep % 2 == 0 else ("none", "journal")):
            monitor, _, _ = _monitor(FOUR, root, dispatch="process", queue_size=calls + 1,
                                     wait=True, journal=arm == "journal")
            times[arm] += _per_call(monitor, calls, row)
            if arm == "journal":
                folder = journal.journal_folder(monitor.run)
                sizes.append(sum(p.stat().st_size for p in journal.segment_paths(folder)))
            _close(monitor)
    a, b = (statistics.median(times[k]) * 1e6 for k in ("journal", "none"))
    p99 = _percentile(times["journal"], 0.99)
    return {
        "workload": f"{calls:,} log() calls of 10 scalars x {reps} repetitions per arm, each "
                    "call timed alone; the four backends, process mode, journal on a local "
                    "disk vs journal=False",
        "a_us": a, "b_us": b, "added_us": a - b, "a_p99_us": p99,
        "b_p99_us": _percentile(times["none"], 0.99),
        "bytes_per_row": statistics.median(sizes) / calls,
        "pass": a <= 5.0 and p99 <= 50.0,
        "target": "<= 5 us median, <= 50 us p99",
    }
