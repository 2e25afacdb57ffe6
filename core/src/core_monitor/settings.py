"""Monitor settings: the keyword names, the per-backend options rule, and the settings-file reader.

``Monitor(backends, *, project, ..., **backend_options)`` and ``Monitor.from_config(file)`` take
the same settings; the rules they share live here once:

* ``MONITOR_KEYWORDS``: the keywords that are not backend options; ``check_keywords`` checks
  their types;
* ``check_unselected``: every other key must name a selected backend (its options);
* ``load_monitor_config``: the TOML/JSON file (or mapping) format, read into ``Monitor``
  keyword arguments.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: ``Monitor`` keyword arguments besides ``backends``; any other keyword names a backend.
MONITOR_KEYWORDS = ("project", "name", "config", "log_dir", "strict", "rank_zero_only",
                    "dispatch", "queue_size", "on_full")
#: ``Monitor(dispatch=...)`` values: worker threads (default), or on the caller's thread.
DISPATCH_MODES = ("background", "sync")
#: Top-level keys of a settings file (or mapping), besides one section per selected backend.
FILE_KEYS = ("backends", *MONITOR_KEYWORDS)


def check_keywords(
    backends: Sequence[str | type] | str | type, project: Any, name: Any, strict: Any,
    rank_zero_only: Any,
) -> list[str | type]:
    """Check ``Monitor``'s own arguments by type; return ``backends`` as a list.

    Raises:
        ConfigError: no backend selected; ``project`` not a non-empty ``str``; ``name`` neither
            ``None`` nor a non-empty ``str``; ``strict`` or ``rank_zero_only`` not a ``bool``.
    """
    if isinstance(backends, (str, type)):
        backends = [backends]
    if not backends:
        raise ConfigError(
            "no backend selected: pass at least one name, e.g. Monitor(['trackio'], ...); "
            "`monitors list` shows the installed ones"
        )
    if not isinstance(project, str) or not project:
        raise ConfigError(f"project={project!r} must be a non-empty str")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"name={name!r} must be a non-empty str, or None for a made-up one")
    for flag, value in (("strict", strict), ("rank_zero_only", rank_zero_only)):
        if not isinstance(value, bool):
            raise ConfigError(f"{flag}={value!r} must be True or False (a bool, not "
                              f"{type(value).__name__})")
    return list(backends)


def check_dispatch(dispatch: Any, queue_size: Any, on_full: Any) -> None:
    """Check ``Monitor``'s ``dispatch``, ``queue_size`` and ``on_full`` arguments.

    Raises:
        ConfigError: ``dispatch`` not in ``DISPATCH_MODES``; ``queue_size`` not an ``int``
            >= 1; ``on_full`` neither ``"block"`` nor ``"drop"``.
    """
    if dispatch not in DISPATCH_MODES:
        raise ConfigError(f"dispatch={dispatch!r} must be 'background' (each backend written "
                          "by its own thread) or 'sync' (on the caller's thread)")
    if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
        raise ConfigError(f"queue_size={queue_size!r} must be an int >= 1 (log() calls each "
                          "backend's queue holds), e.g. queue_size=10000")
    if on_full not in ("block", "drop"):
        raise ConfigError(f"on_full={on_full!r} must be 'block' (wait for room, lose nothing) "
                          "or 'drop' (drop and count the newest call for that backend)")


def check_unselected(
    keys: Iterable[str], selected: Sequence[str], *, origin: str | None = None
) -> None:
    """Raise ``ConfigError`` for a key that is neither in ``FILE_KEYS`` nor a selected backend.

    Args:
        keys: ``Monitor``'s extra keyword names, or a settings file's top-level keys.
        selected: the selected backend names.
        origin: ``None`` for ``Monitor()`` keywords; else where the keys come from (a file's
            path, or ``"monitor config"``), which starts the message.

    Raises:
        ConfigError: naming the first key close to a known one ("did you mean 'log_dir'?",
            ``difflib``), else every unselected key, the selected backends and the accepted keys.
    """
    unknown = [key for key in keys if key not in FILE_KEYS and key not in selected]
    where = "Monitor() got" if origin is None else f"{origin}:"
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, FILE_KEYS, n=1, cutoff=0.7)
        if close:
            raise ConfigError(
                f"{where} an unknown keyword argument {key!r}; did you mean {close[0]!r}? "
                "(other keys are per-backend options, named after a selected backend)"
            )
    if unknown:
        sections = (f"[{b}]" if origin else f"{b}={{...}}" for b in selected)
        raise ConfigError(
            f"{where} options given for {sorted(unknown)}, which are not selected "
            f"(selected: {list(selected)}); select them or drop their options. Accepted keys: "
            f"{', '.join([*FILE_KEYS, *sections])} (a backend's options go under its name)"
        )


def load_monitor_config(source: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """Read a monitor configuration and return ``Monitor`` keyword arguments.

    The format (TOML shown; JSON has the same shape)::

        backends = ["trackio", "tensorboard"]   # required
        project = "digits"                      # required
        name = "run-1"                          # optional
        log_dir = "runs"                        # optional, relative to the current directory
        strict = false                          # optional
        rank_zero_only = true                   # optional
        [config]                                # optional: hyperparameters
        lr = 3e-4
        [tensorboard]                           # optional: options of one selected backend
        flush_secs = 5

    Args:
        source: a mapping of that shape, or the path of a ``.toml`` or ``.json`` file.

    Raises:
        ConfigError: the file is missing, cannot be parsed, or has an unknown key or a section
            for a backend that is not selected; the message names the key and the accepted ones.
    """
    if isinstance(source, Mapping):
        data: Mapping[str, Any] = source
        origin = "monitor config"
    else:
        path = Path(source)
        origin = str(path)
        data = _read_file(path)
    if "backends" not in data or "project" not in data:
        missing = [k for k in ("backends", "project") if k not in data]
        raise ConfigError(f"{origin}: missing required key(s) {missing}; add e.g. "
                          'backends = ["trackio"] and project = "my-project"')
    backends = data["backends"]
    if isinstance(backends, str) or not isinstance(backends, list) or not all(
        isinstance(b, str) for b in backends
    ):
        raise ConfigError(f"{origin}: backends={backends!r} must be a list of backend names, "
                          'e.g. backends = ["trackio", "tensorboard"]')
    check_unselected(data, backends, origin=origin)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in FILE_KEYS:
            kwargs[key] = value
        elif not isinstance(value, Mapping):
            raise ConfigError(f"{origin}: [{key}] must be a table of {key}'s options, "
                              f"not {value!r}")
        else:
            kwargs[key] = dict(value)
    return kwargs


def _read_file(path: Path) -> Mapping[str, Any]:
    """The top-level table of the ``.toml`` or ``.json`` file at ``path``.

    Raises:
        ConfigError: another suffix, an unreadable file, a syntax error, or a top level that is
            not a table/object; the message names the path.
    """
    if path.suffix not in (".toml", ".json"):
        raise ConfigError(f"monitor config {path} must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read monitor config {path}: {error}") from error
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot parse monitor config {path}: {error}") from error
    if not isinstance(data, Mapping):
        raise ConfigError(f"monitor config {path} must hold a table/object at the top level")
    return data
