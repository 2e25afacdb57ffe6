"""B5 memory: does anything grow with the number of steps logged?

Null backend: one process logs ``steps`` x 10 scalars through ``Monitor.log`` into a backend that
does nothing; RSS (``VmRSS``) is read from ``/proc/self/status`` after a warm-up and at the end,
and the peak (``VmHWM``) too. Target: growth <= 10 MB (nothing the core keeps grows with steps).
Real backends: one process per backend logs ``steps`` x 10 scalars; reported: RSS after import
and start, peak RSS of the process, and the peak RSS of its child processes (wandb's service).
The benchmark runs in its own subprocess (one per backend) so nothing else shares its heap.
"""

from __future__ import annotations

import contextlib
import gc
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import NullBackend, check_count, descendants_hwm_kb, proc_status

from core_monitor import Monitor

SCALARS = 10
TARGET_GROWTH_MB = 10.0
WARMUP = 10_000


def _mb(kb: int) -> float:
    return round(kb / 1024, 1)


def run_null(quick: bool) -> dict[str, Any]:
    steps = 200_000 if quick else 1_000_000
    monitor = Monitor([NullBackend], project="bench-b5", name="null")
    tags = [f"train/scalar_{j}" for j in range(SCALARS)]
    log = monitor.log
    for i in range(WARMUP):
        log({t: i * 0.5 + j for j, t in enumerate(tags)}, step=i)
    gc.collect()
    start = proc_status()
    samples = []
    began = time.perf_counter()
    chunk = steps // 10
    for part in range(10):
        for i in range(WARMUP + part * chunk, WARMUP + (part + 1) * chunk):
            log({t: i * 0.5 + j for j, t in enumerate(tags)}, step=i)
        samples.append(_mb(proc_status()["VmRSS"]))
    elapsed = time.perf_counter() - began
    gc.collect()
    end = proc_status()
    monitor.close()
    growth = _mb(end["VmRSS"] - start["VmRSS"])
    return {
        "workload": f"{steps:,} steps x {SCALARS} scalars after {WARMUP:,} warm-up steps",
        "steps": steps,
        "rss_start_mb": _mb(start["VmRSS"]),
        "rss_end_mb": _mb(end["VmRSS"]),
        "rss_every_10pct_mb": samples,
        "peak_mb": _mb(end["VmHWM"]),
        "growth_mb": growth,
        "peak_growth_mb": _mb(end["VmHWM"] - start["VmRSS"]),
        "us_per_log": elapsed / steps * 1e6,
        "target": f"growth <= {TARGET_GROWTH_MB} MB",
        "pass": max(growth, _mb(end["VmHWM"] - start["VmRSS"])) <= TARGET_GROWTH_MB,
    }


def run_backend(backend: str, quick: bool, root: Path, direct: bool = False) -> dict[str, Any]:
    """``steps`` x 10 scalars to one real backend, through ``Monitor`` or (``direct``) through
    the SDK as B1's direct arm writes it; RSS read before and after."""
    steps = 20_000 if quick else 100_000
    before_import = proc_status()
    log_dir = root / f"b5-{backend}"
    name = f"mem-{backend}"
    tags = [f"train/scalar_{j}" for j in range(SCALARS)]
    log, flush, close = (_direct if direct else _monitor)(backend, name, log_dir)
    gc.collect()
    started = proc_status()
    began = time.perf_counter()
    for i in range(steps):
        log({t: i * 0.5 + j for j, t in enumerate(tags)}, i)
    flush()
    elapsed = time.perf_counter() - began
    before_close = proc_status()
    children_kb = descendants_hwm_kb()
    close()
    children_kb = max(children_kb, descendants_hwm_kb())
    after_close = proc_status()
    if not direct:
        check_count(backend, "bench-b5", name, log_dir, steps * SCALARS)
    return {
        "workload": f"{steps:,} steps x {SCALARS} scalars"
                    + (" through the SDK directly" if direct else " through Monitor"),
        "steps": steps,
        "rss_before_import_mb": _mb(before_import["VmRSS"]),
        "rss_after_start_mb": _mb(started["VmRSS"]),
        "rss_before_close_mb": _mb(before_close["VmRSS"]),
        "peak_mb": _mb(after_close["VmHWM"]),
        "peak_growth_mb": _mb(after_close["VmHWM"] - started["VmRSS"]),
        "children_peak_mb": _mb(children_kb),
        "us_per_log": elapsed / steps * 1e6,
        "rows_checked": not direct,
    }


def _monitor(backend: str, name: str, log_dir: Path) -> tuple[Callable[..., Any], ...]:
    with contextlib.redirect_stdout(io.StringIO()):
        monitor = Monitor([backend], project="bench-b5", name=name, log_dir=log_dir)

    def close() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            monitor.close()
        if monitor.failures:
            raise RuntimeError(f"{backend}: backend failures {monitor.failures}")

    return monitor.log, monitor.flush, close


def _direct(backend: str, name: str, log_dir: Path) -> tuple[Callable[..., Any], ...]:
    log_dir.mkdir(parents=True, exist_ok=True)
    if backend == "tensorboard":
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        writer = EventFileWriter(str(log_dir))

        def log(row: dict[str, float], step: int) -> None:
            event = Event(wall_time=time.time(), step=step)
            add = event.summary.value.add
            for tag, value in row.items():
                add(tag=tag, simple_value=value)
            writer.add_event(event)

        return log, writer.flush, writer.close
    if backend == "trackio":
        import trackio

        with contextlib.redirect_stdout(io.StringIO()):
            run = trackio.init(project="bench-b5-direct", name=name, auto_log_gpu=False,
                               auto_log_cpu=False)

        def flush() -> None:
            with run._client_lock:
                run._flush_queues_inline()

        def finish() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                trackio.finish()

        return trackio.log, flush, finish
    import wandb

    run = wandb.init(project="bench-b5-direct", name=name, dir=str(log_dir), mode="offline")
    return run.log, lambda: None, run.finish
