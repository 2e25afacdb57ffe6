"""The Lightning layout in a remote folder (an fsspec URL: ``s3://bucket/runs/exp/v0``,
``memory://runs``), as Lightning's ``CSVLogger`` writes there: through ``fsspec`` (a Lightning
dependency; for this plugin the optional dependency ``csv-monitor[remote]``).

What differs from a local folder: no ``fsync`` and no temporary file renamed over the old one
(object stores have neither), so ``hparams.yaml``, ``status`` and a ``metrics.csv`` rewritten
for a new column are written in place, as ``CSVLogger`` writes them.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from typing import Any

from core_monitor import ConfigError

from . import lightning_table
from .storage import STATUS

#: A folder given as a URL: a scheme (``s3``, ``gs``, ``memory``, ``file``, ...) and ``://``.
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(folder: str) -> bool:
    """Whether ``folder`` is a URL (fsspec's ``protocol://path``), not a local path."""
    return bool(URL.match(folder))


def filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path in it.

    Raises:
        ConfigError: fsspec is not installed, or knows no filesystem for the URL's scheme
            (the message names the URL and the package to install).
    """
    try:
        import fsspec
    except ImportError:
        raise ConfigError(f"csv: run folder {url!r} is a URL, which the csv backend writes "
                          "through fsspec: pip install 'csv-monitor[remote]' (or fsspec), or "
                          "give a local folder") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as error:
        raise ConfigError(f"csv: fsspec cannot write to {url!r} ({error}); install the "
                          "filesystem's package (e.g. s3fs for s3://), or give a local "
                          "folder") from None


class RemoteFolder:
    """A run folder on an fsspec filesystem, with what the csv backend does in a local one.

    Args:
        url: the run's folder, an fsspec URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.path = filesystem(self.url)

    def file(self, name: str) -> str:
        """The path of the file ``name`` in the folder (on the filesystem)."""
        return f"{self.path.rstrip('/')}/{name}"

    def exists(self, name: str) -> bool:
        return bool(self.fs.isfile(self.file(name)))

    def is_empty(self) -> bool:
        return not (self.fs.exists(self.path) and self.fs.ls(self.path))

    def read_text(self, name: str) -> str:
        with self.fs.open(self.file(name), "r", newline="", encoding="utf-8") as file:
            return str(file.read())

    def write_text(self, name: str, text: str) -> None:
        with self.fs.open(self.file(name), "w", newline="", encoding="utf-8") as file:
            file.write(text)

    def remove(self, name: str) -> None:
        if self.exists(name):
            self.fs.rm_file(self.file(name))

    def make(self) -> None:
        self.fs.makedirs(self.path, exist_ok=True)

    def write_status(self, text: str) -> None:
        self.write_text(STATUS, text + "\n")

    def read_status(self) -> str | None:
        return self.read_text(STATUS).strip() if self.exists(STATUS) else None


class RemoteTable:
    """``metrics.csv`` in a ``RemoteFolder``, written as ``lightning_table.LightningTable``
    writes a local one (and as ``CSVLogger``'s ``_ExperimentWriter`` writes through fsspec)."""

    def __init__(self, folder: RemoteFolder) -> None:
        self.folder = folder
        self._rows: list[dict[str, Any]] = []
        self.keys: list[str] = (next(csv.reader(io.StringIO(folder.read_text(
            lightning_table.METRICS))), []) if folder.exists(lightning_table.METRICS) else [])

    def add(self, step: int, row: Mapping[str, float]) -> None:
        """Buffer one row (``log_metrics(row, step)``)."""
        self._rows.append({**{lightning_table.tag_column(t): v for t, v in row.items()},
                           "step": step})

    def save(self) -> None:
        """Write the buffered rows (the whole file again when a column is new)."""
        if not self._rows:
            return
        name = lightning_table.METRICS
        new = set().union(*self._rows) - set(self.keys)
        exists = self.folder.exists(name)
        old: list[dict[str, str]] = []
        if new:
            self.keys = sorted([*self.keys, *new])
            if exists:
                old = list(csv.DictReader(io.StringIO(self.folder.read_text(name), newline="")))
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.keys)
        if new or not exists:
            writer.writeheader()
            writer.writerows(old)
        writer.writerows(self._rows)
        mode = "a" if exists and not new else "w"
        with self.folder.fs.open(self.folder.file(name), mode, newline="",
                                 encoding="utf-8") as file:
            file.write(text.getvalue())
        self._rows = []


def write_hparams(folder: RemoteFolder, config: Mapping[str, Any]) -> None:
    """``hparams.yaml`` as ``lightning_table.write_hparams`` writes it, in place."""
    import yaml

    folder.write_text(lightning_table.HPARAMS, yaml.dump(dict(config)))
