"""B1 dispatch overhead per backend, and B2 TensorBoard writer vs tensorboardX.

B1, for one backend: ``steps`` x 8 scalars (a new dict of floats per step, prebuilt and shared
by both arms).
A = ``Monitor([name], ...).log(row, step=i)`` for every row, then ``Monitor.flush()``.
B = the idiomatic direct SDK code for the same rows, then the SDK's flush where it has one:
    trackio  ``trackio.log(row, step=i)``; flush = what Trackio's own sender thread runs
             (``with run._client_lock: run._flush_queues_inline()``), as the plugin's flush does
    wandb    ``run.log(row, step=i)`` offline; wandb has no flush (neither arm flushes)
    tensorboard  ``EventFileWriter`` (TensorBoard's defaults), one ``Event(wall_time, step)``
             per step whose ``summary.value.add(tag=, simple_value=)`` takes each scalar, then
             ``EventFileWriter.flush()``. (The other common spelling,
             ``Summary(value=[Summary.Value(...) for ...])``, costs ~5 us more per step: the
             faster one is the baseline.)
Only the loop and the flush are timed; init, finish/close and read-back are not.
Figures: A/B and (A - B) per ``log`` call. For Trackio the loop alone is reported too (its
flush, a SQLite write of the whole queue, is most of its time).

B2: the same TensorBoard rows through ``Monitor(["tensorboard"])`` (A) vs
``tensorboardX.SummaryWriter.add_scalar(tag, value, step)`` per scalar then ``flush()`` (B).
Figure: B/A, how many times faster the Monitor path is.
"""

from __future__ import annotations

import contextlib
import gc
import io
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

from harness import alternate, check_count, paired, spread, timed

from core_monitor import Monitor, RunInfo

SCALARS = 8
TARGET_ADDED_US = 3.0
TARGET_RATIO = {"trackio": 1.10, "wandb": 1.03, "tensorboard": 1.03}
TARGET_B2 = 5.0
_runs = count()


def workload(steps: int) -> list[dict[str, float]]:
    return [{f"train/scalar_{j}": i * 1e-3 + j for j in range(SCALARS)} for i in range(steps)]


def _quiet() -> contextlib.AbstractContextManager[Any]:
    return contextlib.redirect_stdout(io.StringIO())


def timed_loop(
    loop: Callable[[], None], flush: Callable[[], None] | None, loop_times: list[float] | None
) -> float:
    """Seconds of ``loop()`` then ``flush()``; the loop's own seconds go to ``loop_times``."""
    gc.collect()
    start = time.perf_counter()
    loop()
    loop_end = time.perf_counter()
    if flush is not None:
        flush()
    end = time.perf_counter()
    if loop_times is not None:
        loop_times.append(loop_end - start)
    return end - start


def monitor_arm(
    backend: str, rows: list[dict[str, float]], root: Path, checked: list[bool],
    project: str = "bench-b1", loop_times: list[float] | None = None,
) -> Callable[[], float]:
    """A: rows through ``Monitor([backend])``; the first run's stored rows are counted."""

    def arm() -> float:
        name = f"monitor-{backend}-{next(_runs)}"
        log_dir = root / name
        with _quiet():
            # wait=True: the writer's start (the SDK's import and init) is not timed, as the
            # direct arm's init is not
            monitor = Monitor([backend], project=project, name=name, log_dir=log_dir,
                              wait=True)
        log = monitor.log

        def loop() -> None:
            for i, row in enumerate(rows):
                log(row, step=i)

        elapsed = timed_loop(loop, monitor.flush, loop_times)
        with _quiet():
            monitor.close()
        if monitor.failures:
            raise RuntimeError(f"{backend} failed during the benchmark: {monitor.failures}")
        if not checked:
            check_count(backend, project, name, log_dir, len(rows) * SCALARS)
            checked.append(True)
        return elapsed

    return arm


def direct_arm(
    backend: str, rows: list[dict[str, float]], root: Path,
    loop_times: list[float] | None = None,
) -> Callable[[], float]:
    """B: the same rows through the SDK as a user would write it."""
    return {"trackio": _direct_trackio, "wandb": _direct_wandb,
            "tensorboard": _direct_tensorboard}[backend](rows, root, loop_times)


def _tensorboard_events(rows: list[dict[str, float]], add_event: Callable[[Any], Any]) -> None:
    """The idiomatic direct TensorBoard code: one ``Event`` per step, a value per scalar."""
    from tensorboard.compat.proto.event_pb2 import Event

    for i, row in enumerate(rows):
        event = Event(wall_time=time.time(), step=i)
        add = event.summary.value.add
        for tag, value in row.items():
            add(tag=tag, simple_value=value)
        add_event(event)


def _direct_tensorboard(rows, root, loop_times) -> Callable[[], float]:
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    def arm() -> float:
        writer = EventFileWriter(str(root / f"direct-tensorboard-{next(_runs)}"))
        add_event = writer.add_event

        def loop() -> None:
            _tensorboard_events(rows, add_event)

        elapsed = timed_loop(loop, writer.flush, loop_times)
        writer.close()
        return elapsed

    return arm


def _direct_trackio(rows, root, loop_times) -> Callable[[], float]:
    import trackio

    def arm() -> float:
        with _quiet():
            run = trackio.init(project="bench-b1-direct", name=f"direct-{next(_runs)}",
                               auto_log_gpu=False, auto_log_cpu=False)
        log = trackio.log

        def loop() -> None:
            for i, row in enumerate(rows):
                log(row, step=i)

        def flush() -> None:
            with run._client_lock:
                run._flush_queues_inline()

        elapsed = timed_loop(loop, flush, loop_times)
        with _quiet():
            trackio.finish()
        return elapsed

    return arm


def _direct_wandb(rows, root, loop_times) -> Callable[[], float]:
    import wandb

    def arm() -> float:
        folder = root / f"direct-wandb-{next(_runs)}"
        folder.mkdir(parents=True)
        run = wandb.init(project="bench-b1-direct", name=folder.name, dir=str(folder),
                         mode="offline", reinit="create_new")
        log = run.log

        def loop() -> None:
            for i, row in enumerate(rows):
                log(row, step=i)

        elapsed = timed_loop(loop, None, loop_times)
        run.finish()
        return elapsed

    return arm


def _noop(*args: Any, **kwargs: Any) -> None:
    pass


def caller_side(backend: str, rows: list[dict[str, float]], root: Path, reps: int
                ) -> dict[str, Any] | None:
    """Diagnostic: the work on the caller's thread only, with the SDK's sink replaced by a
    no-op in both arms (TensorBoard: ``add_event`` appends to a list; Trackio and wandb:
    ``Run.log`` does nothing). A - B is then exactly the core's plus the plugin's Python work
    per call, free of the SDK threads' noise. Excludes what a different payload costs inside
    the SDK (wandb: the plugin's row has 2 more keys). ``None`` if a plugin's internals moved.
    """
    with _quiet():
        # sync: the plugin instance lives on this thread, so its SDK sink can be swapped
        monitor = Monitor([backend], project="bench-b1-sink", name=f"sink-{next(_runs)}",
                          log_dir=root / "sink", dispatch="sync")
    plugin = monitor._dispatch.get(backend).instance
    attr = "_add_event" if backend == "tensorboard" else "_log"
    if not hasattr(plugin, attr):
        monitor.close()
        return None
    sink: list[Any] = []
    setattr(plugin, attr, sink.append if backend == "tensorboard" else _noop)
    log = monitor.log

    def via_monitor() -> float:
        sink.clear()

        def loop() -> None:
            for i, row in enumerate(rows):
                log(row, step=i)

        return timed_loop(loop, None, None)

    direct_loop: Callable[[], None]
    finish: Callable[[], None] = _noop
    if backend == "tensorboard":
        add_event = sink.append

        def direct_loop() -> None:
            _tensorboard_events(rows, add_event)
    elif backend == "trackio":
        import trackio

        with _quiet():
            run = trackio.init(project="bench-b1-sink-direct", name=f"sink-{next(_runs)}",
                               auto_log_gpu=False, auto_log_cpu=False)
        run.log = _noop  # trackio.log looks the current run up, then calls run.log
        trackio_log = trackio.log
        finish = trackio.finish

        def direct_loop() -> None:
            for i, row in enumerate(rows):
                trackio_log(row, step=i)
    else:  # wandb: the user's loop is run.log(row, step=i) and nothing else
        run_log = _noop

        def direct_loop() -> None:
            for i, row in enumerate(rows):
                run_log(row, step=i)

    def direct() -> float:
        sink.clear()
        return timed_loop(direct_loop, None, None)

    via_monitor(), direct()
    times = alternate({"A": via_monitor, "B": direct}, reps)
    with _quiet():
        finish()
        monitor.close()
    return paired(times["A"], times["B"], per=len(rows))


def run_b1(backend: str, quick: bool, root: Path) -> dict[str, Any]:
    steps = 2_000 if quick else 10_000
    reps = 3 if quick else (5 if backend == "wandb" else 9)
    rows = workload(steps)
    checked: list[bool] = []
    loops: dict[str, list[float]] = {"A": [], "B": []}
    arms = {"A": monitor_arm(backend, rows, root, checked, loop_times=loops["A"]),
            "B": direct_arm(backend, rows, root, loop_times=loops["B"])}
    warm = workload(200)
    monitor_arm(backend, warm, root, [True])()  # imports, first-run costs, page cache
    direct_arm(backend, warm, root)()
    times = alternate(arms, reps)
    stats = paired(times["A"], times["B"], per=steps)
    loop_stats = paired(loops["A"], loops["B"], per=steps)
    sink = caller_side(backend, rows, root, 5 if quick else 15)
    target = TARGET_RATIO[backend]
    return {
        "workload": f"{steps:,} steps x {SCALARS} scalars, {reps} alternating repetitions",
        "steps": steps,
        "reps": reps,
        **stats,
        "loop_only": loop_stats,
        "caller_side": sink,
        "rows_checked": bool(checked),
        "target": f"added <= {TARGET_ADDED_US} us/call (~ratio <= {target})",
        "pass": stats["ratio"]["median"] <= target,
        "pass_caller_side": None if sink is None
        else sink["added_us"]["median"] <= TARGET_ADDED_US,
    }


def run_b2(quick: bool, root: Path) -> dict[str, Any]:
    from tensorboardX import SummaryWriter

    steps = 1_000 if quick else 5_000
    reps = 3 if quick else 5
    rows = workload(steps)
    checked: list[bool] = []
    tbx_checked: list[bool] = []

    def tensorboardx() -> float:
        folder = root / f"tensorboardx-{next(_runs)}"
        writer = SummaryWriter(str(folder))
        add_scalar = writer.add_scalar

        def body() -> None:
            for i, row in enumerate(rows):
                for tag, value in row.items():
                    add_scalar(tag, value, i)
            writer.flush()

        elapsed = timed(body)
        writer.close()
        if not tbx_checked:
            import tensorboard_monitor

            got = len(tensorboard_monitor.read_rows(RunInfo(project="tbx", name=folder.name),
                                                    run_dir=folder))
            if got != steps * SCALARS:
                raise AssertionError(f"tensorboardX stored {got} of {steps * SCALARS} scalars")
            tbx_checked.append(True)
        return elapsed

    arms = {"monitor": monitor_arm("tensorboard", rows, root, checked, project="bench-b2"),
            "tensorboardX": tensorboardx}
    times = alternate(arms, reps)
    speedup = [b / a for a, b in zip(times["monitor"], times["tensorboardX"], strict=True)]
    return {
        "workload": f"{steps:,} steps x {SCALARS} scalars, {reps} alternating repetitions",
        "monitor_us_per_step": spread([t / steps * 1e6 for t in times["monitor"]]),
        "tensorboardx_us_per_step": spread([t / steps * 1e6 for t in times["tensorboardX"]]),
        "speedup": spread(speedup),
        "rows_checked": bool(checked) and bool(tbx_checked),
        "target": f"Monitor >= {TARGET_B2}x faster than tensorboardX add_scalar",
        "pass": spread(speedup)["median"] >= TARGET_B2,
    }
