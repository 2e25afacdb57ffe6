"""Every read of a backend's OWN storage that the framework tests make, in one place.

``rows(backend, run)`` and ``config(backend, run)`` take the run a ``Monitor`` logged
(``monitor.run``, a ``core_monitor.RunInfo``; for a rank ``k > 0`` of a ``rank_zero_only=False``
job, the same run with ``rank=k``) and call the plugin's own ``read_rows(run)`` /
``read_config(run)``, found through its entry point.
"""

from __future__ import annotations

import importlib
import math
from importlib.metadata import entry_points
from typing import Any

from core_monitor import RunInfo

BACKENDS = ("trackio", "tensorboard", "wandb")

Rows = list[tuple[str, int, float]]


def _name(run: RunInfo) -> str:
    return run.name if run.rank == 0 else f"{run.name}-rank{run.rank}"


def _wandb_folder(run: RunInfo):
    from wandb_monitor import find_run_dirs

    folders = find_run_dirs(run.log_dir, project=run.project, name=_name(run))
    assert len(folders) == 1, f"expected one wandb run {_name(run)!r}, found {folders}"
    return folders[0]


def runs(backend: str, run: RunInfo) -> int:
    """How many runs of ``run``'s project and name (and rank) the backend holds."""
    if backend == "trackio":
        import sqlite3

        from trackio_monitor import trackio_dir

        db = trackio_dir(run.log_dir) / f"{run.project}.db"
        if not db.exists():
            return 0
        with sqlite3.connect(db) as conn:
            (count,) = conn.execute("SELECT COUNT(DISTINCT run_id) FROM metrics WHERE "
                                    "run_name = ?", (_name(run),)).fetchone()
        return count
    if backend == "tensorboard":
        from tensorboard_monitor import run_dir

        folder = run_dir(run.project, run.name, run.log_dir, rank=run.rank)
        return int(folder.is_dir() and any(folder.glob("events.out.tfevents.*")))
    if backend == "wandb":
        from wandb_monitor import find_run_dirs

        return len(find_run_dirs(run.log_dir, project=run.project, name=_name(run)))
    raise ValueError(backend)


def _plugin(backend: str) -> Any:
    """The plugin package of an installed backend, found through its entry point."""
    (entry_point,) = entry_points(group="experiment_monitors", name=backend)
    return importlib.import_module(entry_point.module.partition(".")[0])


def rows(backend: str, run: RunInfo) -> Rows:
    """``[(tag, step, value)]`` as the backend stored them (its own storage, its own reader)."""
    return _plugin(backend).read_rows(run)


def texts(backend: str, run: RunInfo) -> list[tuple[str, int, str]]:
    """``[(tag, step, text)]`` of the ``Text`` media the backend stored (its own reader)."""
    return sorted((tag, step, value.text) for tag, step, value in
                  _plugin(backend).read_media(run) if getattr(value, "kind", "") == "text")


def config(backend: str, run: RunInfo) -> dict[str, Any]:
    """The config (hyperparameters) the backend stored for the run, with the plugin's own
    additions and key escaping removed; ``{}`` when none."""
    return _plugin(backend).read_config(run)


def same_value(backend: str, stored: float, expected: float) -> bool:
    """Whether a stored value is ``expected``: exact, except TensorBoard's float32."""
    if math.isnan(expected):
        return math.isnan(stored)
    if backend == "tensorboard":
        return math.isclose(stored, expected, rel_tol=1e-6, abs_tol=1e-30)
    return stored == expected


def assert_rows(backend: str, run: RunInfo, expected: Rows) -> None:
    """The backend holds exactly ``expected`` (tag, step, value), in any order of rows."""
    got = sorted(rows(backend, run))
    want = sorted(expected)
    assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in want], (
        f"{backend}: stored {got}\nexpected {want}")
    for (tag, step, value), (_, _, wanted) in zip(got, want, strict=True):
        assert same_value(backend, value, wanted), f"{backend}: {tag}@{step} = {value} != {wanted}"


def assert_config(backend: str, run: RunInfo, expected: dict[str, Any]) -> None:
    """Every key of ``expected`` is in the backend's stored config with that value
    (TensorBoard's HParams hold numbers as float64: compared as numbers)."""
    stored = config(backend, run)
    for key, value in expected.items():
        assert key in stored, f"{backend}: config key {key!r} not stored; stored: {stored}"
        got = stored[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert isinstance(got, (int, float)) and float(got) == float(value), (backend, key, got)
        else:
            assert got == value, (backend, key, got, value)
