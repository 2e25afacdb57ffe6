"""Lightning's ``CSVLogger`` layout: one wide ``metrics.csv`` and ``hparams.yaml``.

What ``lightning.fabric.loggers.csv_logs._ExperimentWriter`` writes, byte for byte:

* a header of every column seen so far, sorted (``step`` among them), and one row per
  ``log_metrics`` call (here: one per step of a batch, ``core_monitor.events.rows_by_step``),
  written by ``csv.DictWriter`` (``\\r\\n`` line ends, an empty cell for a column the row lacks,
  a float as ``repr``, the step as an int);
* rows are buffered and written at a save (here: ``monitor_flush``); when a save brings a new
  column and the file exists, the file is rewritten whole with the new header first (here:
  through a temporary file renamed over it, so a crash never leaves half a table);
* ``hparams.yaml``: the hyperparameters as ``yaml.dump`` writes them (Lightning's
  ``save_hparams_to_yaml``).

One difference, where Lightning loses data: a tag named ``step`` would be overwritten by the
step column there; here it is the column ``\\step`` (a tag starting with ``\\`` gets one more),
which ``column_tag`` reads back.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .storage import replace_durably, sync_folder

METRICS = "metrics.csv"
HPARAMS = "hparams.yaml"
#: Prefix of a column whose tag is ``step`` or starts with this prefix itself.
ESCAPE = "\\"


def tag_column(tag: str) -> str:
    """The column of ``tag``: the tag itself, except ``step`` -> ``\\step`` (and a tag that
    starts with ``\\`` gets one more)."""
    return ESCAPE + tag if tag == "step" or tag.startswith(ESCAPE) else tag


def column_tag(column: str) -> str:
    """The tag of a column (``tag_column`` reversed)."""
    return column[len(ESCAPE):] if column.startswith(ESCAPE) else column


class LightningTable:
    """The run's ``metrics.csv``, appended to at each ``save``.

    Args:
        folder: the run's folder (created by the caller).
        fsync: ``fsync`` the file at every ``save`` (durable after ``monitor_flush``).
    """

    def __init__(self, folder: Path, *, fsync: bool) -> None:
        self.path = folder / METRICS
        self._fsync = fsync
        self._rows: list[dict[str, Any]] = []
        #: The columns of the file's header, sorted as Lightning sorts them.
        self.keys: list[str] = header_of(self.path)

    def add(self, step: int, row: Mapping[str, float]) -> None:
        """Buffer one row (``log_metrics(row, step)``)."""
        self._rows.append({**{tag_column(tag): v for tag, v in row.items()}, "step": step})

    def save(self) -> None:
        """Write the buffered rows (rewriting the file first when a column is new)."""
        if not self._rows:
            return
        seen = set().union(*self._rows)
        new = seen - set(self.keys)
        exists = self.path.exists()
        if new:
            self.keys = sorted([*self.keys, *new])
            if exists:
                self._rewrite()
        with self.path.open("a" if exists else "w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=self.keys)
            if not exists:
                writer.writeheader()
            writer.writerows(self._rows)
            if self._fsync:
                file.flush()
                os.fsync(file.fileno())
        if not exists:
            sync_folder(self.path.parent)
        self._rows = []

    def _rewrite(self) -> None:
        with self.path.open(newline="", encoding="utf-8") as file:
            old = list(csv.DictReader(file))
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.keys)
        writer.writeheader()
        writer.writerows(old)
        replace_durably(self.path, text.getvalue())


def header_of(path: Path) -> list[str]:
    """The header of an existing ``metrics.csv`` (a resumed run), else ``[]``."""
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as file:
        return next(csv.reader(file), [])


def write_hparams(folder: Path, config: Mapping[str, Any]) -> None:
    """Replace ``hparams.yaml`` with ``config`` as Lightning writes it (``yaml.dump``)."""
    import yaml  # here: importing the plugin imports none of its requirements

    replace_durably(folder / HPARAMS, yaml.dump(dict(config)))
