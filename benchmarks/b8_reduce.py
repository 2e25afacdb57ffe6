"""B8: cost of ``Monitor.log(..., reduce="mean")`` against a bare ``all_reduce`` (gloo, CPU).

    nox -s bench_dist                     # or, with torch and the wheels installed:
    torchrun --nproc_per_node 2 benchmarks/b8_reduce.py [--calls 2000] [--rounds 7]

Per call, 10 scalars. Arm A: ``monitor.log(metrics, step, reduce="mean")`` with a backend that
does nothing (so the figure is the reduction and the core, not a tracker's SDK). Arm B: what a
user would write by hand: the same 10 values into one float64 tensor, ``all_reduce(SUM)``,
divide, back to Python floats. The arms alternate in rounds in one process group; the result
is the median of the per-round ratios A/B, with (min-max). Target: <= 1.2x. Rank 0 prints it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from core_monitor import Monitor, hookimpl


class NullBackend:
    name = "null"

    def __init__(self, run) -> None:
        self.run = run

    @hookimpl
    def monitor_write(self, events) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    metrics = {f"train/m{i}": float(rank + i) for i in range(10)}
    monitor = Monitor([NullBackend], project="bench", name="b7")

    def arm_monitor() -> float:
        dist.barrier()
        start = time.perf_counter()
        for step in range(options.calls):
            monitor.log(metrics, step=step, reduce="mean")
        return time.perf_counter() - start

    def arm_bare() -> float:
        dist.barrier()
        start = time.perf_counter()
        for _ in range(options.calls):
            tensor = torch.tensor(list(metrics.values()), dtype=torch.float64)
            dist.all_reduce(tensor)
            [value / world for value in tensor.tolist()]
        return time.perf_counter() - start

    arm_monitor(), arm_bare()  # warm-up (the first reduce call agrees on the tags)
    ratios, per_call = [], []
    for _ in range(options.rounds):
        a, b = arm_monitor(), arm_bare()
        ratios.append(a / b)
        per_call.append((a / options.calls * 1e6, b / options.calls * 1e6))
    monitor.close()
    if rank == 0:
        median = statistics.median(ratios)
        a_us = statistics.median(p[0] for p in per_call)
        b_us = statistics.median(p[1] for p in per_call)
        print(f"B8 reduce='mean', 10 scalars, {world} ranks (gloo): {median:.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}); {a_us:.1f} us vs bare all_reduce "
              f"{b_us:.1f} us per call; target <= 1.2x: {'met' if median <= 1.2 else 'missed'}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
