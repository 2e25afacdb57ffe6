"""Where ``Monitor.log``'s time goes: a cProfile of the hot path, a breakdown of one call into
its parts, and candidate changes measured against the current code in the same run.

Workload: ``Monitor([NullBackend]).log(row, step=i)`` with 8 float scalars per call (the B1
row), and the same through the TensorBoard backend for the cProfile view of plugin + SDK.
The variants below copy ``Monitor.log`` as of this writing and change one thing each; they are
measured, not shipped (the core owns ``monitor.py``). If ``Monitor.log`` changes, update them.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
import timeit
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import NullBackend, alternate, metrics, paired, spread, timed

from core_monitor import Event, Monitor
from core_monitor.events import MAX_STEP, OneRow, check_step, flatten, rows_by_step, to_float

SCALARS = 8


class LeanDispatch(Monitor):
    """Candidate: ``log`` calls the backends itself (no ``_write`` call, no ``tuple`` copy of
    the list inside it) and calls ``_raise_pending`` only when a failure is pending."""

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> int:
        if self._closed:
            raise RuntimeError(f"Monitor for run {self.run.name!r} is closed; log() before close()")
        if step is None:
            step = self._next_step
        elif type(step) is not int or not 0 <= step <= MAX_STEP:
            step = check_step(step)
        now = time.time()
        new = tuple.__new__
        events = []
        append = events.append
        for tag, value in metrics.items():
            if type(value) is float and type(tag) is str and tag:
                append(new(Event, (tag, value, step, now)))
            elif isinstance(value, Mapping) or type(tag) is not str or not tag:
                for sub_tag, sub_value in flatten({tag: value}):
                    append(new(Event, (sub_tag, to_float(sub_tag, sub_value), step, now)))
            else:
                append(new(Event, (tag, to_float(tag, value), step, now)))
        if step >= self._next_step:
            self._next_step = step + 1
        if events:
            batch = tuple(events)
            for backend_name, write in self._calls["monitor_write"]:
                try:
                    write(events=batch)
                except Exception as error:
                    self._failed(backend_name, "monitor_write", error)
            if self._pending is not None:
                self._raise_pending()
        return step


class PlainTuples(LeanDispatch):
    """Not a candidate (the contract says ``Event``): plain tuples instead of ``Event`` objects,
    to show what building one ``Event`` per scalar costs."""

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> int:
        if self._closed:
            raise RuntimeError("closed")
        if step is None:
            step = self._next_step
        elif type(step) is not int or not 0 <= step <= MAX_STEP:
            step = check_step(step)
        now = time.time()
        events = []
        append = events.append
        for tag, value in metrics.items():
            if type(value) is float and type(tag) is str and tag:
                append((tag, value, step, now))
            else:
                append((tag, to_float(tag, value), step, now))
        if step >= self._next_step:
            self._next_step = step + 1
        if events:
            batch = tuple(events)
            for backend_name, write in self._calls["monitor_write"]:
                try:
                    write(events=batch)
                except Exception as error:
                    self._failed(backend_name, "monitor_write", error)
            if self._pending is not None:
                self._raise_pending()
        return step


class RowHook(LeanDispatch):
    """Design option, not a candidate under the current contract: for a flat dict of floats,
    hand each backend the validated row itself (a hypothetical ``monitor_write_row(step,
    wall_time, row)`` hook) instead of one ``Event`` per scalar, sparing the core the Event
    objects and the plugin ``rows_by_step``. Measures the core's side of that path."""

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> int:
        if self._closed:
            raise RuntimeError("closed")
        if step is None:
            step = self._next_step
        elif type(step) is not int or not 0 <= step <= MAX_STEP:
            step = check_step(step)
        now = time.time()
        row = {}
        for tag, value in metrics.items():
            if type(value) is float and type(tag) is str and tag:
                row[tag] = value
            else:
                return super().log(metrics, step)
        if step >= self._next_step:
            self._next_step = step + 1
        for backend_name, write_row in self._rows:
            try:
                write_row(step=step, wall_time=now, row=row)
            except Exception as error:
                self._failed(backend_name, "monitor_write_row", error)
        if self._pending is not None:
            self._raise_pending()
        return step

    @property
    def _rows(self) -> list[tuple[str, Any]]:
        return [("null", _null_row)]


def _null_row(*, step: int, wall_time: float, row: dict[str, float]) -> None:
    pass


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
    log_batch = OneRow(events)  # what log() hands the backends for a flat dict of floats
    log_batch.row = dict(row)
    write = monitor._calls["monitor_write"][0][1]
    scope = {"monitor": monitor, "row": row, "Event": Event, "new": tuple.__new__, "time": time,
             "events": events, "batch": batch, "log_batch": log_batch, "write": write,
             "rows_by_step": rows_by_step}

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
        "_write(): tuple(), loop, keyword call, _raise_pending()":
            ns("monitor._write(events)"),
        "  of which the backend call write(events=batch)": ns("write(events=batch)"),
        "  of which _raise_pending()": ns("monitor._raise_pending()"),
    }
    rest = whole - sum(v for k, v in parts.items() if not k.startswith("  "))
    parts["rest of log() (arguments, step rules, list appends, attribute access)"] = rest
    parts["plugin side (not in log() above): rows_by_step of a log() batch"] = ns(
        "for _ in rows_by_step(log_batch): pass")
    parts["plugin side: rows_by_step of a write_events() batch (grouped event by event)"] = ns(
        "for _ in rows_by_step(batch): pass")
    return {"whole log() call": whole, **parts}


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls = 10_000
    reps = 11 if quick else 31
    out: dict[str, Any] = {"workload": f"{calls:,} log calls x {SCALARS} scalars per variant and "
                                       f"repetition, {reps} alternating repetitions"}
    null = Monitor([NullBackend], project="bench-profile", name="null")
    out["parts_ns"] = _parts(null)
    out["cprofile_null"] = _cprofile(null, calls)
    null.close()

    with Monitor(["tensorboard"], project="bench-profile", name="tb",
                 log_dir=root / "profile") as tb:
        out["cprofile_tensorboard"] = _cprofile(tb, calls // 4)

    row = metrics(SCALARS, "train")
    variants = {"current": Monitor, "lean_dispatch": LeanDispatch, "plain_tuples": PlainTuples,
                "row_hook": RowHook}
    monitors = {k: cls([NullBackend], project="bench-profile", name=k)
                for k, cls in variants.items()}

    def arm(monitor: Monitor):
        log = monitor.log

        def body() -> None:
            for i in range(calls):
                log(row, step=i)

        return lambda: timed(body)

    arms = {k: arm(m) for k, m in monitors.items()}
    for a in arms.values():
        a()
    times = alternate(arms, reps)
    for monitor in monitors.values():
        monitor.close()
    out["variants"] = {}
    for k in variants:
        out["variants"][k] = {
            "ns_per_call": spread([t / calls * 1e9 for t in times[k]]),
            "ratio_vs_current": paired(times[k], times["current"], per=calls)["ratio"],
            "saved_ns_per_call": spread([(c - t) / calls * 1e9
                                         for t, c in zip(times[k], times["current"], strict=True)]),
        }
    return out
