"""One start-up run of P-start, in a fresh interpreter: imports, start, the first log call.

    python start_child.py ARM BACKENDS LOG_DIR RESULT

ARM is ``monitor``, ``monitor-wait`` (``Monitor(..., wait=True)``) or ``direct`` (each SDK's own
calls); BACKENDS a comma-separated list. Only the standard library is imported before the clock
starts, so the figures hold the whole import of the core, the plugins and the SDKs. Writes JSON
to RESULT: seconds from the clock's start to the end of the imports (``import_s``), of the start
(``start_s``), to the first log call returning (``first_log_s``), to the first ``flush()``
returning (``flushed_s``; TensorBoard's ``flush``, Trackio's own queue flush; wandb offline has
none), and the ``close_s`` of the close after it.
"""

import time

T0 = time.perf_counter()

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROW = {f"m/scalar_{j}": 0.5 + j for j in range(10)}
PROJECT = "bench-start"


def monitor_arm(backends, log_dir, wait):
    from core_monitor import Monitor

    imported = time.perf_counter()
    keywords = {"wait": True} if wait else {}
    monitor = Monitor(backends, project=PROJECT, name=log_dir.name, log_dir=log_dir,
                      dispatch="process", **keywords)
    started = time.perf_counter()
    monitor.log(ROW, step=0)
    first = time.perf_counter()
    monitor.flush()
    flushed = time.perf_counter()
    monitor.close()
    closed = time.perf_counter()
    if monitor.failures or monitor.undelivered or monitor.dropped:
        raise RuntimeError(f"failures {monitor.failures}, undelivered {monitor.undelivered}, "
                           f"dropped {monitor.dropped}")
    return imported, started, first, flushed, closed - flushed


def _tensorboard(log_dir):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    def start():
        writer = EventFileWriter(str(log_dir / "tensorboard"))

        def log(row, step):
            event = Event(wall_time=time.time(), step=step)
            for tag, value in row.items():
                event.summary.value.add(tag=tag, simple_value=value)
            writer.add_event(event)

        return log, writer.flush, writer.close

    return start


def _trackio(log_dir):
    import trackio

    def start():
        run = trackio.init(project=PROJECT, name=f"{log_dir.name}-direct")

        def flush():
            with run._client_lock:  # what Trackio's sender thread runs (as B1 does)
                run._flush_queues_inline()

        return trackio.log, flush, trackio.finish

    return start


def _wandb(log_dir):
    import wandb

    def start():
        folder = log_dir / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        run = wandb.init(project=PROJECT, name=log_dir.name, dir=str(folder), mode="offline")
        return run.log, None, run.finish

    return start


def _mlflow(log_dir):
    import mlflow

    def start():
        folder = log_dir / "mlflow"
        folder.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
        experiment = mlflow.create_experiment(
            PROJECT, artifact_location=(folder / "artifacts").as_uri())
        mlflow.start_run(experiment_id=experiment, run_name=log_dir.name)

        def log(row, step):
            mlflow.log_metrics(row, step=step)

        return log, None, mlflow.end_run

    return start


DIRECT = {"tensorboard": _tensorboard, "trackio": _trackio, "wandb": _wandb, "mlflow": _mlflow}


def direct_arm(backends, log_dir):
    starts = [DIRECT[b](log_dir) for b in backends]  # the imports
    imported = time.perf_counter()
    runs = [start() for start in starts]
    started = time.perf_counter()
    for log, _, _ in runs:
        log(ROW, step=0)
    first = time.perf_counter()
    for _, flush, _ in runs:
        if flush is not None:
            flush()
    flushed = time.perf_counter()
    for _, _, close in runs:
        close()
    return imported, started, first, flushed, time.perf_counter() - flushed


def main():
    arm, backends, log_dir, result = sys.argv[1:]
    log_dir = Path(log_dir)
    backends = backends.split(",")
    with contextlib.redirect_stdout(io.StringIO()):
        if arm == "direct":
            times = direct_arm(backends, log_dir)
        else:
            times = monitor_arm(backends, log_dir, wait=arm == "monitor-wait")
    imported, started, first, flushed, close_s = times
    Path(result).write_text(json.dumps({
        "import_s": imported - T0, "start_s": started - imported, "first_log_s": first - T0,
        "flushed_s": flushed - T0, "close_s": close_s,
    }))


if __name__ == "__main__":
    main()
