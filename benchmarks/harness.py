"""What every benchmark shares: paired timing, statistics, RSS, the null backend, read-back.

A figure is a ratio measured in one process run: arm A and arm B are timed alternately (order
swapped on every repetition, so slow drift of a shared machine hits both alike), and the
figure is the median of the per-repetition ratios A_i / B_i, with its spread (min-max).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from core_monitor import Event, RunInfo, hookimpl

#: The entry-point group backends register in.
GROUP = "experiment_monitors"

# The offline environment is defined once, in tests/sdk_env.py (standard library only); appended,
# so that nothing in tests/ can shadow an installed package.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
import sdk_env  # noqa: E402

BACKENDS = ("trackio", "tensorboard", "wandb")


class RowCountError(AssertionError):
    """A backend stored fewer (or more) scalars than the benchmark sent it."""


def sandbox_env(root: Path) -> dict[str, str]:
    """The process environment with every SDK folder under ``root / "env"``, every SDK offline,
    and no variable that would change what a Monitor does (``tests/sdk_env.py``)."""
    return sdk_env.sandbox_env(root / "env")


class NullBackend:
    """A backend that does nothing: what is left is the core's own cost."""

    name = "null"

    def __init__(self, run: Any) -> None:
        self.run = run

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        pass

    @hookimpl
    def monitor_flush(self) -> None:
        pass

    @hookimpl
    def monitor_close(self) -> None:
        pass


def metrics(n: int, prefix: str = "m") -> dict[str, float]:
    """``n`` float scalars with distinct tags, like a training step logs."""
    return {f"{prefix}/scalar_{j}": 0.5 + j for j in range(n)}


def timed(body: Callable[[], None]) -> float:
    """Seconds ``body`` takes, after a full garbage collection (GC stays on while timing)."""
    gc.collect()
    start = time.perf_counter()
    body()
    return time.perf_counter() - start


def alternate(arms: dict[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """Run each arm ``reps`` times, interleaved, rotating the order every repetition.

    Each arm does its own untimed setup and teardown and returns the seconds of its timed part.
    """
    names = list(arms)
    out: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(arms[name]())
    return out


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and count of ``values``."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def paired(a: Sequence[float], b: Sequence[float], per: int) -> dict[str, Any]:
    """A vs B from paired repetitions: ratio A/B, and (A - B) / ``per`` in microseconds."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    added = [(x - y) / per * 1e6 for x, y in zip(a, b, strict=True)]
    return {
        "ratio": spread(ratios),
        "added_us": spread(added),
        "a_us": spread([x / per * 1e6 for x in a]),
        "b_us": spread([y / per * 1e6 for y in b]),
    }


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in kB, from ``/proc/<pid>/status``."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0])
    except OSError:  # the process ended meanwhile
        pass
    return out


def descendants_hwm_kb() -> int:
    """Summed peak RSS (kB) of this process's child processes (e.g. wandb's service)."""
    me = str(os.getpid())
    parents: dict[str, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[entry] = stat.read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
    family, frontier = set(), {me}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - family
        family |= frontier
    return sum(proc_status(pid).get("VmHWM", 0) for pid in family)


# Read-back: what each backend's own storage holds --------------------------------------------


def stored_count(backend: str, project: str, name: str, log_dir: Path) -> int:
    """How many scalars ``backend`` stored for the run, read with its plugin's ``read_rows``.

    The plugin is the package of the class the backend's entry point names; every plugin's
    ``read_rows(run: RunInfo)`` reads the backend's own storage.
    """
    (entry_point,) = entry_points(group=GROUP, name=backend)
    reader = import_module(entry_point.module.split(".")[0]).read_rows
    return len(reader(RunInfo(project=project, name=name, log_dir=log_dir)))


def check_count(backend: str, project: str, name: str, log_dir: Path, sent: int) -> int:
    """Raise ``RowCountError`` unless the backend stored exactly ``sent`` scalars."""
    got = stored_count(backend, project, name, log_dir)
    if got != sent:
        raise RowCountError(
            f"{backend}: sent {sent} scalars for {project}/{name}, its storage holds {got}"
        )
    return got
