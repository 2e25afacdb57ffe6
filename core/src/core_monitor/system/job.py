"""Which processes a node's sampler measures: the training job's, and this project's apart.

**The job's processes.** Every process of the job that creates a ``Monitor`` with
``system_metrics`` on registers its pid in a node-local folder named after the job
(``register``), whether or not it writes (``rank_zero_only`` ranks register too). The node's
sampler reads that folder at every sample (``job_processes``), so ranks that start late are
counted from their next sample on, and a rank that ended is dropped. A registration is an
empty file ``<pid>-<start time>`` (the start time, to the second, tells a pid the kernel
reused from the rank that held it), removed at ``close()``; one a killed rank left behind is
removed by the sampler.

Why a registry, and not "the launcher's children": torchrun, ``srun``, the DeepSpeed launcher
and ``mpirun`` each start ranks differently (a Python agent, ``slurmstepd``, ``pdsh``), and a
parent shared by two jobs (a shell, ``slurmstepd`` with several steps) would mix them. Every
launcher names its job in the environment, and that name is the folder (``job_key``).

**Their children** (data-loader workers, compilers, a shell command) belong to the job; the
project's own processes (every process run as ``python -m core_monitor...``: the writers of
``dispatch="process"``) and their children (an SDK's service, e.g. ``wandb-core``) do not: they
are what monitoring costs, reported apart (``split``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: The main module of a process this project starts (a writer) begins with this.
PROJECT_MODULE = "core_monitor."


def job_key(environ: dict[str, str] | None = None) -> str | None:
    """The name of the job this process belongs to, the same in every rank of it on a node.

    ``torchrun`` (and launchers built on it: ``accelerate launch``, Lightning's):
    ``TORCHELASTIC_RUN_ID`` with ``MASTER_ADDR:MASTER_PORT`` (the run id defaults to ``none``);
    Slurm: ``SLURM_JOB_ID`` and ``SLURM_STEP_ID``; any other launcher that sets
    ``MASTER_ADDR``/``MASTER_PORT`` and a ``WORLD_SIZE`` above 1 (the DeepSpeed launcher,
    ``mpirun`` with them exported): those two. ``None``: a single process (it samples itself).
    """
    env = os.environ if environ is None else environ
    master = f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
    if "TORCHELASTIC_RUN_ID" in env:
        key = f"torchrun-{env['TORCHELASTIC_RUN_ID']}-{master}"
    elif "SLURM_JOB_ID" in env:
        key = f"slurm-{env['SLURM_JOB_ID']}-{env.get('SLURM_STEP_ID', '')}"
    elif env.get("WORLD_SIZE", "1").strip() not in ("", "1") and master != ":":
        key = f"job-{master}"
    else:
        return None
    return re.sub(r"[^A-Za-z0-9._-]", "_", key)


def registry_dir(key: str) -> Path:
    """The node-local folder where the processes of job ``key`` register: under the system's
    temporary folder (``TMPDIR``), one per user."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"core-monitor-{uid}" / "jobs" / key


def _start_time(pid: int) -> str:
    import psutil

    return f"{psutil.Process(pid).create_time():.2f}"


def register(key: str | None) -> Path | None:
    """Register this process as one of job ``key``'s; return the file to remove at close
    (``unregister``), ``None`` for a single process (nothing to register)."""
    if key is None:
        return None
    folder = registry_dir(key)
    path = folder / f"{os.getpid()}-{_start_time(os.getpid())}"
    for attempt in range(3):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            path.touch()
            break
        except FileNotFoundError:  # the last process of an earlier job removed the folder
            if attempt == 2:
                raise
    return path


def unregister(path: Path | None) -> None:
    """Remove a registration ``register`` made (gone already: nothing to do)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # the job's last process: its folder goes too


def job_processes(key: str | None, own_pid: int | None = None) -> list[Any]:
    """The ``psutil.Process`` of every live registered process of job ``key``, and always
    ``own_pid`` (default: this process); stale registrations (the process ended) are
    removed."""
    import psutil

    own = psutil.Process(own_pid)
    if key is None:
        return [own]
    found = {own.pid: own}
    with contextlib.suppress(OSError):
        for entry in registry_dir(key).iterdir():
            pid_text, _, started = entry.name.partition("-")
            try:
                process = psutil.Process(int(pid_text))
                # Within a second: psutil derives start times from the boot time, which
                # differs by milliseconds between two processes' reads.
                alive = abs(process.create_time() - float(started)) < 1.0
            except (ValueError, psutil.Error):
                alive = False
            if not alive:
                with contextlib.suppress(OSError):
                    entry.unlink()
            elif process.pid not in found:
                found[process.pid] = process
    return list(found.values())


#: (pid, start time) -> whether it is one of this project's processes (a command line never
#: changes meaningfully after the start; read once per process).
_kinds: dict[tuple[int, float], bool] = {}


def is_project_process(process: Any) -> bool:
    """Whether ``process`` is one this project started (``python -m core_monitor...``)."""
    import psutil

    try:
        key = (process.pid, process.create_time())
        if key not in _kinds:
            if len(_kinds) > 4096:
                _kinds.clear()
            cmdline = process.cmdline()
            _kinds[key] = any(a == "-m" and b.startswith(PROJECT_MODULE)
                              for a, b in itertools.pairwise(cmdline))
    except psutil.Error:
        return False
    return _kinds[key]


def _children_map() -> dict[int, list[Any]]:
    """Parent pid -> its child processes, from one pass over the system's processes (psutil's
    ``children(recursive=True)`` makes such a pass per call)."""
    import psutil

    children: dict[int, list[Any]] = {}
    for process in psutil.process_iter(["ppid"]):
        ppid = process.info.get("ppid")
        if ppid:
            children.setdefault(ppid, []).append(process)
    return children


def split(roots: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    """``(job, monitor)``: ``roots`` and their descendants, the project's own processes and
    their descendants taken out into ``monitor``. A process is listed once."""
    roots = list(roots)
    top = {root.pid for root in roots}
    children = _children_map()
    job: dict[int, Any] = {}
    monitor: dict[int, Any] = {}
    todo: list[tuple[Any, bool]] = [(root, False) for root in roots]
    while todo:
        process, ours = todo.pop()
        if process.pid in job or process.pid in monitor:
            continue
        ours = ours or (process.pid not in top and is_project_process(process))
        (monitor if ours else job)[process.pid] = process
        todo.extend((child, ours) for child in children.get(process.pid, ()))
    return list(job.values()), list(monitor.values())
