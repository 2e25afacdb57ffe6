"""B6 scale: time per ``Monitor.log`` call with 1, 2 and 3 real backends and 1, 10 and 100
scalars per call.

Backend sets: ``tensorboard``; ``tensorboard + trackio``; ``tensorboard + trackio + wandb``.
Per repetition and set: one ``Monitor``, then for each scalar count ``calls`` log calls and a
``flush()`` (timed together); sets are interleaved, their order rotated every repetition.
The first repetition's stored rows are counted in every backend.
"""

from __future__ import annotations

import contextlib
import io
from itertools import count
from pathlib import Path
from typing import Any

from harness import check_count, spread, timed

from core_monitor import Monitor

SETS = (("tensorboard",), ("tensorboard", "trackio"), ("tensorboard", "trackio", "wandb"))
SIZES = (1, 10, 100)
_runs = count()


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls = 300 if quick else 1_000
    reps = 2 if quick else 3
    rows = {n: [{f"n{n}/scalar_{j}": i * 1e-3 + j for j in range(n)} for i in range(calls)]
            for n in SIZES}
    times: dict[str, dict[int, list[float]]] = {"+".join(s): {n: [] for n in SIZES}
                                                for s in SETS}
    for rep in range(reps):
        k = rep % len(SETS)
        for backends in SETS[k:] + SETS[:k]:
            name = f"scale-{next(_runs)}"
            log_dir = root / name
            with contextlib.redirect_stdout(io.StringIO()):
                # wait=True: the writers' start is not timed (P-start and P-warmup measure it)
                monitor = Monitor(list(backends), project="bench-b6", name=name,
                                  log_dir=log_dir, wait=True)
            step = 0
            for n in SIZES:
                def body(log=monitor.log, flush=monitor.flush, batch=rows[n],
                         first=step) -> None:
                    for i, row in enumerate(batch, first):
                        log(row, step=i)
                    flush()

                times["+".join(backends)][n].append(timed(body) / calls)
                step += calls
            with contextlib.redirect_stdout(io.StringIO()):
                monitor.close()
            if monitor.failures:
                raise RuntimeError(f"backend failures: {monitor.failures}")
            if rep == 0:  # each set's first run
                for backend in backends:
                    check_count(backend, "bench-b6", name, log_dir, calls * sum(SIZES))
    table = {}
    for backends, by_size in times.items():
        table[backends] = {str(n): spread([t * 1e6 for t in ts]) for n, ts in by_size.items()}
    return {
        "workload": f"{calls:,} log calls per cell (+ flush), {reps} repetitions, sets "
                    "interleaved",
        "us_per_call": table,
        "rows_checked": True,
    }
