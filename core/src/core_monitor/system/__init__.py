"""System metrics of the training job: ``Monitor(..., system_metrics=True | seconds)``.

One sampler per node (a small process started by local rank 0, when that process writes) reads
the job's processes (``core_monitor.system.job``) and GPUs (``core_monitor.system.probes``)
every interval; local rank 0 logs each sample through its monitor as scalars under ``system/``
(``core_monitor.system.sampler``, ``core_monitor.system.worker``). The docs page is
``docs/operations/system-metrics.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import job, nodes
from .sampler import (
    DEFAULT_INTERVAL,
    SystemSampler,
    check_interval,
    check_psutil,
    local_rank,
    node_config,
    node_count,
    node_rank,
    prefix,
)

__all__ = ["DEFAULT_INTERVAL", "SystemMetrics", "SystemSampler", "check_interval",
           "job", "local_rank", "node_config", "node_count", "node_rank", "prefix"]


class SystemMetrics:
    """What one ``Monitor`` does for ``system_metrics``: register this process as one of the
    job's on its node and, in the process that samples the node, run the sampler.

    Args:
        monitor: the ``Monitor`` (its ``log(..., advance=False, wall_time=...)`` takes the
            samples).
        interval: seconds between two samples (``check_interval``).
        writes: whether this process writes (has backends); the node is sampled by local
            rank 0 when it writes.
        rank_zero_only: the monitor's: on a job of several nodes, the nodes that do not
            write send their samples to rank 0's run (``core_monitor.system.nodes``).
    """

    def __init__(self, monitor: Any, interval: float, writes: bool,
                 rank_zero_only: bool = True) -> None:
        check_psutil()
        self.key = job.job_key()
        self._registration: Path | None = job.register(self.key)
        self.sampler: SystemSampler | None = None
        self._collector: nodes.Collector | None = None

        def log(values: dict[str, float], step: int, wall_time: float) -> None:
            monitor.log(values, step=step, advance=False, wall_time=wall_time)

        several = node_count() > 1
        if writes and local_rank() == 0:
            self.sampler = SystemSampler(log, interval, self.key, prefix())
            if several and rank_zero_only and monitor.run.rank == 0:
                store = nodes.connect()
                if store is not None:
                    others = [k for k in range(node_count()) if k != node_rank()]
                    self._collector = nodes.Collector(store, self.key, others, interval, log)
        elif several and rank_zero_only and local_rank() == 0:
            store = nodes.connect()  # a node whose samples go to rank 0's run
            if store is not None:
                self.sampler = SystemSampler(nodes.forwarder(store, self.key, node_rank()),
                                             interval, self.key, prefix())

    def stop(self) -> None:
        """Log a last sample, stop the sampler, and unregister. Idempotent."""
        if self.sampler is not None:
            self.sampler.stop()
        if self._collector is not None:
            self._collector.stop()
        job.unregister(self._registration)
        self._registration = None

    def forget(self) -> None:
        """In a forked child: never sample, and leave the parent's registration alone."""
        if self.sampler is not None:
            self.sampler.forget()
        self._registration = None
