"""A monitor's writer processes: which process is which backend's, and the CPU time each writer
and the processes its SDK started (wandb's ``wandb-core``, ...) have used. Linux ``/proc`` only.

CPU time is ``utime + stime`` of every process of a writer's tree, plus ``cutime + cstime`` (the
children it already reaped), from ``/proc/<pid>/stat`` (proc(5)), in clock ticks of
``SC_CLK_TCK`` (10 ms on Linux). Read a tree before its processes exit: a process that left the
tree without being reaped by it (one that detached to init) is no longer counted.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

_TICK = os.sysconf("SC_CLK_TCK")


class Proc(NamedTuple):
    """One process as ``/proc/<pid>/stat`` shows it."""

    ppid: int
    #: utime + stime + cutime + cstime, seconds
    cpu_s: float
    #: start time after boot, clock ticks (orders processes by start)
    started: int


def processes() -> dict[int, Proc]:
    """Every process this user can read, by pid."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # After the command name in parentheses: field 3 (state) is index 0.
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # the process ended meanwhile
            continue
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        out[int(entry)] = Proc(int(fields[1]), ticks / _TICK, int(fields[19]))
    return out


def tree(pid: int, table: dict[int, Proc]) -> set[int]:
    """``pid`` and its descendants in ``table``."""
    family, frontier = {pid} & table.keys(), {pid}
    while frontier:
        frontier = {p for p, proc in table.items() if proc.ppid in frontier} - family
        family |= frontier
    return family


def tree_cpu_s(pids: dict[str, int]) -> dict[str, tuple[float, int]]:
    """For each name, the CPU seconds of its process and the processes under it, now, and how
    many processes that tree holds."""
    table = processes()
    trees = {name: tree(pid, table) for name, pid in pids.items()}
    return {name: (sum(table[p].cpu_s for p in family), len(family))
            for name, family in trees.items()}


def writer_pids(monitor: Any, names: list[str]) -> tuple[dict[str, int], str]:
    """Each backend's writer pid, and how it was found.

    First from the monitor's dispatch: any object under it (attributes, lists, dicts; a few
    levels deep) with a ``name`` among ``names`` and a ``process.pid`` or ``pid``. This reads
    the dispatch's internals by shape, not by class, so that it survives a rewrite of the
    engine. Else from ``/proc``: this process's children running ``core_monitor``, in start
    order, which is the order writers are started in (selection order) - only when there is
    exactly one per name. Else ``{}``.
    """
    found = _from_dispatch(getattr(monitor, "_dispatch", None), set(names))
    if set(found) == set(names):
        return found, "the dispatch's writer objects"
    table = processes()
    me = os.getpid()
    children = sorted((proc.started, pid) for pid, proc in table.items()
                      if proc.ppid == me and b"core_monitor" in _cmdline(pid))
    if len(children) == len(names):
        return {n: pid for n, (_, pid) in zip(names, children, strict=True)}, \
            "child processes in start order"
    return {}, f"not found ({len(children)} core_monitor children for {len(names)} backends)"


def _from_dispatch(root: Any, names: set[str], depth: int = 4) -> dict[str, int]:
    found: dict[str, int] = {}
    seen: set[int] = set()
    frontier = [root]
    for _ in range(depth):
        nxt = []
        for obj in frontier:
            if obj is None or id(obj) in seen or isinstance(obj, (str, bytes, int, float)):
                continue
            seen.add(id(obj))
            name = getattr(obj, "name", None) if hasattr(obj, "__dict__") else None
            pid = getattr(getattr(obj, "process", None), "pid", None)
            pid = pid if isinstance(pid, int) else getattr(obj, "pid", None)
            if isinstance(name, str) and name in names and isinstance(pid, int):
                found.setdefault(name, pid)
                continue
            if isinstance(obj, dict):
                nxt += list(obj.values())
            elif isinstance(obj, (list, tuple, set, frozenset)):
                nxt += list(obj)
            elif hasattr(obj, "__dict__") and obj.__class__.__module__.startswith("core_monitor"):
                nxt += list(vars(obj).values())
        frontier = nxt
    return found


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
