"""B1 for MLflow: ``Monitor(["mlflow"])`` vs ``MlflowClient.log_batch`` written by hand.

Workload as the other B1s: ``steps`` x 8 scalars (a new dict of floats per step, prebuilt and
shared by both arms), against one local SQLite store (``sqlite:///<root>/mlflow.db``, created
once before timing; no server, so the figure is not a network's).
A = ``Monitor(["mlflow"], mlflow={"tracking_uri": store}).log(row, step=i)`` for every row,
    then ``Monitor.flush()``.
B = what a user writes without this project: one ``mlflow.entities.Metric(tag, value,
    timestamp_ms, step)`` per scalar into a list, ``MlflowClient.log_batch(run_id,
    metrics=buffer, synchronous=True)`` whenever it holds 1,000 (the server's limit per
    request, the plugin's default ``batch_size``), and the rest at the end.
Only the loop and the final send are timed; run creation, ending the run and read-back are not.
Figures: A/B and (A - B) per ``log`` call.
"""

from __future__ import annotations

import time
from itertools import count
from pathlib import Path
from typing import Any

from b1_dispatch import SCALARS, _quiet, timed_loop, workload
from harness import RowCountError, alternate, paired

from core_monitor import Monitor

TARGET_RATIO = 1.03
BATCH = 1000
_runs = count()


def run(quick: bool, root: Path) -> dict[str, Any]:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    import mlflow_monitor

    steps = 2_000 if quick else 10_000
    reps = 3 if quick else 5
    rows = workload(steps)
    store = mlflow_monitor.local_store_uri(root)
    (root / "mlflow").mkdir(parents=True, exist_ok=True)
    client = MlflowClient(store)
    experiment = client.create_experiment("bench-b1-direct",
                                          artifact_location=(root / "artifacts").as_uri())
    checked: list[bool] = []

    def via_monitor(rows: list[dict[str, float]] = rows) -> float:
        name = f"monitor-{next(_runs)}"
        with _quiet():
            monitor = Monitor(["mlflow"], project="bench-b1", name=name, wait=True,
                              mlflow={"tracking_uri": store})  # its start is not timed
        log = monitor.log

        def loop() -> None:
            for i, row in enumerate(rows):
                log(row, step=i)

        elapsed = timed_loop(loop, monitor.flush, None)
        monitor.close()
        if monitor.failures:
            raise RuntimeError(f"mlflow failed during the benchmark: {monitor.failures}")
        if not checked and rows is not warm:
            got = len(mlflow_monitor.read_rows(monitor.run, tracking_uri=store))
            if got != len(rows) * SCALARS:
                raise RowCountError(f"mlflow: sent {len(rows) * SCALARS} scalars for "
                                    f"bench-b1/{name}, its store holds {got}")
            checked.append(True)
        return elapsed

    def direct(rows: list[dict[str, float]] = rows) -> float:
        run_id = client.create_run(experiment, run_name=f"direct-{next(_runs)}").info.run_id
        log_batch = client.log_batch
        buffer: list[Any] = []

        def loop() -> None:
            nonlocal buffer
            for i, row in enumerate(rows):
                now = int(time.time() * 1000)
                for tag, value in row.items():
                    buffer.append(Metric(tag, value, now, i))
                if len(buffer) >= BATCH:
                    log_batch(run_id, metrics=buffer, synchronous=True)
                    buffer = []

        def flush() -> None:
            nonlocal buffer
            if buffer:
                log_batch(run_id, metrics=buffer, synchronous=True)
                buffer = []

        elapsed = timed_loop(loop, flush, None)
        client.set_terminated(run_id)
        return elapsed

    warm = workload(200)
    via_monitor(warm), direct(warm)  # imports, first-run costs, page cache
    times = alternate({"A": via_monitor, "B": direct}, reps)
    stats = paired(times["A"], times["B"], per=steps)
    return {
        "workload": f"{steps:,} steps x {SCALARS} scalars, {reps} alternating repetitions, "
                    "local SQLite store",
        "steps": steps,
        "reps": reps,
        **stats,
        "loop_only": None,
        "caller_side": None,
        "rows_checked": bool(checked),
        "target": f"added <= 3.0 us/call (~ratio <= {TARGET_RATIO})",
        "pass": stats["ratio"]["median"] <= TARGET_RATIO,
        "pass_caller_side": None,
    }
