"""DeepSpeed's ``csv_monitor`` layout: one CSV file per tag.

What ``deepspeed.monitor.csv_monitor.csvMonitor.write_events`` writes: for each tag, the file
``<tag with "/" and " " replaced by "_">.csv`` in ``<output_path>/<job_name>``, opened in
append mode (``open(fname, "a+")``, no ``newline=""``), its first row ``step,<the tag's last
"/" part>``, written once per file by this writer, then ``step,value`` per event, by
``csv.writer`` (``\\r\\n`` line ends). DeepSpeed's ``update_config`` writes the config as
``deepspeed_config.csv``; here the config is ``deepspeed_config.csv`` too, one ``key,value``
row per key, replaced whole when it changes.

Two tags that differ only by ``/`` versus ``_`` share a file, as in DeepSpeed; ``tags.json``
(not written by DeepSpeed) maps each file back to the tag that created it, in the order the
files were created, for the reader.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from core_monitor import Event

from .storage import replace_durably, sync_folder

CONFIG = "deepspeed_config.csv"
TAGS = "tags.json"


def file_name(tag: str) -> str:
    """DeepSpeed's file name for ``tag``: ``"Train/Samples/lr"`` -> ``"Train_Samples_lr.csv"``."""
    return tag.replace("/", "_").replace(" ", "_") + ".csv"


def column(tag: str) -> str:
    """DeepSpeed's value column for ``tag``: its last ``/`` part."""
    return tag.split("/")[-1]


class PerTagFiles:
    """The run's per-tag files, kept open for appending.

    Args:
        folder: the run's folder (created by the caller).
        fsync: ``fsync`` every file at ``save`` (durable after ``monitor_flush``).
    """

    def __init__(self, folder: Path, *, fsync: bool) -> None:
        self.folder = folder
        self._fsync = fsync
        self._files: dict[str, TextIO] = {}
        self._tags: dict[str, str] = read_tags(folder)  # file name -> tag
        self._tags_changed = False

    def write(self, events: Sequence[Event]) -> None:
        for event in events:
            name = file_name(event.tag)
            file = self._files.get(name)
            if file is None:
                path = self.folder / name
                new = not path.exists()
                file = self._files[name] = path.open("a+", encoding="utf-8")
                if new:
                    csv.writer(file).writerow(["step", column(event.tag)])
                if name not in self._tags:
                    self._tags[name] = event.tag
                    self._tags_changed = True
            csv.writer(file).writerow([event.step, event.value])

    def save(self) -> None:
        for file in self._files.values():
            file.flush()
            if self._fsync:
                os.fsync(file.fileno())
        if self._tags_changed:
            replace_durably(self.folder / TAGS, json.dumps(self._tags))
            self._tags_changed = False
        elif self._files:
            sync_folder(self.folder)

    def close(self) -> None:
        self.save()
        for file in self._files.values():
            file.close()
        self._files = {}


def read_tags(folder: Path) -> dict[str, str]:
    """``tags.json``: file name -> tag, ``{}`` when absent."""
    path = folder / TAGS
    if not path.exists():
        return {}
    tags: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    return tags


def write_config(folder: Path, config: Mapping[str, Any]) -> None:
    """Replace ``deepspeed_config.csv``: one ``key,value`` row per key (JSON for non-str)."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    for key, value in config.items():
        writer.writerow([key, value if isinstance(value, str) else json.dumps(value)])
    replace_durably(folder / CONFIG, text.getvalue())
