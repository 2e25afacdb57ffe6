"""Read a run back from Trackio's own SQLite database and media files (tests, notebooks, the
demo).

SQL on Trackio's tables ``metrics`` and ``configs`` with Trackio's JSON value encoding (decoded
with ``trackio.utils.deserialize_values``), so it works while the run is open and whatever folder
Trackio currently points at. Names come from ``storage``, as the backend writes them.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, Text

from . import _compat
from .folder import trackio_dir
from .storage import (
    CRASH_ALERT_TITLE,
    MEDIA_SUBDIR,
    MEDIA_TYPES,
    database,
    latest_run_id,
    original_config,
    original_tag,
)

__all__ = ["count_rows", "earlier_run", "read_alerts", "read_config", "read_crash", "read_media",
           "read_rows"]


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """Read a run's scalars back from Trackio's database, in storage order.

    Reads ``trackio_dir(run.log_dir) / "<project>.db"``. When several runs of the project share
    the name (``resume="never"``, Trackio's default, starts a new run each time), the most
    recently started one is read, as Trackio's dashboard does.

    Args:
        run: the run as the core describes it (``Monitor.run``); ``project``, ``name``,
            ``log_dir`` (``None``: Trackio's own folder) and ``rank`` (a rank above 0 reads the
            run ``<name>-rank<rank>`` that rank wrote) are used.

    Returns:
        ``[(tag, step, value), ...]``: one entry per scalar, rows in the order Trackio stored
        them, tags within a row in the order they were logged. Trackio's tag renames are
        reversed (``"__step"`` is ``"step"`` again); NaN and +/-inf come back as floats.
        Non-numeric values written by other Trackio code (media, tables) are skipped.
        ``[]`` when the database or the run does not exist.
    """
    return [(original_tag(key), step, float(value))
            for step, row in _stored_rows(run) for key, value in row.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)]


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

    media_dir = trackio_dir(run.log_dir) / MEDIA_SUBDIR
    found: list[tuple[str, int, Image | Histogram | Text]] = []
    for step, row in _stored_rows(run):
        for key, value in row.items():
            kind = value.get("_type") if isinstance(value, dict) else None
            if kind == MEDIA_TYPES["image"]:
                with PILImage.open(media_dir / value["file_path"]) as picture:
                    pixels = np.asarray(picture)
                found.append((original_tag(key), step, Image(
                    pixels.reshape(*pixels.shape[:2], -1), caption=value.get("caption"))))
            elif kind == MEDIA_TYPES["histogram"]:
                found.append((original_tag(key), step, Histogram(
                    edges=np.asarray(value["bins"], np.float64),
                    counts=np.asarray(value["values"], np.float64))))
            elif kind == MEDIA_TYPES["text"]:
                found.append((original_tag(key), step, Text(value["_value"])))
    return found


def read_config(run: RunInfo) -> dict[str, Any]:
    """Return the config Trackio stored for the run (its ``configs`` table), ``{}`` if none yet.

    Trackio writes the config with the run's first row; ``Monitor.log_config`` merges later keys
    into it. Keys are as the caller gave them (``config._k`` is ``_k`` again); Trackio's own
    keys (``_Username``, ``_Created``, ``_Group``) are left out: Trackio's reader
    (``trackio.sqlite_storage.SQLiteStorage.get_run_config``) shows them. A user key that
    itself starts with ``config._`` reads back without that prefix. Argument as for
    ``read_rows``.
    """
    db = database(run)
    if not db.exists():
        return {}
    name = run.ranked_name
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = latest_run_id(conn, name)
        try:
            row = conn.execute(
                "SELECT config FROM configs WHERE run_id = ? OR (? IS NULL AND run_name = ?) "
                "ORDER BY id DESC LIMIT 1",
                (run_id, run_id, name),
            ).fetchone()
        except sqlite3.OperationalError:  # no configs table: nothing was ever logged
            return {}
    if row is None:
        return {}
    return original_config(_compat.utils().deserialize_values(json.loads(row[0])))


def read_alerts(run: RunInfo) -> list[tuple[str, str, str | None, int | None]]:
    """Return the Trackio alerts of the run (its ``alerts`` table), in the order stored.

    ``TrackioMonitor.monitor_crash`` records one after the training process died: level
    ``"error"``, title ``storage.CRASH_ALERT_TITLE``, text the reason. Alerts a script raised
    itself with ``trackio.alert`` on a run of that name are included.

    Args:
        run: as for ``read_rows`` (``Monitor.run``); the latest run of that name is read.

    Returns:
        ``[(level, title, text, step), ...]``: ``level`` one of ``"info"``, ``"warn"``,
        ``"error"``; ``text`` and ``step`` may be ``None``. ``[]`` when the database, its
        ``alerts`` table or the run does not exist.
    """
    db = database(run)
    if not db.exists():
        return []
    name = run.ranked_name
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(alerts)")}
        if not columns:
            return []
        run_id = latest_run_id(conn, name)
        if run_id is not None and "run_id" in columns:
            where, key = "run_id = ?", run_id
        else:  # no row logged (or a database from before Trackio stored run ids)
            where, key = "run_name = ?", name
        stored = conn.execute(
            f"SELECT level, title, text, step FROM alerts WHERE {where} ORDER BY id", (key,)
        ).fetchall()
    return [(level, title, text, None if step is None else _step(step))
            for level, title, text, step in stored]


def count_rows(db: Path, run_id: str) -> int:
    """How many rows (steps logged) of the run ``run_id`` the database ``db`` holds; 0 when
    the database or its ``metrics`` table does not exist yet.

    Raises:
        sqlite3.Error: the database cannot be read.
    """
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        try:
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM metrics WHERE run_id = ?", (run_id,)
            ).fetchone()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return 0
            raise
    return int(count)


def earlier_run(db: Path, name: str) -> tuple[str | None, int | None]:
    """``(run id, largest step)`` of the latest run named ``name`` in the database ``db``
    (what ``resume`` continues); ``(None, None)`` when the database or the run does not exist.
    Reading never creates the database.

    Raises:
        sqlite3.Error: the database cannot be read.
    """
    if not db.exists():
        return None, None
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        run_id = latest_run_id(conn, name)
        steps = [] if run_id is None else [
            _step(step) for (step,) in conn.execute(
                "SELECT step FROM metrics WHERE run_id = ?", (run_id,))]
    return run_id, max(steps, default=None)


def _step(step: Any) -> int:
    if isinstance(step, bytes):  # a numpy integer step, stored by SQLite as a BLOB
        return int.from_bytes(step, sys.byteorder, signed=True)
    return int(step)


def _stored_rows(run: RunInfo) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(step, {key: decoded value})`` per metrics row of the latest run of that name, in
    storage order; nothing when the database or the run does not exist."""
    db = database(run)
    if not db.exists():
        return
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = latest_run_id(conn, run.ranked_name)
        stored = [] if run_id is None else conn.execute(
            "SELECT step, metrics FROM metrics WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
    deserialize = _compat.utils().deserialize_values
    for step, blob in stored:
        if isinstance(step, bytes):  # a numpy integer step, stored by SQLite as a BLOB
            step = int.from_bytes(step, sys.byteorder, signed=True)
        yield step, deserialize(json.loads(blob))


def read_crash(run: RunInfo) -> str | None:
    """Why the run ended by a crash: the text of the ``error`` alert titled
    ``storage.CRASH_ALERT_TITLE`` that ``monitor_crash`` raised (Trackio has no run status);
    ``None`` when there is none. Argument as for ``read_rows``."""
    marks = [text or "" for level, title, text, _ in read_alerts(run)
             if level == "error" and title == CRASH_ALERT_TITLE]
    return marks[-1] if marks else None
