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
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

#: Prefix of an escaped key (see the module docstring).
ESCAPE = "::"
#: Longest metric, param or tag key MLflow stores (``MAX_ENTITY_KEY_LENGTH``).
MAX_KEY_LENGTH = 250
#: Longest param value MLflow stores (``MAX_PARAM_VAL_LENGTH``); longer values are cut to it.
MAX_VALUE_LENGTH = 6000
#: Prefix of the run tags holding a config value that changed after it was stored as a param
#: (MLflow params cannot change once logged).
CONFIG_TAG_PREFIX = "mlflow_monitor.config."
#: MLflow stores +-inf as +-``sys.float_info.max``; the readers map those back to +-inf.
FLOAT_MAX = sys.float_info.max

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


def run_name(name: str, rank: int) -> str:
    """The MLflow run name of ``name`` on ``rank``: ``<name>`` on rank 0, else
    ``<name>-rank<rank>`` (as the Trackio and wandb backends name their runs)."""
    return name if rank == 0 else f"{name}-rank{rank}"


def local_store_uri(log_dir: str | os.PathLike[str]) -> str:
    """The local store a run under ``log_dir`` uses when no tracking URI is set:
    ``sqlite:///<log_dir>/mlflow/mlflow.db`` (``log_dir`` made absolute)."""
    return "sqlite:///" + (Path(log_dir) / "mlflow" / "mlflow.db").absolute().as_posix()


def sqlite_artifact_root(tracking_uri: str) -> str | None:
    """Where artifacts (images, text) of experiments this plugin creates in a SQLite store go:
    the folder ``artifacts`` beside the database file, e.g. ``<log_dir>/mlflow/artifacts`` for
    the local store. ``None`` (MLflow's own choice) for any other store: a tracking server
    decides itself. MLflow's default for a SQLite store would be ``./mlruns`` under the
    current directory."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = tracking_uri[len("sqlite:///") :].split("?", 1)[0]
    if database in ("", ":memory:"):
        return None
    return (Path(database).absolute().parent / "artifacts").as_posix()
