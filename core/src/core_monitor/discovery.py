"""Finding installed backends through entry points, selecting them, loading only those selected.

A backend is an entry point in the group ``experiment_monitors`` whose value names the backend
class, e.g. ``trackio = "trackio_monitor:TrackioMonitor"``. Listing reads package metadata only;
nothing is imported until ``load_backend`` is called for a selected name. The rules for which
names can be selected (disabled, conflicting, unknown) live here once: ``select`` applies them,
``status`` reports them for ``monitors list``.

``EXPERIMENT_MONITORS_DISABLE`` applies last, to whatever code, file or ``EXPERIMENT_MONITORS``
selected: a selected backend it names is skipped (never imported) with one ``ConfigWarning``,
the others run; ``*``/``all`` skips all. Names match exactly as installed; one that matches no
installed backend (``WandB``) gets a warning suggesting ``wandb``. ``strict=True`` raises
``ConfigError`` instead of both warnings.

``monitors list`` imports this module and reads metadata only, so what only selecting or
loading needs (the SDK checks, which import ``dataclasses`` and ``inspect``; ``difflib`` for a
suggestion) is imported inside the function that uses it.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, distribution
from typing import NamedTuple

from .errors import (
    BackendLoadError,
    ConfigError,
    ConfigWarning,
    SdkVersionWarning,
    UnknownBackendError,
)
from .plugins import GROUP, Plugin, backend_name, installed_plugins

__all__ = ["DISABLE_ALL", "DISABLE_ENV", "FAILING_STATES", "GROUP", "BackendInfo", "Status",
           "backend_name", "check_backend", "disabled_names", "find_backend",
           "installed_backends", "load_backend", "missing_requirements", "select", "status"]

#: Comma-separated backend names to skip, e.g. ``EXPERIMENT_MONITORS_DISABLE=wandb,tensorboard``.
DISABLE_ENV = "EXPERIMENT_MONITORS_DISABLE"
#: Values in ``EXPERIMENT_MONITORS_DISABLE`` that disable every backend.
DISABLE_ALL = frozenset({"*", "all"})


#: One installed backend, as its distribution's metadata declares it: ``plugins.Plugin``, the
#: one record per plugin (kept under this name).
BackendInfo = Plugin


def disabled_names() -> frozenset[str]:
    """Names listed in ``EXPERIMENT_MONITORS_DISABLE``, stripped, as written (``*``/``all``
    kept); read on every call."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def installed_backends(
    plugins: Mapping[str, list[Plugin]] | None = None,
) -> dict[str, list[BackendInfo]]:
    """Every backend name declared in ``experiment_monitors``, sorted by name
    (``plugins.installed_plugins``, without reader-only records).

    ``plugins`` is ``installed_plugins()``, read when not given (``monitors list`` reads it
    once for the backends and their readers). A name maps to more than one ``BackendInfo``
    when several distributions claim it (a conflict). The same distribution seen twice on
    ``sys.path`` counts once. Imports nothing.
    """
    found = {name: [p for p in claims if p.entry_point is not None]
             for name, claims in (installed_plugins() if plugins is None else plugins).items()}
    return {name: claims for name, claims in found.items() if claims}


_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def missing_requirements(info: BackendInfo) -> list[str]:
    """Names of the distributions ``info``'s distribution requires that are not installed.

    Reads metadata only (imports nothing), so ``monitors list`` can flag a plugin installed
    without its SDK (``pip install --no-deps``). Requirements with an environment marker or an
    extra are skipped rather than evaluated.
    """
    dist = info.entry_point.dist if info.entry_point is not None else None
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

    ``state``: ``"disabled"`` (by ``EXPERIMENT_MONITORS_DISABLE``), ``"conflict"`` (several
    distributions claim the name), ``"broken"`` (a declared requirement is not installed),
    ``"error"`` (importing it or its ``check_sdk()`` raised), ``"ok"`` (it loads) or
    ``"installed"`` (not imported, nothing missing). ``text``: the line shown, from ``state``.
    """

    state: str
    text: str


def _refusal(name: str, infos: list[BackendInfo], disabled: frozenset[str]) -> str | None:
    """Why ``name`` cannot be selected whatever its code does: ``"disabled"``, ``"conflict"``
    or ``None``."""
    if name in disabled or not DISABLE_ALL.isdisjoint(disabled):
        return "disabled"
    if len(infos) > 1:
        return "conflict"
    return None


def status(info: BackendInfo, claims: list[BackendInfo], *, check: bool = False,
           disabled: frozenset[str] | None = None) -> Status:
    """The status of ``info`` among ``claims`` (every ``BackendInfo`` of its name).

    ``info`` is one entry of ``installed_backends()[name]``, ``claims`` that whole list;
    ``check`` imports the backend and runs its ``check_sdk()`` (``check_backend``), otherwise
    only metadata is read (``missing_requirements``); ``disabled`` defaults to
    ``disabled_names()``.
    """
    refused = _refusal(info.name, claims, disabled_names() if disabled is None else disabled)
    if refused == "disabled":
        return Status(refused, f"disabled ({DISABLE_ENV})")
    if refused == "conflict":
        others = ", ".join(i.distribution for i in claims if i is not info)
        return Status(refused, f"conflict: {info.name!r} is also claimed by {others}")
    if check:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SdkVersionWarning)
            try:
                check_backend(info)
            except BackendLoadError as error:
                return Status("error", f"error: {error}")
        untested = [str(w.message) for w in caught if issubclass(w.category, SdkVersionWarning)]
        return Status("ok", f"ok; warning: {untested[0]}" if untested else "ok")
    missing = missing_requirements(info)
    if missing:
        return Status("broken", f"broken: requires {', '.join(missing)}, not installed "
                                f"(`pip install {' '.join(missing)}`)")
    return Status("installed", "installed")


def find_backend(
    name: str, installed: Mapping[str, list[BackendInfo]] | None = None,
    disabled: frozenset[str] | None = None,
) -> BackendInfo:
    """Return the one installed backend selected by ``name``, without importing it.

    ``installed`` and ``disabled`` are ``installed_backends()`` and ``disabled_names()``, read
    when not given; ``name`` is matched exactly (case included).

    Raises:
        UnknownBackendError: no distribution declares ``name``; the message suggests the
            closest installed name (``_suggest.closest``) and lists every installed one.
        ConfigError: ``name`` is disabled (``select`` skips it unless ``strict``), or two
            distributions declare it; the message names the variable, or both distributions.
    """
    installed = installed_backends() if installed is None else installed
    disabled = disabled_names() if disabled is None else disabled
    infos = installed.get(name, [])
    if not infos:
        from ._suggest import closest

        raise UnknownBackendError(name, list(installed), closest(name, installed))
    refused = _refusal(name, infos, disabled)
    if refused == "disabled":
        raise _disabled_error(name)
    if refused == "conflict":
        claims = " and ".join(f"{i.distribution} {i.version} ({i.target})" for i in infos)
        raise ConfigError(
            f"backend name {name!r} is claimed by {claims}; uninstall one of them "
            f"(`pip uninstall {infos[-1].distribution}`)"
        )
    return infos[0]


def _disabled_error(name: str) -> ConfigError:
    return ConfigError(f"backend {name!r} is disabled by {DISABLE_ENV}="
                       f"{os.environ.get(DISABLE_ENV)!r} (an error, not a warning, with "
                       "strict=True); remove it from that variable or from the selection")


def load_backend(info: BackendInfo) -> type:
    """Import the backend class ``info`` names.

    Raises:
        BackendLoadError: its module, or the SDK that module imports, fails to import, or the
            entry point does not name a class; the message names the distribution, its version
            and the missing package.
    """
    try:
        if info.entry_point is None:
            raise LookupError(f"{info.distribution} declares no backend class in {GROUP!r}")
        loaded = info.entry_point.load()
    except ModuleNotFoundError as error:
        if error.name is None:
            raise BackendLoadError(
                info.name, info.distribution, info.version, info.target, error
            ) from error
        # The expected case (an SDK not installed): the message names the package and the fix,
        # so no chained traceback through the plugin's imports; ``.cause`` keeps the original.
        raise BackendLoadError(
            info.name, info.distribution, info.version, info.target, error
        ) from None
    except Exception as error:  # a broken plugin may raise anything on import: keep the chain
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
    """``load_backend``, then ``sdk.ensure_sdk``: the class's optional ``check_sdk()`` and
    ``tested_sdk`` range (see the plugin guide); what ``monitors list --check`` runs.

    Raises:
        BackendLoadError: loading failed, ``check_sdk()`` reported problems (the core builds
            the error, naming the SDK version and the tested range), or it raised (kept as-is
            when a ``BackendLoadError``, else wrapped in one naming the plugin).
    """
    from .sdk import ensure_sdk

    return ensure_sdk(load_backend(info), info)


def select(
    backends: Sequence[str | type], *, strict: bool = False
) -> dict[str, BackendInfo | type]:
    """Map each selected backend that is not disabled to its entry point (or the class given),
    in selection order; imports nothing.

    ``EXPERIMENT_MONITORS_DISABLE`` applies here (module docstring): a disabled backend is left
    out with one ``ConfigWarning`` naming it and the variable (one in all for ``*``/``all``),
    its name still checked. An empty result: the ``Monitor`` writes nothing.

    Raises:
        ConfigError: an item is neither a non-empty ``str`` nor a class, a backend is selected
            twice, a name is claimed by two distributions, or (``strict``) a selected backend
            is disabled or the variable names no installed backend.
        UnknownBackendError: a name no installed distribution declares.
    """
    installed = installed_backends()
    disabled = disabled_names()
    found: dict[str, BackendInfo | type] = {}
    skipped: list[str] = []
    for backend in backends:
        if not isinstance(backend, type) and not (isinstance(backend, str) and backend):
            raise ConfigError(f"backend {backend!r} is neither a backend name nor a class")
        key = backend if isinstance(backend, str) else backend_name(backend)
        if key in found or key in skipped:
            raise ConfigError(f"backend {key!r} is selected twice; list each backend once")
        off = _refusal(key, [], disabled) == "disabled"
        chosen: BackendInfo | type | None = None if isinstance(backend, str) else backend
        if isinstance(backend, str) and (not off or key not in installed):
            chosen = find_backend(key, installed, frozenset())  # unknown, conflict: raise
        if off and strict:
            raise _disabled_error(key)
        if off:
            skipped.append(key)
        elif chosen is not None:
            found[key] = chosen
    known = sorted({*installed, *skipped, *found})
    for name in sorted(disabled - DISABLE_ALL - set(known)):  # e.g. WandB for wandb: a typo
        from ._suggest import closest

        hint = f"did you mean {close!r}? " if (close := closest(name, known)) else ""
        message = (f"{DISABLE_ENV} names {name!r}, which matches no installed backend (names "
                   f"match exactly, case included); {hint}installed: {', '.join(known)}")
        if strict:
            raise ConfigError(message)
        warnings.warn(message, ConfigWarning, stacklevel=3)
    rest = (f"the run goes on with {list(found)}" if found else "this Monitor writes nothing "
            "(log() still checks its input and returns steps)")
    every = not DISABLE_ALL.isdisjoint(disabled)
    for key in skipped[:1] if every else skipped:
        what = f"every backend ({skipped} not started)" if every else f"backend {key!r}"
        warnings.warn(f"{what} is disabled by {DISABLE_ENV}={os.environ.get(DISABLE_ENV)!r}: "
                      f"{rest}", ConfigWarning, stacklevel=3)
    return found
