"""Images, histograms and text as Trackio's own media types, and their read-back.

Written through ``Run.log`` as ``trackio.Image`` (a PNG file under
``<trackio dir>/media/<project>/<run>/<step>/``, RGBA, with the caption), ``trackio.Histogram``
(``np_histogram=(counts, edges)``: the bins the core's ``Histogram.binned`` made) and
``trackio.Markdown`` (the text), one metrics row per step, so the dashboard shows each at the
caller's step. Trackio applies its tag renames (``RESERVED_TAGS``) to media tags as to scalars.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Sequence
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, MediaItem, Text

from . import _compat

#: What this plugin stores: every media kind the core knows.
MEDIA_KINDS = frozenset({"image", "histogram", "text"})
#: Trackio's ``_type`` of each stored media value.
TYPES = {"image": "trackio.image", "histogram": "trackio.histogram", "text": "trackio.markdown"}


def write_media(run: Any, items: Sequence[MediaItem]) -> None:
    """``run.log(row, step=step)`` (a ``trackio.Run``) per run of items sharing a step, each
    value converted to Trackio's type; Trackio writes image files during the call.

    Raises:
        RuntimeError: ``run`` is ``None`` (the backend was closed).
    """
    import trackio

    if run is None:
        raise RuntimeError("trackio: monitor_write_media after monitor_close")
    log = run.log
    row: dict[str, Any] = {}
    step = None
    for item in items:
        if row and (item.step != step or item.tag in row):
            _compat.log_renaming(log, row, step)
            row = {}
        step = item.step
        value = item.value
        if isinstance(value, Image):
            pixels = value.array
            row[item.tag] = trackio.Image(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels,
                                          caption=value.caption)
        elif isinstance(value, Histogram):
            row[item.tag] = trackio.Histogram(np_histogram=value.binned())
        else:
            row[item.tag] = trackio.Markdown(value.text)
    if row:
        _compat.log_renaming(log, row, step)


def read_media(run: RunInfo) -> list[tuple[str, int, Image | Histogram | Text]]:
    """Read a run's images, histograms and text back from Trackio's database and media files.

    Args:
        run: as for ``read_rows`` (``Monitor.run``); the latest run of that name is read.

    Returns:
        ``[(tag, step, value), ...]`` in storage order (rows as Trackio stored them, tags
        within a row as logged; tag renames reversed): ``value`` an ``Image`` (``array``: the
        stored PNG decoded, ``uint8`` ``(H, W, 4)`` RGBA as Trackio saves it; ``caption``), a
        ``Histogram`` (``edges``, ``counts``) or a ``Text``. ``[]`` when there is no such run.

    Raises:
        FileNotFoundError: an image row names a file that is not there.
    """
    import numpy as np
    from PIL import Image as PILImage
    from trackio import utils

    from .folder import trackio_dir
    from .reader import _database, _latest_run_id, original_tag, stored_name

    db = _database(run)
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = _latest_run_id(conn, stored_name(run))
        stored = [] if run_id is None else conn.execute(
            "SELECT step, metrics FROM metrics WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
    media_dir = trackio_dir(run.log_dir) / "media"
    found: list[tuple[str, int, Image | Histogram | Text]] = []
    for step, blob in stored:
        if isinstance(step, bytes):  # a numpy integer step, stored by SQLite as a BLOB
            step = int.from_bytes(step, sys.byteorder, signed=True)
        for key, value in utils.deserialize_values(json.loads(blob)).items():
            kind = value.get("_type") if isinstance(value, dict) else None
            if kind == TYPES["image"]:
                with PILImage.open(media_dir / value["file_path"]) as picture:
                    pixels = np.asarray(picture)
                found.append((original_tag(key), step, Image(
                    pixels.reshape(*pixels.shape[:2], -1), caption=value.get("caption"))))
            elif kind == TYPES["histogram"]:
                found.append((original_tag(key), step, Histogram(
                    edges=np.asarray(value["bins"], np.float64),
                    counts=np.asarray(value["values"], np.float64))))
            elif kind == TYPES["text"]:
                found.append((original_tag(key), step, Text(value["_value"])))
    return found
