"""B9: the grace each backend needs on SIGTERM (issue 34): a training process logs 300 calls of
10 scalars to one backend in writer processes, then gets SIGTERM, delivered two ways: ``job``,
every process of the job at once (as Slurm's ``scancel``, time limit and preemption do), and
``group``, ``kill -TERM -- -PGID`` of the training process's group (the writers, in sessions of
their own, are not in it). Reports the seconds until the training process exited and until
every process of the job ended. Slurm's default grace before SIGKILL (``KillWait``) is 30 s.

    python benchmarks/b9_sigterm.py [--rounds N] [backend ...]

(in the venv of ``nox -s dev``; every SDK offline, its folders under a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
import sdk_env
from jobs import alive, descendants

TRAIN = """
import sys, time
from core_monitor import Monitor
monitor = Monitor([sys.argv[2]], project="b9", name="job", log_dir=sys.argv[1],
                  dispatch="process", wait=True)  # the SDK's own processes are up, as mid-run
for step in range(300):
    monitor.log({f"m{i}": step + i / 8 for i in range(10)}, step=step)
print("logged", flush=True)
time.sleep(600)
"""


def once(backend: str, delivery: str) -> tuple[float, float]:
    """Seconds from SIGTERM to the training process's exit, and to the last process's end."""
    root = Path(tempfile.mkdtemp(prefix="b9-"))
    env = {**os.environ, **sdk_env.offline_env(root / "home")}
    trainer = subprocess.Popen([sys.executable, "-c", TRAIN, str(root / "runs"), backend],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=env, start_new_session=True)
    assert trainer.stdout is not None
    trainer.stdout.readline()
    job = [trainer.pid, *descendants(trainer.pid)]
    sent = time.monotonic()
    if delivery == "group":
        os.killpg(trainer.pid, signal.SIGTERM)
    else:
        for pid in job:
            os.kill(pid, signal.SIGTERM)
    trainer.wait()
    trainer.stdout.close()
    exited = time.monotonic() - sent
    while any(alive(pid) for pid in job):
        time.sleep(0.05)
    return exited, time.monotonic() - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backends", nargs="*",
                        default=["trackio", "tensorboard", "wandb", "mlflow"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("backend      delivery  trainer exit (s)  all ended (s)")
    for backend in args.backends:
        for delivery in ("job", "group"):
            for _ in range(args.rounds):
                exited, ended = once(backend, delivery)
                print(f"{backend:12s} {delivery:8s}  {exited:16.2f}  {ended:13.2f}", flush=True)


if __name__ == "__main__":
    main()
