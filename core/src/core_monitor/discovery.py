"""Finding installed backends through entry points, selecting them, loading only those selected.

A backend is an entry point in the group ``experiment_monitors`` whose value names the backend
class, e.g. ``trackio = "trackio_monitor:TrackioMonitor"``. Listing reads package metadata only;
nothing is imported until ``load_backend`` is called for a selected name. The rules for which
names can be selected (disabled, conflicting, unknown) live here once: ``find_backend`` applies
them, ``status`` reports them for ``monitors list``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from typing import Any, NamedTuple

from .errors import BackendLoadError, ConfigError, UnknownBackendError

#: The entry-point group backends declare themselves in.
GROUP = "experiment_monitors"
#: Comma-separated backend names to hide, e.g. ``EXPERIMENT_MONITORS_DISABLE=wandb,tensorboard``.
DISABLE_ENV = "EXPERIMENT_MONITORS_DISABLE"


class BackendInfo(NamedTuple):
    """One installed backend, as its distribution's metadata declares it.

    Attributes:
        name: the backend name users select, e.g. ``"trackio"``.
        distribution: the distribution declaring it, e.g. ``"trackio-monitor"``.
        version: that distribution's version.
        target: the entry point's value, ``"module:Class"``.
        entry_point: the ``importlib.metadata.EntryPoint`` itself.

    A ``NamedTuple`` rather than a dataclass: ``dataclasses`` imports ``inspect``, which
    would slow ``monitors list`` down by a third.
    """

    name: str
    distribution: str
    version: str
    target: str
    entry_point: EntryPoint


def disabled_names() -> frozenset[str]:
    """Names listed in ``EXPERIMENT_MONITORS_DISABLE`` (read on every call)."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def installed_backends() -> dict[str, list[BackendInfo]]:
    """Every backend name declared in ``experiment_monitors``, sorted by name.

    A name maps to more than one ``BackendInfo`` when several distributions claim it (a
    conflict). The same distribution seen twice on ``sys.path`` counts once. Imports nothing.
    """
    found: dict[str, list[BackendInfo]] = {}
    for ep in entry_points(group=GROUP):
        dist = ep.dist
        dist_name = dist.metadata["Name"] if dist is not None else "<unknown>"
        version = dist.version if dist is not None else "?"
        infos = found.setdefault(ep.name, [])
        if any(i.distribution == dist_name for i in infos):
            continue
        infos.append(BackendInfo(ep.name, dist_name, version, ep.value, ep))
    return dict(sorted(found.items()))


_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def missing_requirements(info: BackendInfo) -> list[str]:
    """Names of the distributions ``info``'s distribution requires that are not installed.

    Reads metadata only (imports nothing), so ``monitors list`` can flag a plugin installed
    without its SDK (``pip install --no-deps``). Requirements with an environment marker or an
    extra are skipped rather than evaluated.
    """
    dist = info.entry_point.dist
    missing = []
    for requirement in (dist.requires or []) if dist is not None else []:
        match = _REQUIREMENT_NAME.match(requirement)
        if match is None or ";" in requirement:
            continue
        try:
            distribution(match.group(1))
        except PackageNotFoundError:
            missing.append(match.group(1))
    return missing


# Whether a name can be selected: the one policy `find_backend` and `monitors list` share ----

#: ``Status.state`` values that make ``monitors list --check`` exit 1.
FAILING_STATES = frozenset({"conflict", "broken", "error"})


class Status(NamedTuple):
    """What ``monitors list`` reports for one installed backend (one distribution's claim).

    Attributes:
        state: ``"disabled"`` (named in ``EXPERIMENT_MONITORS_DISABLE``), ``"conflict"``
            (several distributions claim the name), ``"broken"`` (a declared requirement is
            not installed), ``"error"`` (importing it or its ``check_sdk()`` raised),
            ``"ok"`` (it loads) or ``"installed"`` (not imported, nothing missing).
        text: the line shown to the user, starting with ``state``.
    """

    state: str
    text: str


def _refusal(name: str, infos: list[BackendInfo], disabled: frozenset[str]) -> str | None:
    """Why ``name`` cannot be selected whatever its code does: ``"disabled"``, ``"conflict"``
    or ``None``."""
    if name in disabled:
        return "disabled"
    if len(infos) > 1:
        return "conflict"
    return None


def status(info: BackendInfo, claims: list[BackendInfo], *, check: bool = False,
           disabled: frozenset[str] | None = None) -> Status:
    """The status of ``info`` among ``claims`` (every ``BackendInfo`` of its name).

    Args:
        info: one entry of ``installed_backends()[name]``.
        claims: that whole list.
        check: import the backend and run its ``check_sdk()`` (``check_backend``); otherwise
            only metadata is read (``missing_requirements``).
        disabled: ``disabled_names()``, read when not given.
    """
    refused = _refusal(info.name, claims, disabled_names() if disabled is None else disabled)
    if refused == "disabled":
        return Status(refused, f"disabled ({DISABLE_ENV})")
    if refused == "conflict":
        others = ", ".join(i.distribution for i in claims if i is not info)
        return Status(refused, f"conflict: {info.name!r} is also claimed by {others}")
    if check:
        try:
            check_backend(info)
        except BackendLoadError as error:
            return Status("error", f"error: {error}")
        return Status("ok", "ok")
    missing = missing_requirements(info)
    if missing:
        return Status("broken", f"broken: requires {', '.join(missing)}, not installed "
                                f"(`pip install {' '.join(missing)}`)")
    return Status("installed", "installed")


def find_backend(name: str) -> BackendInfo:
    """Return the one installed backend selected by ``name``, without importing it.

    Raises:
        UnknownBackendError: no distribution declares ``name`` (or it is disabled); the message
            suggests the closest installed name and lists every installed one.
        ConfigError: ``name`` is installed but disabled (``EXPERIMENT_MONITORS_DISABLE``), or
            two distributions declare it; the message names the variable, or both.
    """
    installed = installed_backends()
    disabled = disabled_names()
    infos = installed.get(name, [])
    refused = _refusal(name, infos, disabled) if infos else None
    if refused == "disabled":
        raise ConfigError(
            f"backend {name!r} is disabled by {DISABLE_ENV}={os.environ.get(DISABLE_ENV)!r}; "
            f"remove it from that variable to select it"
        )
    if not infos:
        candidates = [n for n in installed if n not in disabled]
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        raise UnknownBackendError(name, candidates, close[0] if close else None)
    if refused == "conflict":
        claims = " and ".join(f"{i.distribution} {i.version} ({i.target})" for i in infos)
        raise ConfigError(
            f"backend name {name!r} is claimed by {claims}; uninstall one of them "
            f"(`pip uninstall {infos[-1].distribution}`)"
        )
    return infos[0]


def load_backend(info: BackendInfo) -> type:
    """Import the backend class ``info`` names.

    Raises:
        BackendLoadError: its module, or the SDK that module imports, fails to import, or the
            entry point does not name a class; the message names the distribution, its version
            and the missing package.
    """
    try:
        loaded = info.entry_point.load()
    except Exception as error:  # ImportError, but a broken plugin may raise anything on import
        raise BackendLoadError(
            info.name, info.distribution, info.version, info.target, error
        ) from error
    if not isinstance(loaded, type):
        raise BackendLoadError(
            info.name, info.distribution, info.version, info.target,
            TypeError(f"{info.target} is a {type(loaded).__name__}, not a backend class"),
        )
    return loaded


def check_backend(info: BackendInfo) -> type:
    """``load_backend``, then the class's optional classmethod ``check_sdk()``.

    ``check_sdk()`` imports the backend's SDK and checks that the SDK still has the shape the
    plugin relies on (see the plugin guide); it is what ``monitors list --check`` runs.

    Raises:
        BackendLoadError: loading failed, or ``check_sdk()`` raised (its exception is kept
            as-is when it is a ``BackendLoadError``, else wrapped in one naming the plugin).
    """
    cls = load_backend(info)
    check_sdk = getattr(cls, "check_sdk", None)
    if callable(check_sdk):
        try:
            check_sdk()
        except BackendLoadError:
            raise
        except Exception as error:  # ImportError, or a capability check that failed
            raise BackendLoadError(
                info.name, info.distribution, info.version, info.target, error
            ) from error
    return cls


# Selection: names and classes given to Monitor -> what to load; options checked ------------


def backend_name(cls: type) -> str:
    """The name a backend class passed directly is known by: ``cls.name`` or ``__name__``."""
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) and name else cls.__name__


def select(backends: Sequence[str | type]) -> dict[str, BackendInfo | type]:
    """Map each selected name to its entry point (or the class given); imports nothing.

    Raises:
        ConfigError: an item is neither a non-empty ``str`` nor a class, a backend is selected
            twice, or ``find_backend`` refuses a name.
        UnknownBackendError: as ``find_backend``.
    """
    found: dict[str, BackendInfo | type] = {}
    for backend in backends:
        if isinstance(backend, type):
            key = backend_name(backend)
            value: BackendInfo | type = backend
        elif isinstance(backend, str) and backend:
            key, value = backend, find_backend(backend)
        else:
            raise ConfigError(f"backend {backend!r} is neither a backend name nor a class")
        if key in found:
            raise ConfigError(f"backend {key!r} is selected twice; list each backend once")
        found[key] = value
    return found


def check_options(name: str, cls: type, options: Mapping[str, Any]) -> None:
    """Check ``options`` against the keyword parameters of ``cls.__init__`` (after ``run``),
    without constructing it (so without importing an SDK).

    Raises:
        ConfigError: ``options`` is not a mapping, or names an option the class does not take;
            the message names the backend, the option and the accepted ones.
    """
    if not isinstance(options, Mapping):
        raise ConfigError(f"options of backend {name!r} must be a mapping, not "
                          f"{type(options).__name__}")
    import inspect  # here, not at the top: `monitors list` never needs it (a third slower)

    params = list(inspect.signature(cls).parameters.values())[1:]  # after `run`
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for option in options:
        if option not in accepted:
            raise ConfigError(
                f"backend {name!r} has no option {option!r}; accepted options: "
                f"{', '.join(accepted) or 'none'}"
            )
