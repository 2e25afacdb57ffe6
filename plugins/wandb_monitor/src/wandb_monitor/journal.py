"""What the plugin sent to wandb's service that may not be in the run's ``.wandb`` file yet.

wandb's service (``wandb-core``, a Go program) holds the records it was sent in memory until
it writes them, in whole 32 KiB blocks, and exits at once on SIGTERM: when a scheduler signals
every process of a job (Slurm's preemption, ``scancel``, a time limit), or the service dies
another way, those records are lost. So the backend keeps each call it sent in a ``Journal``
until the call is known to be on disk, and after the service died starts a new one, continues
the run (``resume="allow"``) and sends again what the file lacks (``WandbMonitor``).

A call is known to be on disk once a marker sent after it is in the file
(``_compat.publish_marker``): ``flush()`` sends one and waits for it; and whenever the calls
kept weigh ``LIMIT`` bytes (estimated), one is sent without waiting, and checked for as
later calls come. A value is matched to the file by its step metric, ``_timestamp`` (the
``log`` call's wall time) and its key in the row, read back from the file past the last
marker found: scalars and media logged in one ``log()`` reach the backend as two calls of the
same step and wall time, so the key tells the scalar row from the media row.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core_monitor.media import Histogram, Image, MediaItem

from . import _compat
from .storage import escaped

#: Bytes (estimated: 64 per scalar, an array's ``nbytes``, a text's length) of calls kept before
#: a marker is sent to learn which of them are on disk. The calls take about 2-3 times as
#: much memory.
LIMIT = 8 * 2**20
#: Bytes reread before the last read end when looking for a marker (a token is 32 bytes).
_OVERLAP = 64

#: A value's identity in the file: (the step metric's value, ``_timestamp``, its key in the row).
Key = tuple[Any, Any, str]
#: Keys of a history row that are not values logged by the plugin (wandb's own, and the time).
_NOT_VALUES = ("_timestamp", "_step", "_runtime", "_wandb")


class Journal:
    """The calls sent to wandb's service since the last marker found in the run's file.

    Args:
        step_metric: the name of the metric holding the caller's step in every row.
        limit: bytes (estimated) kept before a marker is sent; ``None``: ``LIMIT``.
    """

    def __init__(self, step_metric: str, limit: int | None = None) -> None:
        self.step_metric = step_metric
        self.limit = LIMIT if limit is None else limit
        #: ``(kind, payload, bytes)``: ``("rows", [row dict, ...])`` as given to ``Run.log``,
        #: or ``("media", [MediaItem, ...])``, oldest first.
        self.entries: deque[tuple[str, Any, int]] = deque()
        self.size = 0
        #: Where in the file the rows of the kept calls may begin (a marker found, or the file's
        #: size when the last marker that was found was sent).
        self.durable = 0
        #: ``(token, entries before it, file size when sent, bytes searched up to)``.
        self._marker: tuple[str, int, int, int] | None = None

    def add_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Keep the rows of one ``monitor_write`` call (each a dict as given to ``Run.log``)."""
        self._add("rows", [dict(row) for row in rows], 64 * sum(len(row) for row in rows))

    def add_media(self, items: Sequence[MediaItem]) -> None:
        """Keep the items of one ``monitor_write_media`` call."""
        size = 0
        for item in items:
            value = item.value
            if isinstance(value, Image):
                size += value.array.nbytes
            elif isinstance(value, Histogram):
                size += value.binned()[0].nbytes * 2
            else:
                size += len(value.text)
        self._add("media", list(items), size + 64)

    def _add(self, kind: str, payload: Any, size: int) -> None:
        self.entries.append((kind, payload, size))
        self.size += size

    def written(self, file_size: int) -> None:
        """Every call kept reached the file (a marker sent after them was found in it, the
        file being ``file_size`` bytes when it was sent)."""
        self.entries.clear()
        self.size = 0
        self.durable = file_size
        self._marker = None

    def watch(self, run: Any, file: Path) -> None:
        """After a call was sent: drop the calls a marker found in ``file`` shows are on disk,
        and send a marker when the calls kept weigh ``limit`` bytes and none is on its way.

        Raises:
            ConnectionError: wandb's service is gone (the marker could not be sent).
        """
        if self._marker is not None:
            token, count, sent_at, searched = self._marker
            try:
                size = file.stat().st_size
            except OSError:
                return
            if size <= searched:
                return
            if _compat.marker_in(file, max(sent_at, searched - _OVERLAP), token) is None:
                self._marker = (token, count, sent_at, size)
                return
            for _ in range(count):
                _, _, dropped = self.entries.popleft()
                self.size -= dropped
            self.durable = sent_at
            self._marker = None
        if self.size >= self.limit:
            try:
                size = file.stat().st_size
            except OSError:
                size = 0
            self._marker = (_compat.publish_marker(run), len(self.entries), size, size)

    def stored_keys(self, file: Path | None) -> set[Key]:
        """The values of ``file`` (the dead service's run file) past ``durable``, as
        ``Key``\\s."""
        keys: set[Key] = set()
        if file is None or not file.exists():
            return keys
        for record in _compat.read_records(file, self.durable):
            if not record.HasField("history"):
                continue
            # A media value is stored as nested keys (``img._type``, ``img.path``, ...): the
            # first names the value.
            values = {item.key or item.nested_key[0]: item.value_json
                      for item in record.history.item}
            if self.step_metric in values and "_timestamp" in values:
                step = json.loads(values[self.step_metric])
                wall_time = json.loads(values["_timestamp"])
                keys.update((step, wall_time, key) for key in values
                            if key != self.step_metric and key not in _NOT_VALUES)
        return keys

    def missing(self, stored: set[Key]) -> list[tuple[str, list[Any]]]:
        """The calls kept, each reduced to what ``stored`` lacks (rows with a value, or media
        items, whose ``Key`` is not in it), in order; calls wholly stored are left out."""
        metric = self.step_metric
        calls = []
        for kind, payload, _ in self.entries:
            if kind == "rows":
                left = [row for row in payload
                        if any((row[metric], row["_timestamp"], key) not in stored
                               for key in row if key != metric and key not in _NOT_VALUES)]
            else:
                left = [item for item in payload
                        if (item.step, item.wall_time, escaped(item.tag, metric)) not in stored]
            if left:
                calls.append((kind, left))
        return calls
