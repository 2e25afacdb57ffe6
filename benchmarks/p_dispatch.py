"""Background dispatch: what ``log()`` costs the training thread (P3), what the worker threads
cost a real training loop (P7), and the log rate the three backends sustain.

P3: per-call time of ``log()`` (10 scalars) on the caller's thread, each call timed alone, median
over every call of every repetition. A: TensorBoard + Trackio + wandb, ``dispatch="background"``
(queue large enough never to fill). B: the same call into a backend that does nothing, in
``dispatch="sync"`` (the core's own floor). Every row is read back from each backend afterwards.

P7: wall time of the demo's training loop (digits MLP, ``examples/train_digits.py``'s
``forward``), logging 5 scalars every step to the three backends, ``close()`` included (also
reported without it: until the last ``log()`` returned), against the same loop without a
monitor; the arms alternate. The GIL share is the CPU time of the backends' worker threads
(``/proc/self/task``) over the loop's wall time until the last ``log()``.

Sustained: the three backends drain N calls as fast as ``log()`` queues them (queue large
enough): N / (time until ``flush()`` returns) is the steady rate they absorb. Beyond it, with a
queue of 200 calls, ``log()`` blocks: the median per-call time once the queue is full.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import threading
import time
from itertools import count
from pathlib import Path
from typing import Any

from harness import NullBackend, alternate, check_count, metrics, paired, spread

from core_monitor import Monitor

THREE = ["tensorboard", "trackio", "wandb"]
_runs = count()
sys.path.append(str(Path(__file__).resolve().parents[1] / "examples"))


def _monitor(backends: list[Any], root: Path, **kwargs: Any) -> tuple[Monitor, str, Path]:
    name = f"p-{next(_runs)}"
    with contextlib.redirect_stdout(io.StringIO()):
        monitor = Monitor(backends, project="bench-p", name=name, log_dir=root / name, **kwargs)
    return monitor, name, root / name


def _close(monitor: Monitor) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        monitor.close()
    if monitor.failures or monitor.undelivered or monitor.dropped:
        raise RuntimeError(f"failures {monitor.failures}, undelivered {monitor.undelivered}, "
                           f"dropped {monitor.dropped}")


def _per_call(monitor: Monitor, calls: int, row: dict[str, float]) -> list[float]:
    log, clock = monitor.log, time.perf_counter
    out = []
    for step in range(calls):
        start = clock()
        log(row, step=step)
        out.append(clock() - start)
    return out


def run_p3(quick: bool, root: Path) -> dict[str, Any]:
    calls, reps = (1_000, 3) if quick else (3_000, 5)
    row = metrics(10)
    a_times: list[float] = []
    b_times: list[float] = []
    for rep in range(reps):
        for arm in (("a", "b") if rep % 2 == 0 else ("b", "a")):
            if arm == "a":
                monitor, name, log_dir = _monitor(THREE, root, queue_size=calls + 1)
                a_times += _per_call(monitor, calls, row)
                _close(monitor)
                if rep == 0:
                    for backend in THREE:
                        check_count(backend, "bench-p", name, log_dir, calls * 10)
            else:
                monitor, _, _ = _monitor([NullBackend], root, dispatch="sync")
                b_times += _per_call(monitor, calls, row)
                _close(monitor)
    a, b = statistics.median(a_times) * 1e6, statistics.median(b_times) * 1e6
    return {
        "workload": f"{calls:,} log() calls of 10 scalars x {reps} repetitions per arm, each "
                    "call timed alone",
        "a_us": a, "b_us": b, "added_us": a - b,
        "a_p90_us": sorted(a_times)[int(len(a_times) * 0.9)] * 1e6,
        "pass": a - b <= 3.0 and a <= 5.0,
        "target": "<= 3 us added, <= 5 us total",
        "rows_checked": True,
    }


def _thread_cpu(native_ids: list[int]) -> float:
    """CPU seconds (user + system) of this process's threads ``native_ids`` (Linux)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for tid in native_ids:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def run_p7(quick: bool, root: Path) -> dict[str, Any]:
    import numpy as np
    import train_digits
    from sklearn.datasets import load_digits

    steps, reps = (500, 3) if quick else (2_000, 5)
    args = train_digits.parse_args(["--steps", str(steps)])
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    share: dict[str, list[float]] = {"background": [], "sync": []}
    loop_only: dict[str, list[float]] = {"none": [], "background": [], "sync": []}

    def loop(dispatch: str | None) -> float:
        rng = np.random.default_rng(0)
        params = {"w1": rng.normal(0, 0.17, (64, 64)), "b1": np.zeros(64),
                  "w2": rng.normal(0, 0.12, (64, 10)), "b2": np.zeros(10)}
        monitor = None if dispatch is None else _monitor(THREE, root, dispatch=dispatch)[0]
        workers = None if monitor is None else monitor._channel.workers
        ids = [w._thread.native_id for w in workers.workers] if workers is not None else []
        cpu0 = _thread_cpu(ids)
        start = time.perf_counter()
        for step in range(steps):
            batch = rng.choice(len(x), args.batch_size, replace=False)
            loss, accuracy, grads = train_digits.forward(params, x[batch], y[batch])
            lr = train_digits.learning_rate(step, args)
            for key, grad in grads.items():
                params[key] -= lr * grad
            if monitor is not None:
                monitor.log({"train/loss": loss, "train/accuracy": accuracy, "lr": lr,
                             "grad/w1": float(np.abs(grads["w1"]).mean()),
                             "grad/w2": float(np.abs(grads["w2"]).mean())}, step=step)
        cpu1 = _thread_cpu(ids)
        loop_only["none" if dispatch is None else dispatch].append(time.perf_counter() - start)
        if monitor is not None:
            _close(monitor)
        seconds = time.perf_counter() - start
        if dispatch is not None:
            share[dispatch].append((cpu1 - cpu0) / loop_only[dispatch][-1])
        return seconds

    times = alternate({"none": lambda: loop(None), "background": lambda: loop("background"),
                       "sync": lambda: loop("sync")}, reps)
    out: dict[str, Any] = {"workload": f"{steps:,} steps of the digits MLP (batch 64), 5 "
                           f"scalars per step, close() included, {reps} repetitions"}
    for mode in ("background", "sync"):
        out[mode] = paired(times[mode], times["none"], steps)
        out[mode]["worker_cpu_share"] = spread(share[mode]) if share[mode] else None
        out[mode]["loop_only"] = paired(loop_only[mode], loop_only["none"], steps)
    out["none_ms"] = spread([t * 1e3 for t in times["none"]])
    out["pass"] = out["background"]["ratio"]["median"] <= 1.05
    out["target"] = "background <= 1.05x"
    return out


def run_sustained(quick: bool, root: Path) -> dict[str, Any]:
    calls = 1_000 if quick else 3_000
    row = metrics(10)
    rates = []
    for _ in range(2 if quick else 3):
        monitor, name, log_dir = _monitor(THREE, root, queue_size=calls + 1)
        start = time.perf_counter()
        for step in range(calls):
            monitor.log(row, step=step)
        queued = time.perf_counter() - start
        monitor.flush()
        rates.append({"rate": calls / (time.perf_counter() - start), "queue_s": queued})
        _close(monitor)
    check_count("wandb", "bench-p", name, log_dir, calls * 10)
    # Beyond the rate: a small queue fills, then each log() waits for room.
    monitor, _, _ = _monitor(THREE, root, queue_size=200)
    per_call = _per_call(monitor, 1_200, row)
    _close(monitor)
    blocked = per_call[400:]  # the queue has been full for a while
    return {
        "workload": f"{calls:,} calls of 10 scalars queued at once, drained by the three "
                    "backends; then 1,200 calls into a queue of 200",
        "steps_per_s": spread([r["rate"] for r in rates]),
        "queueing_us_per_call": spread([r["queue_s"] / calls * 1e6 for r in rates]),
        "blocked_us_per_call": spread([t * 1e6 for t in blocked]),
        "threads": threading.active_count(),
    }
