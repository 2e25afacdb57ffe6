"""P3-journal: what the run journal adds to ``log()`` on the caller's thread, and its size.

A: the four backends (trackio, tensorboard, wandb offline, mlflow), ``dispatch="process"``,
with the run journal (the default; on the benchmark's temp folder, a local disk). B: the same
monitor with ``journal=False``. With ``run.py --journal-dir DIR`` a third arm, R: the journal in
``DIR`` (``Monitor(journal_dir=DIR)``; e.g. a network filesystem), the backends' own files still
on the temp folder. Each ``log()`` of 10 scalars is timed alone; the arms alternate and every
call of every repetition counts (median, p99). After each journal arm's calls: the fsync a
``flush()`` does (``Journal.sync`` of what those calls appended since the last fsync, timed
alone), then the whole ``flush()`` (the writers' SDK flushes and cursor files included).
Journal bytes per row: the size of the journal's segments over the calls logged (before
``close()`` deletes them).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from harness import metrics
from p_dispatch import FOUR, _close, _monitor, _per_call

from core_monitor import journal

#: Set by ``run.py --journal-dir``: the folder of arm R.
JOURNAL_DIR_ENV = "MONITORS_BENCH_JOURNAL_DIR"


def _percentile(times: list[float], q: float) -> float:
    return sorted(times)[int(len(times) * q)] * 1e6


def _flush_costs(monitor: Any) -> tuple[float | None, float]:
    """Milliseconds of the journal's fsync alone (``None``: nothing unsynced), then of the
    ``flush()`` around it."""
    run_journal = monitor._dispatch.journal  # the benchmark's view inside the fan-out
    fsync = None
    if run_journal is not None and run_journal.dirty:
        start = time.perf_counter()
        run_journal.sync()
        fsync = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    monitor.flush()
    return fsync, (time.perf_counter() - start) * 1e3


def _summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls, reps = (1_000, 3) if quick else (2_000, 5)
    row = metrics(10)
    remote = os.environ.get(JOURNAL_DIR_ENV)
    remote_root = Path(remote) / f"bench-{os.getpid()}" if remote else None
    arms = ["journal", "none", *(["remote"] if remote_root else [])]
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    fsyncs: dict[str, list[float]] = {arm: [] for arm in arms}
    flushes: dict[str, list[float]] = {arm: [] for arm in arms}
    sizes = []
    try:
        for rep in range(reps):
            shift = rep % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                where = {"journal_dir": remote_root} if arm == "remote" else {}
                monitor, _, _ = _monitor(FOUR, root, dispatch="process", queue_size=calls + 1,
                                         wait=True, journal=arm != "none", **where)
                times[arm] += _per_call(monitor, calls, row)
                if arm == "journal":
                    folder = journal.journal_folder(monitor.run)
                    sizes.append(sum(p.stat().st_size for p in journal.segment_paths(folder)))
                fsync, flush = _flush_costs(monitor)
                if fsync is not None:
                    fsyncs[arm].append(fsync)
                flushes[arm].append(flush)
                _close(monitor)
    finally:
        if remote_root is not None:
            shutil.rmtree(remote_root, ignore_errors=True)
    a, b = (statistics.median(times[k]) * 1e6 for k in ("journal", "none"))
    p99 = _percentile(times["journal"], 0.99)
    result = {
        "workload": f"{calls:,} log() calls of 10 scalars x {reps} repetitions per arm, each "
                    "call timed alone; the four backends, process mode, journal on a local "
                    "disk vs journal=False"
                    + (f" vs journal in {remote}" if remote else ""),
        "a_us": a, "b_us": b, "added_us": a - b, "a_p99_us": p99,
        "b_p99_us": _percentile(times["none"], 0.99),
        "bytes_per_row": statistics.median(sizes) / calls,
        "fsync_ms": _summary(fsyncs["journal"]),
        "flush_ms": {arm: _summary(flushes[arm]) for arm in arms},
        "pass": a <= 5.0 and p99 <= 50.0,
        "target": "<= 5 us median, <= 50 us p99",
    }
    if remote:
        result["remote"] = {
            "journal_dir": remote,
            "us": statistics.median(times["remote"]) * 1e6,
            "p99_us": _percentile(times["remote"], 0.99),
            "fsync_ms": _summary(fsyncs["remote"]),
        }
    return result
