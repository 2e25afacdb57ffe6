"""P-start: the time from a fresh interpreter's first line to its first ``log()`` returning,
through ``Monitor`` and through each SDK's own start, in the same run.

Each run is a fresh interpreter (``start_child.py``): a start-up cost is the whole process's
import and start. Sets: each backend alone and the four together. Arms per set:

- ``monitor``: ``import core_monitor``, ``Monitor(backends, dispatch="process")``, ``log()``;
- ``monitor-wait``: the same with ``Monitor(..., wait=True)`` (wait until every writer is
  ready), when the installed core has that keyword (``inspect.signature``); else left out;
- ``direct``: the SDKs' own start: TensorBoard ``EventFileWriter`` + one ``Event``; Trackio
  ``trackio.init`` + ``trackio.log``; wandb ``wandb.init(mode="offline")`` + ``run.log``;
  MLflow ``create_experiment`` + ``start_run`` on a new SQLite store under the temp dir +
  ``log_metrics``. The four together: the four, one after another, as a script would.

Every arm of every set runs once per repetition, order rotated. Figures: medians of the seconds
to the first log returning, and of the per-repetition ratios monitor / direct; then, apart, the
time to the first ``flush()`` returning and the ``close()`` after it. The monitor arms' rows are
read back from each backend's storage.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from itertools import count
from pathlib import Path
from typing import Any

from harness import check_count, spread
from p_dispatch import FOUR

from core_monitor import Monitor

CHILD = Path(__file__).resolve().parent / "start_child.py"
SETS = {**{b: [b] for b in FOUR}, "four": FOUR}
#: start_child.ROW: the 10 scalars of step 0.
SCALARS = 10
_runs = count()


def has_wait() -> bool:
    """Whether the installed ``Monitor`` takes ``wait=``."""
    return "wait" in inspect.signature(Monitor).parameters


def _one(arm: str, backends: list[str], root: Path) -> dict[str, Any]:
    log_dir = root / f"start-{next(_runs)}"
    log_dir.mkdir(parents=True)
    result = log_dir / "result.json"
    done = subprocess.run([sys.executable, str(CHILD), arm, ",".join(backends), str(log_dir),
                           str(result)], cwd=log_dir, capture_output=True, text=True,
                          timeout=240, check=False)
    if done.returncode != 0 or not result.exists():
        raise RuntimeError(f"start run {arm} {backends} failed ({done.returncode}): "
                           f"{done.stderr[-3000:]}")
    found = json.loads(result.read_text())
    if arm != "direct":
        for backend in backends:
            check_count(backend, "bench-start", log_dir.name, log_dir, SCALARS)
    return found


def run(quick: bool, root: Path) -> dict[str, Any]:
    reps = 3 if quick else 7
    arms = ["monitor", *(["monitor-wait"] if has_wait() else []), "direct"]
    found: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {a: [] for a in arms} for s in SETS}
    order = [(s, a) for s in SETS for a in arms]
    for rep in range(reps):
        k = rep * len(order) // reps  # a different arm first every repetition
        for s, a in order[k:] + order[:k]:
            found[s][a].append(_one(a, SETS[s], root))

    out: dict[str, Any] = {
        "workload": f"a fresh interpreter per run, from its first line to the first log() of "
                    f"10 scalars returning; {reps} runs per arm, arms rotated; dispatch "
                    "process",
        "arms": arms, "wait_supported": "monitor-wait" in arms, "sets": {},
    }
    for s, by_arm in found.items():
        direct = [r["first_log_s"] for r in by_arm["direct"]]
        row: dict[str, Any] = {}
        for a, runs in by_arm.items():
            first = [r["first_log_s"] for r in runs]
            row[a] = {key: spread([r[key] for r in runs])
                      for key in ("import_s", "start_s", "first_log_s", "flushed_s", "close_s")}
            if a != "direct":
                row[a]["ratio"] = spread([m / d for m, d in zip(first, direct, strict=True)])
        out["sets"][s] = row
    return out
