"""``SystemSampler``: the node's sampler, a small process whose readings the trainer logs.

The readings are taken in a process of its own (``python -m core_monitor.system.worker``, a
child of local rank 0's process), not in a thread of the trainer: a trainer that holds the
GIL (a Python loop, a C extension that keeps it) would hand a sampler thread the GIL once per
switch interval (5 ms) after every ``/proc`` read, hundreds per sample, so a sample took
seconds exactly when the trainer was busy (measured: 16 s for one sample beside a spinning
trainer). The process is one of this project's (``python -m core_monitor...``), so its own CPU
and memory are counted under ``system/monitor/``, not as the trainer's. It ends when the
trainer closes its stdin, or dies.

In the trainer, one thread reads the worker's lines (a blocking read, no GIL held) and logs
each sample with ``Monitor.log``: the ordinary path, whatever the dispatch.

Time base: sample ``n`` (0, 1, 2, ...) is logged at step ``n`` on a step axis of its own
(``Monitor.log(..., advance=False)``: it never moves the caller's next step), with the wall
time of the reading; so each ``system/`` tag has one value per step in every tracker, however
many samples fall within one of the caller's steps.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from . import job as jobs
from .probes import GpuMeter, ProcessMeter

#: The module the sampler process runs.
WORKER_MODULE = "core_monitor.system.worker"

#: Seconds between two samples for ``system_metrics=True`` (MLflow's default interval; wandb
#: samples every 15 s, Trackio every 10 s).
DEFAULT_INTERVAL = 10.0

#: The first tag level of every sample.
PREFIX = "system/"

#: Seconds ``stop`` waits in all for the sampler's last sample (one reading on a busy machine)
#: and its exit; then the process is killed. Part of ``close()``'s time.
STOP_TIMEOUT = 5.0


def check_interval(system_metrics: Any) -> float | None:
    """``Monitor(system_metrics=...)`` as seconds between samples, ``None`` when off.

    Raises:
        ConfigError: not a bool nor a positive finite number of seconds.
    """
    from ..errors import ConfigError

    if system_metrics is None or system_metrics is False:
        return None
    if system_metrics is True:
        return DEFAULT_INTERVAL
    if isinstance(system_metrics, (int, float)) and math.isfinite(system_metrics) \
            and system_metrics > 0:
        return float(system_metrics)
    raise ConfigError(
        f"system_metrics={system_metrics!r} must be False (off, the default), True (every "
        f"{DEFAULT_INTERVAL:g} s) or the seconds between two samples, e.g. system_metrics=30")


def check_psutil() -> None:
    """Raises ConfigError when psutil, which the sampler needs, is not installed."""
    from ..errors import ConfigError

    try:
        import psutil  # noqa: F401
    except ImportError:
        raise ConfigError(
            "Monitor(system_metrics=...) samples the training processes with psutil, which is "
            "not installed: pip install psutil nvidia-ml-py (nvidia-ml-py for the GPUs; the "
            "extra core-monitor[system] once published), or leave system_metrics off") from None


def _env_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        raw = os.environ.get(name, "").strip()
        if raw.isdigit():
            return int(raw)
    return default


def local_rank() -> int:
    """This process's rank on its node: ``LOCAL_RANK`` (torchrun, DeepSpeed, accelerate),
    ``SLURM_LOCALID``, ``OMPI_COMM_WORLD_LOCAL_RANK``, else 0."""
    return _env_int(("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"), 0)


def node_rank() -> int:
    """This process's node: ``GROUP_RANK`` (torchrun), ``NODE_RANK`` (Lightning, DeepSpeed),
    ``SLURM_NODEID``, else 0."""
    return _env_int(("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"), 0)


def node_count() -> int:
    """How many nodes the job spans: ``SLURM_JOB_NUM_NODES``/``SLURM_NNODES``, else
    ``WORLD_SIZE // LOCAL_WORLD_SIZE`` (torchrun), else 1."""
    slurm = _env_int(("SLURM_JOB_NUM_NODES", "SLURM_NNODES"), 0)
    if slurm:
        return slurm
    world, local = _env_int(("WORLD_SIZE",), 1), _env_int(("LOCAL_WORLD_SIZE",), 0)
    return max(world // local, 1) if local else 1


def node_config() -> dict[str, Any]:
    """What a run of a multi-node job adds to its config: ``job.node_rank``, ``job.nodes``
    and ``job.host`` (the host name)."""
    import socket

    return {"job.node_rank": node_rank(), "job.nodes": node_count(),
            "job.host": socket.gethostname()}


def prefix() -> str:
    """``system/`` on a single node; ``system/node<k>/`` when the job spans several, so that
    the samples of every node can share one run."""
    return f"{PREFIX}node{node_rank()}/" if node_count() > 1 else PREFIX


class Reader:
    """The readings of one node's job, taken in the sampler process.

    Args:
        key: the job (``job.job_key``); ``None``: the trainer alone and its children.
        trainer: the pid of the process that started the sampler (always sampled).
        prefix: the first tag levels (``prefix()``).
    """

    def __init__(self, key: str | None, trainer: int, prefix: str = PREFIX) -> None:
        self._key, self._trainer, self._prefix = key, trainer, prefix
        self._job, self._monitor = ProcessMeter(), ProcessMeter()
        self._gpus = GpuMeter()
        self.read()  # the baseline of every CPU time: the first sample has a CPU figure

    def read(self) -> tuple[dict[str, float], float]:
        """``({tag: value}, wall time)`` of one reading, tags under the prefix."""
        now = time.time()
        job, monitor = jobs.split(jobs.job_processes(self._key, self._trainer))
        values = self._job.read(job, now)
        for tag, value in self._monitor.read(monitor, now).items():
            values[f"monitor/{tag}"] = value
        if self._gpus.available:
            values.update(self._gpus.read({p.pid for p in job}))
        return {self._prefix + tag: v for tag, v in values.items()}, now

    def close(self) -> None:
        """Release NVML."""
        self._gpus.close()


class SystemSampler:
    """Start the node's sampler process and log each of its samples with ``log``.

    Args:
        log: called as ``log(values, step, wall_time)`` with ``{tag: float}``, the sample's
            number (0, 1, ...) and ``time.time()`` of the reading; it raising ``RuntimeError``
            (the monitor closed) ends the sampling.
        interval: seconds between two samples.
        key: the job (``job.job_key``); ``None`` samples this process and its children.
        prefix: the first tag levels (``prefix()``).

    Attributes:
        samples: samples logged so far.
        cpu_seconds: CPU time the sampler process has used (as of its latest sample).
    """

    def __init__(self, log: Callable[[dict[str, float], int, float], Any], interval: float,
                 key: str | None, prefix: str = PREFIX) -> None:
        self._log, self.interval = log, interval
        self.samples = 0
        self.cpu_seconds = 0.0
        self._warned = False
        self._stopped = False
        self._process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, repr(interval), json.dumps(key),
             str(os.getpid()), prefix],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, close_fds=True,
            start_new_session=True)  # a terminal's Ctrl-C goes to the trainer, which stops it
        self._thread = threading.Thread(target=self._run, name="core-monitor-sampler",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                sample = json.loads(line)
                self.cpu_seconds = float(sample["cpu_seconds"])
                self._log(sample["values"], self.samples, float(sample["wall_time"]))
                self.samples += 1
            except RuntimeError:  # the monitor closed
                break
            except Exception as error:  # never let a sample take the trainer down
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"core-monitor's system sampler failed ({error!r}); it keeps "
                                  "sampling, and warns once", RuntimeWarning, stacklevel=1)

    def stop(self, final: bool = True) -> None:
        """Stop the sampler process; with ``final``, after one last sample (a run shorter
        than the interval still gets one), logged before this returns (within
        ``STOP_TIMEOUT``). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        stdin = self._process.stdin
        try:
            if stdin is not None:
                if final:
                    stdin.write("final\n")
                stdin.close()
        except OSError:  # it ended already
            pass
        deadline = time.monotonic() + STOP_TIMEOUT
        self._thread.join(STOP_TIMEOUT)
        try:
            self._process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()

    def forget(self) -> None:
        """In a forked child: the parent's sampler; never log from it here."""
        self._stopped = True
