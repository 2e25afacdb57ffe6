"""Reading a run back from DVCLive's own files (``monitors copy`` and the contract kit read
through here; declared under ``experiment_monitor_readers``).

The scalars are DVCLive's ``plots/metrics/<tag>.tsv`` files (a ``step`` column and one named
after the tag's last part, tab-separated; a ``timestamp`` column too where ``log_metric`` was
given ``timestamp=True``; the value's column is always last), the config its
``params.yaml``: the files ``dvc plots`` and ``dvc params`` read.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from core_monitor import RunInfo

from .storage import METRICS_DIR, PARAMS_YAML, run_dir, status_of, tag_of

__all__ = ["read_config", "read_crash", "read_rows"]


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)``; ``[]`` when the run has none.

    Tags in the order of their files' paths, each tag's rows in file order (the order
    logged). ``nan``/``inf``/``-inf`` (DVCLive writes them as text) are floats again.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``); for ``run.rank > 0``
            that rank's own run is read.
    """
    return read_rows_in(run_dir(run))


def read_rows_in(folder: Path) -> list[tuple[str, int, float]]:
    """``read_rows`` for the run in ``folder`` (a ``Live(dir=...)`` folder)."""
    root = folder / METRICS_DIR
    rows: list[tuple[str, int, float]] = []
    for path in sorted(root.rglob("*.tsv")):
        tag = tag_of(path.relative_to(root).as_posix()[: -len(".tsv")])
        with path.open(newline="", encoding="utf-8") as file:
            table = csv.reader(file, delimiter="\t")
            header = next(table, None)
            if header is None:
                continue
            step_at = header.index("step")  # the value is last: DVCLive's Metric.dump
            rows += [(tag, int(row[step_at]), float(row[-1])) for row in table if row]
    return rows


def read_config(run: RunInfo) -> dict[str, Any]:
    """The run's ``params.yaml`` (``Live.log_params``); ``{}`` when none. Argument as for
    ``read_rows``."""
    path = run_dir(run) / PARAMS_YAML
    if not path.exists():
        return {}
    from dvclive.serialize import load_yaml  # here: importing the plugin imports no SDK

    config: dict[str, Any] = load_yaml(path) or {}
    return config


def last_step(folder: Path) -> int | None:
    """The largest step of the run in ``folder``, ``None`` when it has no row."""
    return max((step for _, step, _ in read_rows_in(folder)), default=None)


def read_crash(run: RunInfo) -> str | None:
    """Why the run ended by a crash (its ``status`` file's ``crashed: <reason>``: DVCLive has
    no run status); ``None`` when it did not. Argument as for ``read_rows``."""
    return status_of(run_dir(run)).crash()
