"""Read a run back from Trackio's own SQLite database (tests, notebooks, the demo).

SQL on Trackio's tables ``metrics`` and ``configs`` with Trackio's JSON value encoding (decoded
with ``trackio.utils.deserialize_values``), so it works while the run is open and whatever folder
Trackio currently points at. ``read_media`` (images, histograms, text) is defined in ``media``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from core_monitor import RunInfo

from .folder import trackio_dir
from .media import read_media

__all__ = ["CONFIG_PREFIX", "RENAME_PREFIX", "original_tag", "read_config", "read_media",
           "read_rows", "stored_name"]

#: What Trackio puts in front of a reserved tag. Renaming is one-to-one (``"__x"`` becomes
#: ``"____x"``), so every stored key starting with it is a renamed tag.
RENAME_PREFIX = "__"
#: What the plugin puts in front of a config key starting with ``_``, which Trackio refuses
#: (it keeps ``_`` keys for itself: ``_Username``, ``_Created``, ``_Group``).
CONFIG_PREFIX = "config."


def stored_name(run: RunInfo) -> str:
    """The Trackio run name: ``run.name``, or ``<name>-rank<rank>`` on a rank above 0."""
    return run.name if run.rank == 0 else f"{run.name}-rank{run.rank}"


def original_tag(key: str) -> str:
    """Undo Trackio's rename of a tag: ``"__step"`` -> ``"step"``, ``"____x"`` -> ``"__x"``."""
    return key[len(RENAME_PREFIX):] if key.startswith(RENAME_PREFIX) else key


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
    from trackio import utils

    db = _database(run)
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = _latest_run_id(conn, stored_name(run))
        if run_id is None:
            return []
        stored = conn.execute(
            "SELECT step, metrics FROM metrics WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
    rows: list[tuple[str, int, float]] = []
    for step, blob in stored:
        if isinstance(step, bytes):  # a numpy integer step, stored by SQLite as a BLOB
            step = int.from_bytes(step, sys.byteorder, signed=True)
        for key, value in utils.deserialize_values(json.loads(blob)).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append((original_tag(key), step, float(value)))
    return rows


def read_config(run: RunInfo) -> dict[str, Any]:
    """Return the config Trackio stored for the run (its ``configs`` table), ``{}`` if none yet.

    Trackio writes the config with the run's first row; ``Monitor.log_config`` merges later keys
    into it. Keys are as the caller gave them (``config._k`` is ``_k`` again); Trackio's own
    keys (``_Username``, ``_Created``, ``_Group``) are left out: Trackio's reader
    (``trackio.sqlite_storage.SQLiteStorage.get_run_config``) shows them. A user key that
    itself starts with ``config._`` reads back without that prefix. Argument as for
    ``read_rows``.
    """
    from trackio import utils

    db = _database(run)
    if not db.exists():
        return {}
    name = stored_name(run)
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        run_id = _latest_run_id(conn, name)
        try:
            row = conn.execute(
                "SELECT config FROM configs WHERE run_id = ? OR (? IS NULL AND run_name = ?) "
                "ORDER BY id DESC LIMIT 1",
                (run_id, run_id, name),
            ).fetchone()
        except sqlite3.OperationalError:  # no configs table: nothing was ever logged
            return {}
    stored = {} if row is None else utils.deserialize_values(json.loads(row[0]))
    return {
        key[len(CONFIG_PREFIX):] if key.startswith(CONFIG_PREFIX + "_") else key: value
        for key, value in stored.items()
        if not key.startswith("_")
    }


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


def _database(run: RunInfo) -> Path:
    from trackio.sqlite_storage import SQLiteStorage

    return trackio_dir(run.log_dir) / SQLiteStorage.get_project_db_filename(run.project)


def _latest_run_id(conn: sqlite3.Connection, name: str) -> str | None:
    try:
        row = conn.execute(
            "SELECT run_id FROM metrics WHERE run_name = ? GROUP BY run_id "
            "ORDER BY MIN(id) DESC LIMIT 1",
            (name,),
        ).fetchone()
    except sqlite3.OperationalError:  # no metrics table: nothing was ever logged
        return None
    return None if row is None else row[0]
