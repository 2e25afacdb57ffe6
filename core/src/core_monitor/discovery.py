"""Finding installed backends through entry points, and loading only the ones selected.

A backend is an entry point in the group ``experiment_monitors`` whose value names the backend
class, e.g. ``trackio = "trackio_monitor:TrackioMonitor"``. Listing reads package metadata only;
nothing is imported until ``load_backend`` is called for a selected name.
"""

from __future__ import annotations

import difflib
import os
import re
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from typing import NamedTuple

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


def find_backend(name: str) -> BackendInfo:
    """Return the one installed backend selected by ``name``, without importing it.

    Raises:
        UnknownBackendError: no distribution declares ``name`` (or it is disabled); the message
            suggests the closest installed name and lists every installed one.
        ConfigError: two distributions declare ``name``; the message names both.
    """
    installed = installed_backends()
    disabled = disabled_names()
    if name in disabled and name in installed:
        raise ConfigError(
            f"backend {name!r} is disabled by {DISABLE_ENV}={os.environ.get(DISABLE_ENV)!r}; "
            f"remove it from that variable to select it"
        )
    candidates = [n for n in installed if n not in disabled]
    if name not in candidates:
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        raise UnknownBackendError(name, candidates, close[0] if close else None)
    infos = installed[name]
    if len(infos) > 1:
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
