"""One job's ranks, each writing a run of its own (``rank_zero_only=False``), as the plugins'
group tests run them: ranks are set through ``RANK`` and ``WORLD_SIZE``, the variables torchrun
sets, so every process-level default of the core applies as under a real launcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core_monitor import Monitor, RunInfo


def two_ranks(backend: str, log_dir: Path, monkeypatch: pytest.MonkeyPatch,
              name: str = "ddp", **options: Any) -> list[RunInfo]:
    """Ranks 0 and 1 of one job of two (``WORLD_SIZE=2``), one after the other, each a
    ``Monitor([backend], project="p", name=name, rank_zero_only=False)`` with ``options``
    (e.g. ``clearml={"tags": [...]}``) that logs ``loss`` = its rank at step 0 and closes.

    Returns:
        The two runs, rank 0's first (``RunInfo.ranked_name``: ``name``, ``name-rank1``).
        ``RANK`` and ``WORLD_SIZE`` stay at 1 and 2: ``one_process`` sets them back.
    """
    monkeypatch.setenv("WORLD_SIZE", "2")
    runs = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        with Monitor([backend], project="p", name=name, log_dir=log_dir,
                     rank_zero_only=False, **options) as monitor:
            monitor.log({"loss": float(rank)}, step=0)
        runs.append(monitor.run)
    return runs


def one_process(backend: str, log_dir: Path, monkeypatch: pytest.MonkeyPatch,
                name: str = "alone") -> RunInfo:
    """A job of one process (``RANK=0``, ``WORLD_SIZE=1``) with ``rank_zero_only=False``,
    which has no group: its run, closed with nothing logged."""
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    with Monitor([backend], project="p", name=name, log_dir=log_dir,
                 rank_zero_only=False) as monitor:
        pass
    return monitor.run
