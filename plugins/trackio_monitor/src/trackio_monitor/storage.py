"""How the plugin names what it stores in Trackio's database: run names, tags, config keys,
media types, and where a run's database is. Imports no Trackio at module import.

The backend, the reader and the media writer all import this module, and it imports none of
them: naming lives here once, so writing and reading cannot drift apart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core_monitor import RunInfo

from . import _compat
from .folder import trackio_dir

#: What Trackio puts in front of a reserved tag (``_compat.RESERVED_TAGS``, and every tag
#: starting with it). Renaming is one-to-one (``"__x"`` becomes ``"____x"``), so every stored
#: key starting with it is a renamed tag.
RENAME_PREFIX = "__"
#: What the plugin puts in front of a config key starting with ``_``, which Trackio refuses
#: (it keeps ``_`` keys for itself: ``_Username``, ``_Created``, ``_Group``).
CONFIG_PREFIX = "config."
#: Trackio's ``_type`` of each stored media value, per media kind.
MEDIA_TYPES = {"image": "trackio.image", "histogram": "trackio.histogram",
               "text": "trackio.markdown"}
#: Folder under Trackio's folder that holds image files (``<media>/<project>/<run>/<step>/``).
MEDIA_SUBDIR = "media"


#: Title of the ERROR alert ``TrackioMonitor.monitor_crash`` records (its text: the reason).
CRASH_ALERT_TITLE = "training process died"


def original_tag(key: str) -> str:
    """Undo Trackio's rename of a tag: ``"__step"`` -> ``"step"``, ``"____x"`` -> ``"__x"``."""
    return key[len(RENAME_PREFIX):] if key.startswith(RENAME_PREFIX) else key


def trackio_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config as Trackio accepts it: Trackio refuses keys starting with ``_`` (its own
    ``_Username``, ``_Created``, ``_Group``), so such a key ``_k`` is stored as ``config._k``."""
    return {(CONFIG_PREFIX + key if key.startswith("_") else key): value
            for key, value in config.items()}


def original_config(stored: Mapping[str, Any]) -> dict[str, Any]:
    """Undo ``trackio_config`` and leave out Trackio's own ``_`` keys."""
    return {
        key[len(CONFIG_PREFIX):] if key.startswith(CONFIG_PREFIX + "_") else key: value
        for key, value in stored.items()
        if not key.startswith("_")
    }


def database(run: RunInfo) -> Path:
    """The project's database: ``trackio_dir(run.log_dir) / "<project>.db"`` (Trackio keeps
    only ``[A-Za-z0-9_-]`` of the project name for the file name). Imports Trackio."""
    return trackio_dir(run.log_dir) / _compat.sqlite_storage().get_project_db_filename(
        run.project)


def latest_run_id(conn: sqlite3.Connection, name: str) -> str | None:
    """The id of the most recently started run named ``name`` (as Trackio's dashboard picks
    one when several share the name), or ``None`` when there is none."""
    try:
        row = conn.execute(
            "SELECT run_id FROM metrics WHERE run_name = ? GROUP BY run_id "
            "ORDER BY MIN(id) DESC LIMIT 1",
            (name,),
        ).fetchone()
    except sqlite3.OperationalError:  # no metrics table: nothing was ever logged
        return None
    return None if row is None else row[0]
