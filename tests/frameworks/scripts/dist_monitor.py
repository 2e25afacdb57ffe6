"""``Monitor`` under ``torchrun --nproc_per_node 2`` (gloo): one scenario per run.

    torchrun --nproc_per_node 2 dist_monitor.py <scenario> <log_dir> <out>

Every rank writes ``<out>.rank<k>.json``: the scenario's result, the run it logged, and its
``sys.modules`` after the scenario. Scenarios:

* ``plain``: no process group; ``Monitor`` on every installed backend, log, close (rank 0
  writes; rank 1 must import no SDK).
* ``typo``: a misspelt option (``tensorboard={"flush_sec": 1}``) -> the error raised.
* ``accelerate_typo``: the same option given to accelerate's ``MonitorTracker``, then
  ``Accelerator(log_with=...)`` and ``init_trackers`` -> the error each rank raised (accelerate
  calls ``init_trackers`` on the main process only).
* ``per_rank``: ``rank_zero_only=False``, each rank logs ``rank + step`` at steps 0..2.
* ``reduce``: process group; rank 0 logs 1.0, rank 1 logs 3.0 at step 5 with ``mean`` (tag
  ``m``) and ``max`` (tag ``x``), then once more with the same tags (the one-collective path).
* ``slowest``: process group; ``system_metrics=0.2``; rank 1 sleeps 0.3 s more than rank 0 in
  each of steps 0..3 and both log the step's time with ``reduce="ranks"`` (after one
  ``reduce="mean"`` call, so the agreed operation changes kind); rank 1 spins a core for
  its last 2 s, so rank 0's system samples cover it.
* ``nodes``: process group; launched as two torchrun nodes of one process each;
  ``rank_zero_only=False``, ``system_metrics=0.2``: each node's rank writes its run.
* ``one_run``: as ``nodes`` with ``rank_zero_only=True``: one run, both nodes' samples.
* ``mismatch``: process group; rank 0 logs ``{"a"}``, rank 1 ``{"b"}`` with ``reduce="mean"``
  -> the error raised; then both log ``{"c"}`` (the ranks recover in step).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

BACKENDS = ["trackio", "tensorboard", "wandb"]


def main() -> None:
    scenario, log_dir, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    rank = int(os.environ["RANK"])
    result: dict = {}
    if scenario in ("reduce", "mismatch", "slowest", "nodes", "one_run"):
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=timedelta(seconds=60))

    from core_monitor import Monitor

    if scenario == "plain":
        with Monitor(BACKENDS, project="dist", name="plain", log_dir=log_dir) as monitor:
            monitor.log({"loss": 0.5}, step=3)
            result["backends"] = monitor.backends
    elif scenario == "typo":
        try:
            Monitor(BACKENDS, project="dist", name="typo", log_dir=log_dir,
                    tensorboard={"flush_sec": 1})
        except Exception as error:  # what each rank raised, compared by the test
            result["error"] = [type(error).__name__, str(error)]
        monitor = None
    elif scenario == "accelerate_typo":
        try:
            from accelerate import Accelerator

            from core_monitor.integrations.accelerate import MonitorTracker

            tracker = MonitorTracker(BACKENDS, log_dir=log_dir, tensorboard={"flush_sec": 1})
            Accelerator(log_with=tracker, cpu=True).init_trackers("dist")
        except Exception as error:  # what each rank raised, compared by the test
            result["error"] = [type(error).__name__, str(error)]
        monitor = None
    elif scenario == "per_rank":
        with Monitor(BACKENDS, project="dist", name="ranks", log_dir=log_dir,
                     rank_zero_only=False) as monitor:
            for step in range(3):
                monitor.log({"value": float(rank + step)}, step=step)
            result["backends"] = monitor.backends
    elif scenario == "reduce":
        with Monitor(BACKENDS, project="dist", name="reduce", log_dir=log_dir) as monitor:
            mine = 1.0 if rank == 0 else 3.0
            monitor.log({"m": mine}, step=5, reduce="mean")
            monitor.log({"x": mine}, step=5, reduce="max")
            monitor.log({"x": mine + 1}, step=6, reduce="max")  # agreed tags: one collective
            monitor.log({"s": mine, "n": {"min": mine}}, step=7, reduce="sum")
            result["backends"] = monitor.backends
    elif scenario == "slowest":
        import time

        with Monitor(BACKENDS, project="dist", name="slowest", log_dir=log_dir,
                     system_metrics=0.2) as monitor:
            monitor.log({"warmup": float(rank)}, step=0, reduce="mean")
            for step in range(4):
                started = time.perf_counter()
                time.sleep(0.05 + (0.3 if rank == 1 else 0.0))
                monitor.log({"step_time": time.perf_counter() - started}, step=step,
                            reduce="ranks")
            started = time.time()
            while rank == 1 and time.time() - started < 2.0:
                pass
            if rank == 0:
                time.sleep(2.0)
            dist.barrier()
            result["backends"] = monitor.backends
    elif scenario in ("nodes", "one_run"):
        import time

        with Monitor(BACKENDS, project="dist", name=scenario, log_dir=log_dir,
                     rank_zero_only=scenario == "one_run", system_metrics=0.2) as monitor:
            monitor.log({"value": float(rank)}, step=0)
            time.sleep(3.0)
            dist.barrier()
            result["backends"] = monitor.backends
    elif scenario == "mismatch":
        from core_monitor.distributed import TagMismatchError

        with Monitor(BACKENDS, project="dist", name="mismatch", log_dir=log_dir) as monitor:
            monitor.log({"c": 1.0}, step=0, reduce="mean")  # agreed: {"c"}
            try:
                monitor.log({"a" if rank == 0 else "b": 1.0}, step=1, reduce="mean")
            except TagMismatchError as error:
                result["error"] = [type(error).__name__, str(error)]
            monitor.log({"c": 2.0 + rank}, step=2, reduce="mean")  # everyone goes on in step
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    if monitor is not None:
        run = monitor.run
        result["run"] = {"project": run.project, "name": run.name, "rank": run.rank,
                         "world_size": run.world_size, "log_dir": str(run.log_dir)}
    result["modules"] = sorted(sys.modules)
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(result))
    if scenario in ("reduce", "mismatch", "slowest", "nodes", "one_run"):
        # Leave together and tear the group down: a rank exiting while the other still closes
        # its backends, with the gloo group alive, was seen to abort in gloo's destructor.
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
