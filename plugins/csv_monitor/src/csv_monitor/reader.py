"""Reading a run back from its CSV files, whichever layout wrote it (``monitors copy`` and the
contract kit read through here; declared under ``experiment_monitor_readers``)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core_monitor import RunInfo

from . import deepspeed_files, lightning_table, remote
from .storage import run_dir, status_of

__all__ = ["read_config", "read_config_in", "read_crash", "read_rows", "read_rows_in"]


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)``; ``[]`` when the run has none.

    Lightning layout: ``metrics.csv`` row by row, each row's non-empty cells in header order
    (a column sorted, as Lightning writes it, so the order within a step is by tag).
    DeepSpeed layout: each per-tag file in the order ``tags.json`` lists them, rows in file
    order.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``); for ``run.rank > 0``
            that rank's own run is read.
    """
    return read_rows_in(run_dir(run))


def read_rows_in(folder: Path | str) -> list[tuple[str, int, float]]:
    """``read_rows`` for the run in ``folder`` (e.g. one written with the ``run_dir`` option;
    an fsspec URL is read through fsspec: Lightning layout)."""
    if isinstance(folder, str) and remote.is_url(folder):
        where = remote.RemoteFolder(folder)
        if not where.exists(lightning_table.METRICS):
            return []
        return _rows_of(io.StringIO(where.read_text(lightning_table.METRICS), newline=""))
    folder = Path(folder)
    if layout_of(folder) == "lightning":
        return _read_table(folder / lightning_table.METRICS)
    rows: list[tuple[str, int, float]] = []
    for name, tag in deepspeed_files.read_tags(folder).items():
        with (folder / name).open(newline="", encoding="utf-8") as file:
            lines = csv.reader(file)
            next(lines, None)  # step,<column>
            rows += [(tag, int(step), float(value)) for step, value in lines]
    return rows


def read_config(run: RunInfo) -> dict[str, Any]:
    """The run's stored config (``hparams.yaml`` or ``deepspeed_config.csv``); ``{}`` when
    none. Argument as for ``read_rows``."""
    return read_config_in(run_dir(run))


def read_config_in(folder: Path | str) -> dict[str, Any]:
    """``read_config`` for the run in ``folder`` (e.g. one written with the ``run_dir``
    option; an fsspec URL is read through fsspec)."""
    if isinstance(folder, str) and remote.is_url(folder):
        where = remote.RemoteFolder(folder)
        if not where.exists(lightning_table.HPARAMS):
            return {}
        import yaml

        found: dict[str, Any] = yaml.safe_load(where.read_text(lightning_table.HPARAMS)) or {}
        return found
    folder = Path(folder)
    hparams = folder / lightning_table.HPARAMS
    if layout_of(folder) != "deepspeed" and hparams.exists():
        import yaml  # here: importing the plugin imports none of its requirements

        config: dict[str, Any] = yaml.safe_load(hparams.read_text(encoding="utf-8")) or {}
        return config
    path = folder / deepspeed_files.CONFIG
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as file:
        return {key: _json_or_str(value) for key, value in csv.reader(file)}


def layout_of(folder: Path) -> str | None:
    """``"deepspeed"`` (``tags.json``), ``"lightning"`` (``metrics.csv``) or ``None``, for the
    run in ``folder``. ``tags.json`` first: a DeepSpeed-layout tag ``metrics`` is a
    ``metrics.csv`` too."""
    if (folder / deepspeed_files.TAGS).exists():
        return "deepspeed"
    if (folder / lightning_table.METRICS).exists():
        return "lightning"
    return None


def _read_table(path: Path) -> list[tuple[str, int, float]]:
    with path.open(newline="", encoding="utf-8") as file:
        return _rows_of(file)


def _rows_of(file: Iterable[str]) -> list[tuple[str, int, float]]:
    rows: list[tuple[str, int, float]] = []
    for row in csv.DictReader(file):
        step = int(row.pop("step"))
        rows += [(lightning_table.column_tag(column), step, float(value))
                 for column, value in row.items() if value != ""]
    return rows


def _json_or_str(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_crash(run: RunInfo) -> str | None:
    """Why the run ended by a crash (its ``status`` file's ``crashed: <reason>``); ``None``
    when it did not (running, finished, or no run). Argument as for ``read_rows``."""
    return status_of(run_dir(run)).crash()
