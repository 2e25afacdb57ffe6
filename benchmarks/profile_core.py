"""Where ``Monitor.log``'s time goes: a cProfile of the hot path and a breakdown of one call
into its parts, always of the installed ``Monitor.log`` itself (no copies of it to drift).

Workload: ``Monitor([NullBackend]).log(row, step=i)`` with 8 float scalars per call (the B1
row), and the same through the TensorBoard backend for the cProfile view of plugin + SDK.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
import timeit
from pathlib import Path
from typing import Any

from harness import NullBackend, metrics

from core_monitor import Event, Monitor
from core_monitor.events import Batch, rows_by_step

SCALARS = 8


def _top(profile: cProfile.Profile, n: int = 8) -> list[dict[str, Any]]:
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (file, line, func), (_, calls, tottime, cumtime, _) in stats.stats.items():
        where = f"{Path(file).name}:{line}({func})" if line else func
        rows.append({"function": where, "calls": calls, "tottime_s": tottime,
                     "cumtime_s": cumtime})
    rows.sort(key=lambda r: -r["tottime_s"])
    total = sum(r["tottime_s"] for r in rows) or 1.0
    for row in rows:
        row["share"] = row["tottime_s"] / total
    return rows[:n]


def _cprofile(monitor: Monitor, calls: int) -> list[dict[str, Any]]:
    row = metrics(SCALARS, "train")
    log = monitor.log
    profile = cProfile.Profile()
    profile.enable()
    for i in range(calls):
        log(row, step=i)
    monitor.flush()
    profile.disable()
    return _top(profile)


def _parts(monitor: Monitor) -> dict[str, float]:
    """Nanoseconds per log call of 8 scalars spent in each part (timeit, best of 5)."""
    row = metrics(SCALARS, "train")
    now = time.time()
    events = [Event(t, v, 1, now) for t, v in row.items()]
    batch = tuple(events)
    log_batch = Batch(((1, now, dict(row)),))  # what log() hands the backends
    dispatch = monitor._dispatch  # core_monitor.dispatch.SyncDispatch: what log() hands to
    write = dispatch.backends[0].hooks["monitor_write"]
    scope = {"monitor": monitor, "dispatch": dispatch, "row": row, "Event": Event,
             "new": tuple.__new__, "time": time, "events": events, "batch": batch,
             "log_batch": log_batch, "write": write, "rows_by_step": rows_by_step}

    def ns(stmt: str, number: int = 100_000) -> float:
        return min(timeit.repeat(stmt, globals=scope, number=number, repeat=5)) / number * 1e9

    whole = ns("monitor.log(row, step=5)")
    parts = {
        "build 8 Event objects (tuple.__new__(Event, ...))":
            ns("[new(Event, (t, v, 5, 1.0)) for t, v in row.items()]")
            - ns("[(t, v, 5, 1.0) for t, v in row.items()]"),
        "iterate the dict + type checks of tag and value":
            ns("for t, v in row.items(): type(v) is float and type(t) is str and t"),
        "time.time()": ns("time.time()"),
        "SyncDispatch.send(): loop, keyword call, pending-failure check":
            ns("dispatch.send('monitor_write', {'events': batch})"),
        "  of which the backend call write(events=batch)": ns("write(events=batch)"),
    }
    rest = whole - sum(v for k, v in parts.items() if not k.startswith("  "))
    parts["rest of log() (arguments, step rules, list appends, attribute access)"] = rest
    parts["plugin side (not in log() above): rows_by_step of a log() batch"] = ns(
        "for _ in rows_by_step(log_batch): pass")
    parts["plugin side: rows_by_step of a write_events() batch (grouped event by event)"] = ns(
        "for _ in rows_by_step(batch): pass")
    return {"whole log() call": whole, **parts}


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls = 2_000 if quick else 10_000
    out: dict[str, Any] = {"workload": f"{calls:,} log calls x {SCALARS} scalars under cProfile; "
                                       "each part timed with timeit (best of 5)"}
    # sync: the parts above are timed on the caller's thread, without a worker competing
    null = Monitor([NullBackend], project="bench-profile", name="null", dispatch="sync")
    out["parts_ns"] = _parts(null)
    out["cprofile_null"] = _cprofile(null, calls)
    null.close()

    with Monitor(["tensorboard"], project="bench-profile", name="tb",
                 log_dir=root / "profile", dispatch="sync") as tb:
        out["cprofile_tensorboard"] = _cprofile(tb, calls // 4)
    return out
