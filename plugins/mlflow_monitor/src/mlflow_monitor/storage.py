"""How a run's tags, config and location are written in MLflow's storage. Imports no SDK.

MLflow accepts a metric, param or run-tag key only when it matches ``^[/\\w.\\- :]*$`` (``\\w``
in Python's Unicode sense), is at most 250 characters, is not empty and does not change under
POSIX path normalisation (``a//b``, ``k/``, ``/x``, ``./x`` and names starting with ``..`` are
refused): ``mlflow.utils.validation``, applied by the client and by the tracking server. The
core accepts any non-empty tag, so keys MLflow would refuse are escaped, reversibly:

* a key MLflow accepts that does not start with ``ESCAPE`` (``"::"``) is stored as it is;
* any other key is stored as ``ESCAPE`` followed by the key with every character outside
  ``[\\w.\\- ]`` (so also ``:`` and ``/``) written as ``:<hex code point>:``. For example
  ``"loss 🔥"`` is stored as ``"::loss :1f525:"``, ``"a//b"`` as ``"::a:2f::2f:b"`` and
  ``"::x"`` as ``":::3a::3a:x"``.

The escaped form never contains ``/`` (so it is one path component) and starts with ``:``
(never ``.``), so MLflow accepts it whenever it is at most 250 characters long. ``unescape_key``
undoes it; the readers (``mlflow_monitor.read_rows``/``read_config``) apply it.

Media keys: ``log_image`` accepts only ``[A-Za-z0-9_\\-./ ]`` in a key (narrower than metric
keys: no ``:``, no letters outside ASCII), so media tags have their own escaping, built like the
scalar one with ``-`` in place of ``:``. A tag made of those characters that does not start with
``MEDIA_ESCAPE`` (``"--"``) is its own key; any other is ``"--"`` followed by the tag with every
character outside ``[A-Za-z0-9_./ ]`` written as ``-<hex code point>-``: ``"loss 🔥"`` ->
``"--loss -1f525-"``, ``"acc,top5"`` -> ``"--acc-2c-top5"``. Keys longer than ``MAX_MEDIA_KEY``
(150) characters are refused (the file name would pass the usual 255-byte limit). An image is
the artifact ``images/<key, "/" as "~">+step+<step>+timestamp+<ms>+<uuid>.png`` (MLflow's
naming), a text ``text/<key, "/" as "~">+step+<step>+timestamp+<ms>.md`` (``text_file``).

The run's name is ``RunInfo.ranked_name`` (``<name>-rank<k>`` on a rank k > 0). The backend,
the readers and the media writer all import this module, and it imports none of them.

A SQLite store is created, and its schema migrated, by the first ``MlflowClient`` of a process
that opens it; two processes doing so at once break MLflow's migrations (``store_lock``: the
file ``<database>.lock`` beside the database serialises it, ``_compat.open_client`` holds it).
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

#: Prefix of an escaped key (see the module docstring).
ESCAPE = "::"
#: Longest metric, param or tag key MLflow stores (``MAX_ENTITY_KEY_LENGTH``).
MAX_KEY_LENGTH = 250
#: Longest param value MLflow stores (``MAX_PARAM_VAL_LENGTH``); longer values are cut to it.
MAX_VALUE_LENGTH = 6000
#: Prefix of the run tags holding a config value that changed after it was stored as a param
#: (MLflow params cannot change once logged).
CONFIG_TAG_PREFIX = "mlflow_monitor.config."
#: The run tag holding why the run ended FAILED (``MlflowMonitor.monitor_crash``): what the
#: core's writer process saw of the training process's death.
CRASH_TAG = "mlflow_monitor.crash"
#: MLflow stores +-inf as +-``sys.float_info.max``; the readers map those back to +-inf.
FLOAT_MAX = sys.float_info.max

#: Prefix of an escaped media key.
MEDIA_ESCAPE = "--"
#: Longest media key: the file name MLflow makes of it adds up to about 103 characters.
MAX_MEDIA_KEY = 150
#: Artifact folders of images (MLflow's own) and of text (this plugin's).
IMAGE_DIR, TEXT_DIR = "images", "text"

_VALID = re.compile(r"[/\w.\- :]+")
_ESCAPED = re.compile(r"[^\w.\- ]")
_CODE_POINT = re.compile(r":([0-9a-f]{1,6}):")


def is_valid_key(key: str) -> bool:
    """Whether MLflow (client and server, on a POSIX system) accepts ``key`` as it is."""
    if not key or len(key) > MAX_KEY_LENGTH or not _VALID.fullmatch(key):
        return False
    norm = posixpath.normpath(key)
    return norm == key and norm != "." and not norm.startswith(("..", "/"))


def escape_key(tag: str) -> str:
    """Return the key ``tag`` is stored under in MLflow (see the module docstring).

    Args:
        tag: a metric tag or config key, any non-empty ``str``.

    Returns:
        ``tag`` itself when MLflow accepts it and it does not start with ``ESCAPE``, else its
        escaped form. The result may still be longer than ``MAX_KEY_LENGTH`` (250) characters;
        the caller checks that.
    """
    if is_valid_key(tag) and not tag.startswith(ESCAPE):
        return tag
    return ESCAPE + _ESCAPED.sub(lambda m: f":{ord(m[0]):x}:", tag)


def unescape_key(key: str) -> str:
    """Undo ``escape_key``: the tag a stored MLflow key stands for.

    A key that does not start with ``ESCAPE``, or is not a well-formed escaped key (a metric
    logged to the run by other code), is returned unchanged.
    """
    if not key.startswith(ESCAPE):
        return key
    body = key[len(ESCAPE) :]
    try:
        tag = _CODE_POINT.sub(lambda m: chr(int(m[1], 16)), body)
    except (ValueError, OverflowError):  # a code point past U+10FFFF
        return key
    return tag if escape_key(tag) == key else key


def restore_value(value: float) -> float:
    """A value read from MLflow as it was logged: +-``FLOAT_MAX`` (how MLflow stores +-inf)
    becomes +-inf. A finite value of exactly +-``FLOAT_MAX`` therefore reads back as +-inf."""
    if value == FLOAT_MAX:
        return math.inf
    if value == -FLOAT_MAX:
        return -math.inf
    return value


def param_value(value: Any) -> str:
    """The text an MLflow param holds for one JSON-safe config value.

    ``str`` as it is; ``bool``, ``int`` and ``float`` through ``str()`` (as
    ``mlflow.log_params`` does: ``"True"``, ``"3"``, ``"0.0003"``); anything else (``None``,
    lists) as JSON text (``"null"``, ``"[64, 64]"``), non-ASCII kept. Text longer than
    ``MAX_VALUE_LENGTH`` (6,000) characters is cut to its first 6,000 characters (MLflow's
    limit; MLflow would cut it the same way).
    """
    if isinstance(value, (str, bool, int, float)):
        text = str(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = str(value)
    return text[:MAX_VALUE_LENGTH]


def local_store_uri(log_dir: str | os.PathLike[str]) -> str:
    """The local store a run under ``log_dir`` uses when no tracking URI is set:
    ``sqlite:///<log_dir>/mlflow/mlflow.db`` (``log_dir`` made absolute, with ``%`` and ``?``
    percent-encoded: SQLAlchemy decodes the path and ends it at ``?``)."""
    path = (Path(log_dir) / "mlflow" / "mlflow.db").absolute().as_posix()
    return "sqlite:///" + path.replace("%", "%25").replace("?", "%3F")


def sqlite_artifact_root(tracking_uri: str) -> str | None:
    """Where artifacts (images, text) of experiments this plugin creates in a SQLite store go:
    the folder ``artifacts`` beside the database file, e.g. ``<log_dir>/mlflow/artifacts`` for
    the local store, as a ``file://`` URI. ``None`` (MLflow's own choice) for any other store:
    a tracking server decides itself. MLflow's default for a SQLite store would be ``./mlruns``
    under the current directory."""
    database = sqlite_database(tracking_uri)
    # A file URI, percent-encoded: MLflow decodes an artifact location as a URI.
    return None if database is None else (database.parent / "artifacts").as_uri()


def sqlite_database(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///<path>`` tracking URI as SQLAlchemy opens it: the
    path percent-decoded and made absolute (a relative one is relative to the current
    directory); ``None`` for any other URI, an in-memory database (``sqlite://``,
    ``sqlite:///:memory:``) or a SQLite URI filename (``sqlite:///file:...?uri=true``)."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database, _, query = tracking_uri[len("sqlite:///") :].partition("?")
    database = unquote(database)
    if database in ("", ":memory:") or "uri=true" in query.lower():
        return None
    return Path(database).absolute()


@contextmanager
def store_lock(database: Path) -> Iterator[bool]:
    """Hold an exclusive lock, between processes, on the SQLite store ``database``.

    The lock is ``fcntl.flock`` on the file ``<database>.lock`` (created beside the database,
    with the database's folder, when missing; never removed): MLflow creates a store's tables
    and runs its Alembic migrations in the first ``MlflowClient`` of each process that finds
    them missing, and two processes doing so at once fail ("Online migration expected to match
    one row ... in 'alembic_version'; 0 found", "duplicate column name"). Blocks, without a
    time limit, while another process holds it. Threads of one process exclude each other too
    (each ``with`` opens the file anew).

    Args:
        database: the database file (``sqlite_database``).

    Yields:
        ``True`` while the lock is held; ``False`` when it could not be taken (a folder this
        process cannot write, a file system without ``flock``): the block then runs unlocked,
        as it would without this lock, rather than failing.
    """
    import fcntl  # POSIX only: the plugin supports Linux

    try:
        database.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(f"{database}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        descriptor = -1
    if descriptor < 0:
        yield False
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            locked = True
        except OSError:  # e.g. ENOLCK: an NFS mount without locking
            locked = False
        yield locked
    finally:
        os.close(descriptor)  # releases the lock


_MEDIA_KEY = re.compile(r"[A-Za-z0-9_\-./ ]+")
_MEDIA_ESCAPED = re.compile(r"[^A-Za-z0-9_./ ]")
_MEDIA_CODE_POINT = re.compile(r"-([0-9a-f]{1,6})-")
_MEDIA_FILE = re.compile(r"(?P<key>[^+]+)\+step\+(?P<step>\d+)\+timestamp\+(?P<ms>\d+)"
                         r"(?:\+[0-9a-f-]+)?\.(?P<ext>png|md)")


def media_key(tag: str) -> str:
    """The key ``tag`` is stored under as an MLflow image or text (see the module docstring)."""
    if _MEDIA_KEY.fullmatch(tag) and not tag.startswith(MEDIA_ESCAPE):
        return tag
    return MEDIA_ESCAPE + _MEDIA_ESCAPED.sub(lambda m: f"-{ord(m[0]):x}-", tag)


def media_tag(key: str) -> str:
    """Undo ``media_key``; a key that is not a well-formed escaped key is returned unchanged."""
    if not key.startswith(MEDIA_ESCAPE):
        return key
    try:
        tag = _MEDIA_CODE_POINT.sub(lambda m: chr(int(m[1], 16)), key[len(MEDIA_ESCAPE) :])
    except (ValueError, OverflowError):  # a code point past U+10FFFF
        return key
    return tag if media_key(tag) == key else key


def text_file(key: str, step: int, ms: int) -> str:
    """The file name (in ``TEXT_DIR``) of a text stored under the media key ``key`` at ``step``
    and timestamp ``ms``, named the way MLflow names its image files."""
    return f"{key.replace('/', '~')}+step+{step}+timestamp+{ms}.md"


def parse_media_file(name: str) -> tuple[str, int, int, str] | None:
    """``(tag, step, ms, ext)`` of an image or text artifact's file name (``ext`` ``"png"`` or
    ``"md"``), the tag unescaped; ``None`` for a file not named as this plugin and MLflow name
    them (``MLflow``'s ``+compressed.webp`` copies, other files)."""
    match = _MEDIA_FILE.fullmatch(name)
    if match is None:
        return None
    return (media_tag(match["key"].replace("~", "/")), int(match["step"]), int(match["ms"]),
            match["ext"])
