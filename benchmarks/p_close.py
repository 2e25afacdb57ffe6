"""P-close: how long ``close()`` takes once everything logged is flushed, per backend.

Sets: each backend alone and the four together, process mode. Per arm: a new monitor, 1,000
calls of 10 scalars (quick: 300), ``flush()`` (not timed), then ``close()``, timed: what is left
is each backend's own end of run (TensorBoard's file close, Trackio's finish, wandb's
``finish`` and its service's shutdown, MLflow's ``end_run``) and the writer processes' exit.
The sets alternate, order rotated every repetition; every run's rows are read back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness import alternate, check_count, metrics, spread
from p_dispatch import FOUR, _close, _monitor

SETS = {**{b: [b] for b in FOUR}, "four": FOUR}


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls, reps = (300, 3) if quick else (1_000, 7)
    row = metrics(10)

    def arm(backends: list[str]) -> float:
        monitor, name, log_dir = _monitor(backends, root, dispatch="process")
        for step in range(calls):
            monitor.log(row, step=step)
        monitor.flush()
        time.sleep(0.2)  # what an SDK's own threads still do right after a flush
        seconds = _close(monitor)
        for backend in backends:
            check_count(backend, "bench-p", name, log_dir, calls * 10)
        return seconds

    times = alternate({s: (lambda b=b: arm(b)) for s, b in SETS.items()}, reps)
    return {
        "workload": f"{calls:,} calls of 10 scalars, flush(), then close() timed; process mode, "
                    f"{reps} runs per set, sets alternated",
        "close_s": {s: spread(t) for s, t in times.items()},
    }
