"""Monitor settings: selection, the keyword names, per-backend options, the settings-file reader.

``Monitor(backends, *, project, ..., **backend_options)``, ``Monitor.from_config(file)`` and the
environment take the same settings; the rules they share live here once:

* ``chosen_backends``: code (``Monitor(backends)``, ``from_config(..., backends=...)``) wins
  over the file (``backends``, sections' ``enabled``), which wins over ``EXPERIMENT_MONITORS``;
  ``EXPERIMENT_MONITORS_DISABLE`` applies last, to all three (``core_monitor.discovery``);
* ``check_backend_keys``: any other key names a backend: a selected one's options are used, an
  installed unselected one's ignored (never constructed), any other key is an error;
* ``check_options``: a selected backend's options against its class's signature;
* ``backend_sections`` (DeepSpeed's ``{"wandb": {"enabled": true}}``), ``load_monitor_config``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from . import discovery
from ._suggest import closest
from .errors import ConfigError, UnknownBackendError
from .options import check_option_types

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: ``Monitor`` keyword arguments besides ``backends``; any other keyword names a backend.
MONITOR_KEYWORDS = ("project", "name", "config", "log_dir", "strict", "rank_zero_only",
                    "dispatch", "queue_size", "on_full", "resume", "system_metrics", "journal",
                    "journal_dir", "keep_journal", "budget")
#: Top-level keys of a settings file (or mapping), besides one section per backend.
FILE_KEYS = ("backends", *MONITOR_KEYWORDS)
#: Comma-separated backends to select when neither code nor file does, e.g. ``trackio,wandb``.
SELECT_ENV = "EXPERIMENT_MONITORS"
#: The key of a backend's section that selects (``true``) or deselects (``false``) it.
ENABLED = "enabled"


def chosen_backends(
    code: Sequence[str | type] | str | type | None,
    file: Sequence[str] | None = None,
    deselected: Collection[str] = (),
) -> list[str | type]:
    """Apply the selection precedence: ``code`` if not ``None``, else ``file`` if not ``None``,
    else the names in ``EXPERIMENT_MONITORS`` (read now) except ``deselected`` (a file's
    sections with ``enabled = false``). One name or class may be given alone.

    Raises:
        UnknownBackendError: ``EXPERIMENT_MONITORS`` names a backend that is not installed
            (the message starts with the variable).
    """
    if code is not None:
        return [code] if isinstance(code, (str, type)) else list(code)
    if file is not None:
        return list(file)
    raw = os.environ.get(SELECT_ENV, "")
    names = [part.strip() for part in raw.split(",") if part.strip()]
    installed = discovery.installed_backends()
    for name in (name for name in names if name not in installed):
        error = UnknownBackendError(name, list(installed), closest(name, installed))
        error.args = (f"{SELECT_ENV}={raw!r}: {error.args[0]}",)
        raise error
    return [name for name in names if name not in deselected]


def check_keywords(
    backends: Sequence[str | type] | str | type | None, project: Any, name: Any, strict: Any,
    rank_zero_only: Any,
) -> list[str | type]:
    """Check ``Monitor``'s own arguments by type; return the selected backends as a list
    (``chosen_backends``: ``None`` means ``EXPERIMENT_MONITORS``).

    Raises:
        ConfigError: no backend selected; ``project`` not a non-empty ``str``; ``name`` neither
            ``None`` nor a non-empty ``str``; ``strict`` or ``rank_zero_only`` not a ``bool``.
        UnknownBackendError: as ``chosen_backends``.
    """
    backends = chosen_backends(backends)
    if not backends:
        raise ConfigError(
            "no backend selected: pass them, e.g. Monitor(['trackio'], ...), list them in the "
            "settings file (backends = [...], or a backend's section with enabled = true), or "
            f"set {SELECT_ENV}=trackio,tensorboard; `monitors list` shows the installed ones"
        )
    if not isinstance(project, str) or not project:
        raise ConfigError(f"project={project!r} must be a non-empty str")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"name={name!r} must be a non-empty str, or None for a made-up one")
    for flag, value in (("strict", strict), ("rank_zero_only", rank_zero_only)):
        if not isinstance(value, bool):
            raise ConfigError(f"{flag}={value!r} must be True or False (a bool, not "
                              f"{type(value).__name__})")
    return backends


def check_backend_keys(
    keys: Mapping[str, Any], backends: Iterable[str | type], *, origin: str | None = None
) -> None:
    """Raise ``ConfigError`` for a key of ``keys`` that is neither in ``FILE_KEYS`` nor the
    name of a backend, installed (``monitors list``) or in ``backends`` (a class is known by
    ``discovery.backend_name``).

    ``keys``: ``Monitor``'s extra keywords (``origin=None``) or a file's top level, key ->
    value; ``origin`` (a file's path, ``"monitor config"``) starts the message.

    Raises:
        ConfigError: naming the first unknown key, the closest known one ("did you mean
            'log_dir'?", ``_suggest.closest``), the accepted keys and the installed backends.
    """
    selected = [b if isinstance(b, str) else discovery.backend_name(b) for b in backends]
    unknown = sorted(key for key in keys if key not in FILE_KEYS and key not in selected)
    installed = list(discovery.installed_backends()) if unknown else []
    unknown = [key for key in unknown if key not in installed]
    if not unknown:
        return
    key, accepted = unknown[0], MONITOR_KEYWORDS if origin is None else FILE_KEYS
    suggestion = closest(key, [*accepted, *installed, *selected])
    if origin is None:
        what = f"Monitor() got an unknown keyword argument {key!r}"
    elif isinstance(keys[key], Mapping):
        what = f"{origin}: section [{key}] names no installed backend"
    else:
        what = f"{origin}: unknown key {key!r}"
    raise ConfigError(
        what + (f"; did you mean {suggestion!r}?" if suggestion else ".") + " Accepted keys: "
        f"{', '.join(accepted)}; any other key holds the options of the backend it is named "
        "after (installed backends: "
        f"{', '.join(f'[{n}]' if origin else n for n in installed) or 'none'}; `monitors list`)"
    )


def check_options(name: str, cls: type, options: Mapping[str, Any]) -> None:
    """Check ``options`` against the keyword parameters of ``cls.__init__`` (after ``run``),
    without constructing it (so without importing an SDK): the names, the types their
    annotations say (``core_monitor.options.check_option_types``), then the class's own
    ``check_options(options)`` classmethod, if it has one, for what types cannot say.

    Raises:
        ConfigError: ``options`` is not a mapping, or names an option the class does not take
            (the message names the backend, the option, the closest accepted one,
            ``_suggest.closest``, and every accepted one), or a value has the wrong type (the
            message names the backend, the option, the value and what it must be), or
            the class's ``check_options`` refused a value.
    """
    if not isinstance(options, Mapping):
        raise ConfigError(f"options of backend {name!r} must be a mapping, not "
                          f"{type(options).__name__}")
    import inspect  # here, not at the top: `monitors list` never needs it (a third slower)

    params = list(inspect.signature(cls).parameters.values())[1:]  # after `run`
    accepted = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        for option in options:
            if option not in accepted:
                suggestion = closest(option, accepted)
                hint = f"did you mean {suggestion!r}? " if suggestion else ""
                raise ConfigError(f"backend {name!r} has no option {option!r}; {hint}accepted "
                                  f"options: {', '.join(accepted) or 'none'}")
    check_option_types(name, cls, options)
    values = getattr(cls, "check_options", None)
    if callable(values):
        values(MappingProxyType(dict(options)))


class BackendSections(NamedTuple):
    """What ``backend_sections`` found: ``enabled``/``disabled``, the backends whose section says
    ``enabled = true``/``false`` in the mapping's order; ``options``, every backend section's
    options (``enabled`` removed)."""

    enabled: list[str]
    disabled: list[str]
    options: dict[str, dict[str, Any]]


def backend_sections(
    mapping: Mapping[str, Any], *, names: Collection[str] | None = None,
    origin: str = "monitor config",
) -> BackendSections:
    """Read the per-backend sections of ``mapping``: ``{"wandb": {"enabled": true, ...}}``.

    The convention is DeepSpeed's (one section per tracker, ``"enabled": true/false`` in it;
    a section without ``enabled`` selects nothing by itself), so a DeepSpeed config can be
    given as is: keys that name no backend are left to the caller.

    ``names`` are the keys that are backend sections (default: the installed backends');
    ``origin`` starts an error message (a file's path).

    Raises:
        ConfigError: a section is not a mapping, or its ``enabled`` is not ``true``/``false``.
    """
    names = discovery.installed_backends() if names is None else names
    found = BackendSections([], [], {})
    for key, value in mapping.items():
        if key not in names:
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(f"{origin}: [{key}] must be a table of {key}'s options (and "
                              f"optionally {ENABLED} = true/false), not {value!r}")
        flag = value.get(ENABLED)
        if ENABLED in value and not isinstance(flag, bool):
            raise ConfigError(f"{origin}: [{key}] {ENABLED} = {flag!r} must be true or false")
        if flag is not None:
            (found.enabled if flag else found.disabled).append(key)
        found.options[key] = {k: v for k, v in value.items() if k != ENABLED}
    return found


def load_monitor_config(
    source: Mapping[str, Any] | str | os.PathLike[str], **overrides: Any
) -> dict[str, Any]:
    """Read a monitor configuration, apply ``overrides``; return ``Monitor`` keyword arguments.

    The format (TOML shown; JSON has the same shape)::

        backends = ["trackio", "tensorboard"]   # optional: the selected backends
        project = "digits"                      # required (here or in overrides)
        name = "run-1"                          # optional
        log_dir = "runs"                        # optional, relative to the current directory
        strict = false                          # optional
        rank_zero_only = true                   # optional
        resume = "allow"                        # optional: "never", "allow" or "must"
        [config]                                # optional: hyperparameters
        lr = 3e-4
        [tensorboard]                           # optional: one installed backend's options
        flush_secs = 5
        [wandb]
        enabled = false                         # optional: select (true) or deselect (false)

    ``source`` is a mapping of that shape or a ``.toml``/``.json`` path; ``overrides`` are
    ``Monitor`` keywords, which replace the file's value of the same key (options included).
    Selection: ``overrides["backends"]``; else the file's ``backends`` plus its sections with
    ``enabled = true`` minus those with ``enabled = false``, if it has either; else
    ``EXPERIMENT_MONITORS`` minus the ``enabled = false`` ones. An installed backend's section
    that ends up unselected is ignored.

    Raises:
        ConfigError: the file is missing or unparsable (``path:line:column: ...`` for a syntax
            error), a key or section names nothing known (with the closest known one),
            ``backends`` is not a list of names, or no ``project`` is given. Errors about the
            file start with its path.
        UnknownBackendError: as ``chosen_backends``.
    """
    if isinstance(source, Mapping):
        data: Mapping[str, Any] = source
        origin = "monitor config"
    else:
        origin = os.fspath(source)
        data = _read_file(Path(source))
    code = overrides.get("backends")
    code = [code] if isinstance(code, (str, type)) else code
    check_backend_keys(overrides, code or ())
    names = [*discovery.installed_backends(),
             *(discovery.backend_name(b) for b in code or () if isinstance(b, type))]
    check_backend_keys(data, code or (), origin=origin)
    sections = backend_sections(data, names=names, origin=origin)
    listed = data.get("backends")
    if listed is not None and not (isinstance(listed, list) and all(
            isinstance(b, str) for b in listed)):
        raise ConfigError(f"{origin}: backends={listed!r} must be a list of backend names, "
                          'e.g. backends = ["trackio", "tensorboard"]')
    from_file = None
    if listed is not None or sections.enabled:
        from_file = [b for b in dict.fromkeys([*(listed or []), *sections.enabled])
                     if b not in sections.disabled]
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in MONITOR_KEYWORDS}
    kwargs.update(sections.options)
    kwargs.update(overrides)
    kwargs["backends"] = chosen_backends(code, from_file, sections.disabled)
    if "project" not in kwargs:
        raise ConfigError(f'{origin}: missing required key \'project\'; add e.g. project = '
                          '"my-project" (or pass project=... to from_config)')
    return kwargs


_TOML_WHERE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def _read_file(path: Path) -> Mapping[str, Any]:
    """The top-level table of the ``.toml`` or ``.json`` file at ``path``; ``ConfigError``
    starting with the path (``path:line:column`` where tomllib or json stopped) otherwise."""
    if path.suffix not in (".toml", ".json"):
        raise ConfigError(f"{path}: a monitor config must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the monitor config: {error}") from error
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}:{error.lineno}:{error.colno}: cannot parse JSON: "
                          f"{error.msg}") from error
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        where = _TOML_WHERE.search(message)
        if where:  # "... (at line 3, column 7)"
            at, message = f":{where[1]}:{where[2]}", message[:where.start()]
        else:  # "... (at end of document)": the last line
            at = f":{max(len(text.splitlines()), 1)}"
        raise ConfigError(f"{path}{at}: cannot parse TOML: {message}") from error
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a table/object, not "
                          f"{type(data).__name__}")
    return data
