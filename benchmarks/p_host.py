"""P-host: what a writer process pays to become ready to start its backend, in a fresh
interpreter (what ``dispatch="process"`` does today) against a fork of a host process that
imported the same modules already (a pre-imported writer host, issue 34 item 6: "many monitors
in one process should not each pay a fresh interpreter's start; measure it").

Per backend (the four, and ``none``: the core alone, as for a backend without an SDK), two arms:

- ``fresh``: ``python -c "import core_monitor.dispatch.writer, <plugin>.backend, <SDK>"``,
  from ``subprocess`` start to exit: what each writer pays before its backend's constructor
  runs (the constructor's own work, ``wandb.init`` or MLflow's ``start_run``, is the same in
  both arms and not measured);
- ``fork``: a host process that imported the same modules forks a child that exits at once,
  from ``os.fork()`` to ``waitpid`` returning (the child is ready to run the writer loop).

Arms alternate, ``reps`` each. The host runs in a subprocess of its own, so nothing is imported
into the benchmark process. A fork host is not built: see the figures' notes in
docs/performance.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from harness import spread

#: Backend -> the modules a writer of it imports before its constructor runs.
IMPORTS = {
    "none": ["core_monitor.dispatch.writer"],
    "tensorboard": ["core_monitor.dispatch.writer", "tensorboard_monitor.backend",
                    "tensorboard.summary.writer.event_file_writer"],
    "trackio": ["core_monitor.dispatch.writer", "trackio_monitor.backend", "trackio"],
    "wandb": ["core_monitor.dispatch.writer", "wandb_monitor.backend", "wandb"],
    "mlflow": ["core_monitor.dispatch.writer", "mlflow_monitor.backend", "mlflow"],
}

#: The host: imports, then forks ``reps`` children one at a time; prints their times (s).
HOST = """
import importlib, json, os, sys, time
for name in sys.argv[2:]:
    importlib.import_module(name)
times = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _fresh(modules: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], check=True,
                   capture_output=True)
    return time.perf_counter() - start


def _forks(modules: list[str], reps: int) -> list[float]:
    done = subprocess.run([sys.executable, "-c", HOST, str(reps), *modules], check=True,
                          capture_output=True, text=True)
    return [float(t) for t in json.loads(done.stdout)]


def run(quick: bool, root: Any = None) -> dict[str, Any]:
    """Medians (and spread) of both arms per backend, seconds; ``ratio``: fresh / fork."""
    reps = 3 if quick else 7
    out: dict[str, Any] = {"workload": f"{reps} runs per arm and backend, arms alternated; "
                           "fresh: a new interpreter importing what a writer imports before "
                           "its backend's constructor; fork: a host that imported it forks",
                           "backends": {}}
    for backend, modules in IMPORTS.items():
        fresh, fork = [], []
        for _ in range(reps):
            fresh.append(_fresh(modules))
            fork.extend(_forks(modules, 1))
        out["backends"][backend] = {
            "fresh_s": spread(fresh), "fork_s": spread(fork),
            "ratio": spread([a / b for a, b in zip(fresh, fork, strict=True)]),
        }
    return out
