"""Buffering of ``MlflowMonitor``'s rows: one MLflow metric point per scalar, with a timestamp
made strictly increasing per tag, sent in ``log_batch`` requests (``delivery``) when the buffer
holds ``batch_size`` rows or its oldest row is older than ``flush_secs``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from core_monitor import Event

from .delivery import Delivery
from .storage import MAX_KEY_LENGTH, escape_key


class RowBuffer(Delivery):
    """The row buffer of ``MlflowMonitor`` (a base class; the backend sets its state).

    Uses ``_Metric`` (``mlflow.entities.Metric``), ``_keys`` (tag -> escaped key, ``None`` when
    too long), ``_last_ms`` (stored key -> last timestamp in milliseconds), ``_oldest``
    (``time.monotonic()`` seconds of the oldest buffered row) and ``flush_secs`` (seconds).
    """

    flush_secs: float
    _Metric: Any
    _keys: dict[str, str | None]
    _last_ms: dict[str, int]
    _oldest: float

    def _add_rows(self, events: Sequence[Event]) -> None:
        """Buffer one metric point per event; send when a threshold is reached.

        Raises:
            MlflowDeliveryError: sending failed (``delivery``).
            ValueError: a tag is too long once escaped; the other events are kept.
        """
        metric = self._Metric
        keys = self._keys
        last_ms = self._last_ms
        buffer = self._buffer
        if not buffer:
            self._oldest = time.monotonic()
        too_long = []
        for tag, value, step, wall_time in events:
            key = keys.get(tag, "")
            if key == "":
                key = keys[tag] = self._key_for(tag)
            if key is None:
                too_long.append(tag)
                continue
            ms = int(wall_time * 1000)
            previous = last_ms.get(key)
            if previous is not None and ms <= previous:
                ms = previous + 1
            last_ms[key] = ms
            buffer.append(metric(key, value, ms, step))
        if len(buffer) >= self.batch_size or (
            buffer and time.monotonic() - self._oldest >= self.flush_secs
        ):
            self._send()
        if too_long:
            self.undelivered += len(too_long)
            raise ValueError(
                f"mlflow: tag {too_long[0]!r:.80} is longer than MLflow's "
                f"{MAX_KEY_LENGTH}-character key limit once escaped; {len(too_long)} "
                "scalar(s) of this call were not stored in MLflow (the others were). Fix: "
                f"use tags of at most {MAX_KEY_LENGTH} characters"
            )

    def _key_for(self, tag: str) -> str | None:
        key = escape_key(tag)
        return key if len(key) <= MAX_KEY_LENGTH else None
