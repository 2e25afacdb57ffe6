"""P-warmup: a training loop started right after ``Monitor()`` returns runs while the writers
import and start their SDKs. How much slower is it than the same loop unmonitored?

Each run is a fresh interpreter (``warmup_child.py``): P7's torch MLP on one thread at a fixed
width (about 2 ms a step on the development machine; the measured step is reported), 2,000
steps of 10 scalars to the four backends (process dispatch, ``Monitor()`` without ``wait``),
started as soon as ``Monitor()`` returns; the other arm is the same loop with no monitor. Arms
alternate. Figures: the seconds of the first 600 steps and of the whole loop (monitored /
unmonitored, per repetition; the writers take longer than the loop to start, so both run
beside them) and each arm's median step. The rows are read back from every backend after
``close()``.

The writers lower their CPU priority only once their backend started, and on Linux with
autogroup scheduling a nice value only ranks a process inside its own session (each writer's):
see docs/operations/dispatch.md, "Writers and the CPU".
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import count
from pathlib import Path
from typing import Any

from harness import check_count, spread
from p_dispatch import FOUR

CHILD = Path(__file__).resolve().parent / "warmup_child.py"
STEPS = 2000
#: The first steps reported apart: the issue's 600-step loop.
FIRST = 600
#: The MLP's hidden width (P7's model): about 2 ms a step on 2 cores of the development machine.
WIDTH = 512
_runs = count()


def _one(arm: str, width: int, root: Path) -> dict[str, Any]:
    log_dir = root / f"warmup-{next(_runs)}"
    log_dir.mkdir(parents=True)
    argv = [sys.executable, str(CHILD), arm, str(width), str(STEPS), str(FIRST),
            ",".join(FOUR), str(log_dir)]
    done = subprocess.run(argv, cwd=log_dir, capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"warm-up run {arm} failed ({done.returncode}): "
                           f"{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if arm == "monitor":
        for backend in FOUR:
            check_count(backend, "bench-warmup", log_dir.name, log_dir, STEPS * 10)
    return found


def run(quick: bool, root: Path) -> dict[str, Any]:
    reps = 3 if quick else 7
    arms = ("none", "monitor")
    found: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    for rep in range(reps):
        for arm in arms[rep % 2:] + arms[:rep % 2]:
            found[arm].append(_one(arm, WIDTH, root))
    out: dict[str, Any] = {
        "workload": f"{STEPS:,} steps of a torch MLP (width {WIDTH}, 1 thread) logging 10 "
                    f"scalars to {', '.join(FOUR)} from the moment Monitor() returns, against "
                    f"the same loop unmonitored; a fresh interpreter per run, {reps} runs per "
                    "arm, alternated",
        "steps": STEPS, "first": FIRST,
        "median_step_ms": {a: spread([r["median_step_ms"] for r in found[a]]) for a in arms},
    }
    for key in ("first_s", "loop_s"):
        seconds = {a: [r[key] for r in found[a]] for a in arms}
        out[key] = {a: spread(seconds[a]) for a in arms}
        out[key]["ratio"] = spread([m / n for m, n in zip(seconds["monitor"], seconds["none"],
                                                         strict=True)])
    return out
