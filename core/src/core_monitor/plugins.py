"""Installed plugins, read from package metadata: the one place entry points are read.

A plugin is one distribution declaring, under one name, its backend class in the group
``GROUP`` and, optionally, its reader module in ``READER_GROUP``::

    [project.entry-points.experiment_monitors]
    csv = "csv_monitor:CsvMonitor"
    [project.entry-points.experiment_monitor_readers]
    csv = "csv_monitor.reader"

``installed_plugins()`` gives one ``Plugin`` record per (name, distribution), both entry points
in it; discovery (``monitors list``, selection, loading), the readers, the SDK checks and the
writer processes all read that record. Nothing here imports a plugin, an SDK, or another
module of the core: it is the bottom layer the others build on.
"""

from __future__ import annotations

import importlib.metadata
import sys
from importlib.metadata import EntryPoint
from typing import Any, NamedTuple

__all__ = ["GROUP", "READER_GROUP", "Plugin", "backend_name", "installed_plugins",
           "packages_distributions"]

#: The entry-point group backends declare their class in (pluggy's project name too).
GROUP = "experiment_monitors"
#: The entry-point group naming each backend's reader module (``core_monitor.readers``).
READER_GROUP = "experiment_monitor_readers"


class Plugin(NamedTuple):
    """One installed plugin (or a backend class passed to ``Monitor`` directly).

    Attributes: ``name`` (what users select, ``"trackio"``), ``distribution``
    (``"trackio-monitor"``, ``"unknown"`` when no installed distribution holds the class),
    ``version`` (the distribution's), ``target`` (the backend entry point's value,
    ``"module:Class"``), ``entry_point`` (that ``importlib.metadata.EntryPoint``; ``None`` for
    a class passed directly, or a distribution declaring only a reader), ``reader`` (the
    reader module's name, ``"csv_monitor.reader"``, or ``None``).

    A ``NamedTuple`` rather than a dataclass: ``dataclasses`` imports ``inspect``, which
    would slow ``monitors list`` down by a third.
    """

    name: str
    distribution: str
    version: str
    target: str
    entry_point: EntryPoint | None = None
    reader: str | None = None

    @property
    def backend(self) -> str:
        """``name``; the field's name in ``BackendLoadError``."""
        return self.name

    @property
    def who(self) -> tuple[str, str, str, str]:
        """``(name, distribution, version, target)``: the first four arguments of
        ``BackendLoadError``."""
        return self.name, self.distribution, self.version, self.target

    @classmethod
    def of(cls, backend: type) -> Plugin:
        """The installed plugin whose entry point names ``backend`` (same top-level package,
        same class name); else what the class itself says (``backend_name``, its module) and
        the distribution that installed its package, ``"unknown"`` when none did."""
        package = backend.__module__.split(".")[0]
        for claims in installed_plugins().values():
            for plugin in claims:
                ep = plugin.entry_point
                if ep is not None and ep.module.split(".")[0] == package \
                        and ep.attr == backend.__qualname__:
                    return plugin
        found = packages_distributions().get(package, [])
        distribution = found[0] if found else "unknown"
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return cls(backend_name(backend), distribution, version,
                   f"{backend.__module__}:{backend.__qualname__}")

    @classmethod
    def from_info(cls, info: Plugin) -> Plugin:
        """``info`` itself (kept for one release: ``discovery.BackendInfo`` and
        ``compat.Plugin`` were two records and are now this one)."""
        return info


def installed_plugins() -> dict[str, list[Plugin]]:
    """Every plugin name declared in ``GROUP`` or ``READER_GROUP``, sorted by name; one
    ``Plugin`` per distribution claiming it (several: a conflict), both of its entry points
    in that record. The same distribution seen twice on ``sys.path`` counts once. Reads
    metadata on every call; imports nothing."""
    found: dict[str, dict[str, Plugin]] = {}
    every = importlib.metadata.entry_points()  # one scan of the installed distributions
    named: dict[Any, tuple[str, str]] = {}  # distribution -> (name, version), each read once
    for group in (GROUP, READER_GROUP):
        for ep in every.select(group=group):
            dist = ep.dist
            if dist is None:
                dist_name, version = "<unknown>", "?"
            else:
                if dist not in named:
                    metadata = dist.metadata  # parsed once for both
                    named[dist] = (metadata["Name"], metadata["Version"])
                dist_name, version = named[dist]
            claims = found.setdefault(ep.name, {})
            known = claims.get(dist_name)
            if group == GROUP:
                if known is None or known.entry_point is None:
                    claims[dist_name] = Plugin(ep.name, dist_name, version, ep.value, ep,
                                               known.reader if known else None)
            elif known is None:
                claims[dist_name] = Plugin(ep.name, dist_name, version, "", None, ep.value)
            elif known.reader is None:
                claims[dist_name] = known._replace(reader=ep.value)
    return {name: list(found[name].values()) for name in sorted(found)}


def backend_name(cls: type) -> str:
    """The name a backend class passed directly is known by: ``cls.name`` (its
    ``Capabilities.name``) or ``__name__``."""
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) and name else cls.__name__


def packages_distributions() -> dict[str, list[str]]:
    """Top-level import name -> the distributions installing it, as Python 3.11's
    ``importlib.metadata.packages_distributions()``.

    Python 3.10's version reads only ``top_level.txt``, which wheels built by hatchling (every
    distribution of this project, and several SDKs) do not have; there the names are inferred
    from each distribution's ``RECORD`` as 3.11 does (a file's top folder, or a top-level
    module's name).
    """
    if sys.version_info >= (3, 11):
        return importlib.metadata.packages_distributions()
    import inspect

    found: dict[str, list[str]] = {}
    for dist in importlib.metadata.distributions():
        names = (dist.read_text("top_level.txt") or "").split()
        if not names:
            tops = {f.parts[0] if len(f.parts) > 1 else inspect.getmodulename(str(f)) or str(f)
                    for f in dist.files or []}
            names = [name for name in tops if "." not in name]
        for name in names:
            found.setdefault(name, []).append(dist.metadata["Name"])
    return found
