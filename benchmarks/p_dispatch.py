"""The dispatch modes: what ``log()`` costs the training thread (P3), what each mode costs a real
training loop (P7), start-up and memory (P-startup), and each backend's sustained rate.

The four backends are trackio, tensorboard, wandb (offline) and mlflow (its local SQLite store
under the run's ``log_dir``, inside the benchmark's temp dir).

P3: per-call time of ``log()`` (10 scalars) on the caller's thread, each call timed alone,
median over every call of every repetition. A: the four backends, ``dispatch="process"`` (pipes
large enough never to fill). B: the same call into a backend that does nothing, in
``dispatch="sync"`` (the core's own floor). Every row is read back from each backend (first
repetition).

P7: a torch MLP on the CPU (``torch.set_num_threads(1)``), its width calibrated for about 0.5,
3, 15 and 60 ms per training step (forward, backward, SGD), logging 10 scalars every step to the
four backends in each mode (process, thread, sync), against the same loop without a monitor;
the four arms alternate, order rotated every repetition and step size. Each repetition opens one
monitor per mode (``Monitor(...)`` is not timed: P-startup measures it) and runs every step size
through it. Timed: each segment of steps until its last ``log()`` returned; then, separately,
the ``flush()`` that drains what the backends still hold (the ratio with it: where a backend is
slower than the loop, its backlog drains there, as it would in ``close()``); and at the end of
the repetition each monitor's ``close()``.

P-startup: ``Monitor(...)`` with the four backends in a fresh interpreter per run (process and
thread alternating): its wall time, then the training process's RSS (``VmRSS``, and its peak
``VmHWM``) after 1,000 calls and a ``flush()``, and the summed peak RSS of its descendants (the
writer processes, wandb's service).

Sustained: one backend alone, process mode: N calls of 10 scalars queued as fast as ``log()``
goes (the pipe holds most of them), N / (time until ``flush()`` returns) is the rate the backend
absorbs. Also the four together.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import statistics
import subprocess
import sys
import time
from itertools import count
from pathlib import Path
from typing import Any

from harness import NullBackend, alternate, check_count, metrics, paired, spread

from core_monitor import Monitor

FOUR = ["trackio", "tensorboard", "wandb", "mlflow"]
MODES = ("process", "thread", "sync")
#: P7's target step times, in milliseconds.
STEP_MS = (0.5, 3.0, 15.0, 60.0)
_runs = count()


def _monitor(backends: list[Any], root: Path, log_dir: Path | None = None,
             **kwargs: Any) -> tuple[Monitor, str, Path]:
    """A monitor of a new run; its ``log_dir`` is ``root / name`` unless given."""
    name = f"p-{next(_runs)}"
    log_dir = root / name if log_dir is None else log_dir
    with contextlib.redirect_stdout(io.StringIO()):
        monitor = Monitor(backends, project="bench-p", name=name, log_dir=log_dir, **kwargs)
    return monitor, name, log_dir


def _close(monitor: Monitor) -> float:
    """Close ``monitor``; the seconds ``close()`` took. Raises when anything was lost."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        monitor.close()
    seconds = time.perf_counter() - start
    if monitor.failures or monitor.undelivered or monitor.dropped:
        raise RuntimeError(f"failures {monitor.failures}, undelivered {monitor.undelivered}, "
                           f"dropped {monitor.dropped}")
    return seconds


def _per_call(monitor: Monitor, calls: int, row: dict[str, float]) -> list[float]:
    log, clock = monitor.log, time.perf_counter
    out = []
    for step in range(calls):
        start = clock()
        log(row, step=step)
        out.append(clock() - start)
    return out


def run_p3(quick: bool, root: Path) -> dict[str, Any]:
    calls, reps = (1_000, 3) if quick else (2_000, 5)
    row = metrics(10)
    a_times: list[float] = []
    b_times: list[float] = []
    for rep in range(reps):
        for arm in (("a", "b") if rep % 2 == 0 else ("b", "a")):
            if arm == "a":
                monitor, name, log_dir = _monitor(FOUR, root, dispatch="process",
                                                  queue_size=calls + 1)
                a_times += _per_call(monitor, calls, row)
                _close(monitor)
                if rep == 0:
                    for backend in FOUR:
                        check_count(backend, "bench-p", name, log_dir, calls * 10)
            else:
                monitor, _, _ = _monitor([NullBackend], root, dispatch="sync")
                b_times += _per_call(monitor, calls, row)
                _close(monitor)
    a, b = statistics.median(a_times) * 1e6, statistics.median(b_times) * 1e6
    return {
        "workload": f"{calls:,} log() calls of 10 scalars x {reps} repetitions per arm, each "
                    "call timed alone; A: the four backends, process mode",
        "a_us": a, "b_us": b, "added_us": a - b,
        "a_p90_us": sorted(a_times)[int(len(a_times) * 0.9)] * 1e6,
        "a_p99_us": sorted(a_times)[int(len(a_times) * 0.99)] * 1e6,
        "pass": a <= 5.0,
        "target": "<= 5 us median",
        "rows_checked": True,
    }


# P7 ---------------------------------------------------------------------------------------------


class _Model:
    """A torch MLP (64 inputs -> width -> width -> 10) trained with SGD on random data."""

    def __init__(self, width: int, batch: int = 64) -> None:
        import torch

        gen = torch.Generator().manual_seed(0)
        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
            torch.nn.ReLU(), torch.nn.Linear(width, 10))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.x = torch.randn(batch, 64, generator=gen)
        self.y = torch.randint(0, 10, (batch,), generator=gen)
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def step(self) -> Any:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss

    def seconds_per_step(self, budget_s: float = 0.08) -> float:
        """The fastest of 3 chunks of steps, each about ``budget_s`` long (a loaded machine
        slows some chunks; the fastest is the model's own cost)."""
        self.step()
        start = time.perf_counter()
        self.step()
        steps = max(2, int(budget_s / max(time.perf_counter() - start, 1e-5)))
        chunks = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(steps):
                self.step()
            chunks.append((time.perf_counter() - start) / steps)
        return min(chunks)


def _calibrate(targets_ms: tuple[float, ...]) -> dict[float, tuple[int, float]]:
    """For each target, the MLP width whose step takes about that long: (width, measured ms).

    Step times are measured on a grid of widths (doubling), then each target's width is
    interpolated on a log-log scale between its two neighbours and measured once more.
    """
    grid: list[tuple[int, float]] = []
    width = 16
    while width <= 8192:
        grid.append((width, _Model(width).seconds_per_step() * 1e3))
        if grid[-1][1] > 1.5 * max(targets_ms):
            break
        width *= 2
    out = {}
    for target in targets_ms:
        below = [g for g in grid if g[1] <= target] or grid[:1]
        above = [g for g in grid if g[1] > target] or grid[-1:]
        (w0, t0), (w1, t1) = below[-1], above[0]
        if w0 == w1 or t1 <= t0:
            guess = w0
        else:
            guess = w0 * (w1 / w0) ** (math.log(target / t0) / math.log(t1 / t0))
        guess = max(8, int(guess))
        out[target] = (guess, _Model(guess).seconds_per_step() * 1e3)
    return out


def _row(value: float, lr: float, step: int) -> dict[str, float]:
    """The 10 scalars P7 logs per step."""
    return {"train/loss": value, "train/lr": lr, "train/loss2": value * value, "grad/a": 0.1,
            "grad/b": 0.2, "grad/c": 0.3, "sys/x": 1.0, "sys/y": 2.0, "sys/z": 3.0,
            "sys/step": float(step)}


def run_p7(quick: bool, root: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    reps = 3 if quick else 5
    loop_s = 0.8 if quick else 4.0  # wall time of one arm's loop, about
    calibrated = _calibrate(STEP_MS)
    models = {t: _Model(calibrated[t][0]) for t in STEP_MS}
    steps = {t: max(15, int(loop_s * 1e3 / t)) for t in STEP_MS}
    times = {t: {arm: [] for arm in ("none", *MODES)} for t in STEP_MS}
    drain = {t: {m: [] for m in MODES} for t in STEP_MS}
    close_s: dict[str, list[float]] = {m: [] for m in MODES}

    def segment(target: float, monitor: Monitor | None, first: int) -> float:
        """``steps[target]`` training steps, logging from step ``first``; their seconds."""
        model, lr = models[target], 0.01
        start = time.perf_counter()
        if monitor is None:
            for _ in range(steps[target]):
                float(model.step())  # the same host sync as the monitored arms
        else:
            log = monitor.log
            for step in range(first, first + steps[target]):
                log(_row(float(model.step()), lr, step), step=step)
        return time.perf_counter() - start

    for rep in range(reps):
        # One monitor per mode for the whole repetition (start-up is P-startup's figure), each
        # drained by flush() after its timed segment, so no backlog runs into the next arm.
        # One log_dir: Trackio keeps one folder per process (thread and sync share this one).
        shared = root / f"p7-{rep}"
        monitors = {m: _monitor(FOUR, root, shared, dispatch=m) for m in MODES}
        next_step = dict.fromkeys(MODES, 0)
        for target in STEP_MS:
            arms = ["none", *MODES]
            k = (rep + STEP_MS.index(target)) % len(arms)
            for arm in arms[k:] + arms[:k]:
                gc.collect()
                time.sleep(0.3)  # what an SDK's own process still does after flush() settles
                if arm == "none":
                    times[target]["none"].append(segment(target, None, 0))
                    continue
                monitor = monitors[arm][0]
                times[target][arm].append(segment(target, monitor, next_step[arm]))
                next_step[arm] += steps[target]
                start = time.perf_counter()
                monitor.flush()
                drain[target][arm].append(time.perf_counter() - start)
        for mode, (monitor, name, log_dir) in monitors.items():
            close_s[mode].append(_close(monitor))
            if rep == 0:  # every backend stored every scalar, in every mode
                for backend in FOUR:
                    check_count(backend, "bench-p", name, log_dir, next_step[mode] * 10)

    out: dict[str, Any] = {"steps": {}, "modes": list(MODES),
                           "close_s": {m: spread(close_s[m]) for m in MODES}}
    for target in STEP_MS:
        t = times[target]
        row: dict[str, Any] = {
            "width": calibrated[target][0], "calibrated_ms": calibrated[target][1],
            "steps": steps[target],
            "none_ms_per_step": spread([x / steps[target] * 1e3 for x in t["none"]]),
        }
        for mode in MODES:
            row[mode] = paired(t[mode], t["none"], steps[target])
            row[mode]["drain_s"] = spread(drain[target][mode])
            row[mode]["with_drain"] = paired(
                [x + d for x, d in zip(t[mode], drain[target][mode], strict=True)],
                t["none"], steps[target])
        out["steps"][f"{target:g}"] = row
    rows = out["steps"]
    out["pass"] = all(rows[k]["process"]["ratio"]["median"] <= 1.03
                      for k in rows if float(k) >= 3)
    out["target"] = "process <= 1.03x at >= 3 ms steps"
    out["workload"] = (f"torch MLP on CPU (1 thread), 10 scalars per step to the four backends, "
                       f"~{loop_s:g} s of steps per arm, {reps} repetitions, arms alternated")
    return out


# Start-up and memory ------------------------------------------------------------------------

_STARTUP = """
import contextlib, io, json, sys, time
sys.path.insert(0, {here!r})
from harness import descendants_hwm_kb, metrics, proc_status
from core_monitor import Monitor
mode, log_dir = sys.argv[1], sys.argv[2]
row = metrics(10)
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    monitor = Monitor({backends!r}, project="bench-startup", name="s", log_dir=log_dir,
                      dispatch=mode)
started = time.perf_counter() - start
for step in range(1000):
    monitor.log(row, step=step)
monitor.flush()
rss = proc_status()
children = descendants_hwm_kb()
with contextlib.redirect_stdout(io.StringIO()):
    monitor.close()
print(json.dumps({{"start_s": started, "rss_kb": rss["VmRSS"], "hwm_kb": rss["VmHWM"],
                  "children_hwm_kb": children}}))
"""


def run_startup(quick: bool, root: Path) -> dict[str, Any]:
    reps = 2 if quick else 5
    code = _STARTUP.format(here=str(Path(__file__).resolve().parent), backends=FOUR)
    found: dict[str, list[dict[str, Any]]] = {"process": [], "thread": []}

    def arm(mode: str) -> float:
        log_dir = root / f"startup-{next(_runs)}"
        done = subprocess.run([sys.executable, "-c", code, mode, str(log_dir)],
                              capture_output=True, text=True, timeout=240, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"start-up run ({mode}) failed: {done.stderr[-2000:]}")
        found[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
        return found[mode][-1]["start_s"]

    times = alternate({m: (lambda m=m: arm(m)) for m in found}, reps)
    out: dict[str, Any] = {"workload": f"Monitor() with the four backends, a fresh interpreter "
                           f"per run, process and thread alternating, {reps} runs each; RSS "
                           "after 1,000 calls of 10 scalars and flush()"}
    for mode, runs in found.items():
        out[mode] = {
            "start_s": spread(times[mode]),
            "rss_mb": spread([r["rss_kb"] / 1024 for r in runs]),
            "peak_rss_mb": spread([r["hwm_kb"] / 1024 for r in runs]),
            "children_peak_mb": spread([r["children_hwm_kb"] / 1024 for r in runs]),
        }
    out["start_ratio"] = spread([a / b for a, b in
                                 zip(times["process"], times["thread"], strict=True)])
    return out


# Sustained rates ----------------------------------------------------------------------------


def _sustained(backends: list[str], calls: int, reps: int, root: Path) -> dict[str, Any]:
    row = metrics(10)
    rates, queued = [], []
    name = log_dir = None
    for _ in range(reps):
        monitor, name, log_dir = _monitor(backends, root, dispatch="process",
                                          queue_size=calls + 1)
        start = time.perf_counter()
        for step in range(calls):
            monitor.log(row, step=step)
        queued.append((time.perf_counter() - start) / calls * 1e6)
        monitor.flush()
        rates.append(calls / (time.perf_counter() - start))
        _close(monitor)
    for backend in backends:
        check_count(backend, "bench-p", name, log_dir, calls * 10)
    return {"rows_per_s": spread(rates), "log_us_per_call": spread(queued)}


def run_sustained(quick: bool, root: Path) -> dict[str, Any]:
    calls, reps = (1_000, 1) if quick else (3_000, 3)
    out: dict[str, Any] = {
        "workload": f"{calls:,} calls of 10 scalars queued at once, process mode, {reps} "
                    "repetitions: rows / time until flush() returns",
        "backends": {b: _sustained([b], calls, reps, root) for b in FOUR},
    }
    out["four"] = _sustained(FOUR, calls, 1 if quick else reps, root)
    return out
