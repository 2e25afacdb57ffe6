"""B3 core floor: scalars per second through ``Monitor.log`` into a backend that does nothing.

A = ``Monitor([NullBackend], project=...).log(batch, step=i)`` (batch = 1, 8 or 64 scalars).
B = a plain Python loop calling ``NullBackend.monitor_write(events=...)`` with prebuilt events:
the cost of a Python call per batch, below which no dispatcher can go.
Target: >= 1,000,000 scalars/s through A at batch 64.
"""

from __future__ import annotations

import time
from typing import Any

from harness import NullBackend, alternate, metrics, paired, spread, timed

from core_monitor import Event, Monitor

BATCHES = (1, 8, 64)
TARGET_SCALARS_PER_S = 1_000_000


def run(quick: bool) -> dict[str, Any]:
    scalars = 2**16
    reps = 5 if quick else 15
    out: dict[str, Any] = {"workload": f"{scalars} scalars per repetition, {reps} repetitions",
                           "batches": {}}
    for batch in BATCHES:
        calls = scalars // batch
        data = metrics(batch)
        now = time.time()
        prebuilt = [tuple(Event(t, v, i, now) for t, v in data.items()) for i in range(calls)]
        monitor = Monitor([NullBackend], project="bench-b3", name=f"floor-{batch}")
        backend = NullBackend(monitor.run)

        def via_monitor(log=monitor.log, data=data, calls=calls) -> float:
            def body() -> None:
                for i in range(calls):
                    log(data, step=i)
            return timed(body)

        def direct(write=backend.monitor_write, prebuilt=prebuilt) -> float:
            def body() -> None:
                for events in prebuilt:
                    write(events=events)
            return timed(body)

        via_monitor(), direct()  # warm-up
        times = alternate({"monitor": via_monitor, "direct": direct}, reps)
        monitor.close()
        stats = paired(times["monitor"], times["direct"], per=calls)
        rates = [scalars / t for t in times["monitor"]]
        out["batches"][str(batch)] = {
            "calls": calls,
            "monitor_ns_per_scalar": spread([t / scalars * 1e9 for t in times["monitor"]]),
            "direct_ns_per_scalar": spread([t / scalars * 1e9 for t in times["direct"]]),
            "monitor_scalars_per_s": spread(rates),
            "ns_per_log_call": spread([t / calls * 1e9 for t in times["monitor"]]),
            "added_ns_per_call": {k: v * 1000 if k != "n" else v
                                  for k, v in stats["added_us"].items()},
            "ratio_monitor_over_direct": stats["ratio"],
        }
    best = out["batches"]["64"]["monitor_scalars_per_s"]["median"]
    out["target"] = f">= {TARGET_SCALARS_PER_S:,} scalars/s at batch 64"
    out["pass"] = best >= TARGET_SCALARS_PER_S
    return out
