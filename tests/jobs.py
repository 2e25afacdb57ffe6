"""The processes of a job, as a scheduler sees them: a process's descendants (``ps``), whether
one is still running. The preemption tests signal "every process of the job" with these."""

from __future__ import annotations

import subprocess


def descendants(pid: int) -> list[int]:
    """``pid``'s child processes, their children, and so on (``ps``)."""
    listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True,
                             check=True).stdout
    children: dict[int, list[int]] = {}
    for line in listing.splitlines():
        child, parent = (int(field) for field in line.split())
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                           text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")
