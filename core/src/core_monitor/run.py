"""``RunInfo``: what every backend is told about the run; how run name and rank are chosen."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

#: The module a writer process runs (``python -m core_monitor.dispatch.writer``, started by
#: ``core_monitor.dispatch.processes``): its ``__main__``.
WRITER_MODULE = "core_monitor.dispatch.writer"


def training_pid() -> int:
    """The process id of the training process: the one that created the ``Monitor``.

    A backend running in a writer process (``dispatch="process"``, the default) gets the pid of
    the training process that started the writer (its parent), not its own; in ``"thread"`` and
    ``"sync"`` mode the backend runs in the training process, and this is ``os.getpid()``. For
    a backend whose SDK samples a process's CPU, memory or threads (wandb's system charts):
    point the sampler here, or it describes the writer.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) == WRITER_MODULE:
        return os.getppid()
    return os.getpid()


@dataclass(frozen=True)
class RunInfo:
    """The run a backend is constructed for: ``Backend(run: RunInfo, **options)``.

    Attributes:
        project: project name, shared by runs that belong together (wandb/Trackio "project").
        name: run name. When the caller gives none the core makes one (``default_run_name``),
            so every backend names the run alike.
        config: hyperparameters, already sanitised by
            ``core_monitor.hyperparameters.sanitize_config``: a flat, read-only mapping of
            ``str`` keys (nesting joined with ``.``) to JSON-safe values.
        log_dir: root folder under which a local backend writes, or ``None`` for the SDK's own
            default. A ``log_dir`` given here wins over ``TRACKIO_DIR`` / ``WANDB_DIR``.
        rank: this process's rank (0 for single-process training).
        world_size: number of processes in the job (1 for single-process training).
        group: the job's run group when every rank writes a run of its own
            (``rank_zero_only=False`` and more than one rank): the run ``name``, the same on
            every rank; ``None`` otherwise. A backend whose tracker groups runs uses it where
            the user gave no group of their own (wandb, Trackio and SwanLab ``group``; the
            MLflow tag, Aim run param and Comet "Other" ``job.group``; the ClearML tag
            ``job.group: <group>``).
        system_metrics: seconds between two samples of the core's system sampler
            (``Monitor(system_metrics=...)``), or ``None`` when it is off. When set, a
            backend turns its SDK's own system sampler off (wandb's stats, Trackio's GPU and
            CPU logging, ...): the job's samples reach it as ordinary ``system/`` scalars.
        resume: ``"never"``, ``"allow"`` or ``"must"``: whether a backend continues the
            existing run of this identity (``core_monitor.resume``; ``Monitor(resume=...)``).
        resumed: (``Monitor.run`` only, after the start) some backend continued a run.
        last_step: (``Monitor.run`` only) the largest step every continuing backend already
            holds, ``None`` when there is nothing to skip (``core_monitor.resume.collect``).
    """

    project: str
    name: str
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    log_dir: Path | None = None
    rank: int = 0
    world_size: int = 1
    resume: str = "never"
    system_metrics: float | None = None
    group: str | None = None
    resumed: bool = False
    last_step: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the fields, ``config`` as a plain ``dict`` (a writer process gets the
        ``RunInfo`` this way; ``MappingProxyType`` itself does not pickle)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["config"] = dict(fields["config"])
        return (_rebuild_run, (fields,))

    @property
    def ranked_name(self) -> str:
        """The name of this rank's own run: ``name`` on rank 0, ``<name>-rank<rank>`` above.

        With ``Monitor(..., rank_zero_only=False)`` every rank writes, each into a run of its
        own; the Trackio, wandb, MLflow, SwanLab, Aim, ClearML, Comet, DVCLive and CSV
        backends and the plugins ``monitors new`` writes name those runs this way, so one
        job's runs sort together in a tracker's run list (``ddp``, ``ddp-rank1``, ...). A
        backend whose storage nests runs may use ``rank`` itself instead (TensorBoard's
        sub-run ``<name>/rank<rank>``).
        """
        return self.name if self.rank == 0 else f"{self.name}-rank{self.rank}"


def _rebuild_run(fields: dict[str, Any]) -> RunInfo:
    """``RunInfo.__reduce__``'s counterpart: the config read-only again."""
    fields["config"] = MappingProxyType(fields["config"])
    return RunInfo(**fields)


#: Default run names handed out in this process, so that none is handed out twice.
_issued: set[str] = set()
_issued_lock = threading.Lock()


def default_run_name(now: float | None = None) -> str:
    """Return a run name such as ``20261130-184200-myhost`` (local time, then host name).

    Never the same name twice in one process: a second name in the same second is
    ``20261130-184200-myhost.2`` (then ``.3``, ...), so two runs made in one second (two
    ``Monitor`` objects, two Lightning loggers) are two runs with two folders, as Lightning's
    ``version_0``, ``version_1``. Separate processes (the ranks of one job) are not told apart:
    each one's first name is the plain one.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    host = socket.gethostname().split(".")[0] or "host"
    base = name = f"{stamp}-{host}"
    with _issued_lock:
        count = 1
        while name in _issued:
            count += 1
            name = f"{base}.{count}"
        _issued.add(name)
    return name


def detect_rank() -> tuple[int, int]:
    """Return ``(rank, world_size)`` of this process.

    Read at call time, in this order: ``torch.distributed`` when it is already imported and
    initialised (this never imports torch); ``RANK``/``WORLD_SIZE`` (torchrun, accelerate);
    ``SLURM_PROCID``/``SLURM_NTASKS`` (srun); otherwise ``(0, 1)``.

    Raises:
        ValueError: one of those variables is set but not an integer.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size())
        except Exception:  # a half-initialised process group: fall back to the environment
            pass
    for rank_var, size_var in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_var in os.environ:
            return _env_int(rank_var, 0), _env_int(size_var, 1)
    return 0, 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None
