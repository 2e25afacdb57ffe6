"""Which modules a backend's distribution requires: how the kit checks that importing a plugin
imports no SDK (a rank that writes nothing imports the backend's module, never its SDK)."""

from __future__ import annotations

import importlib.metadata
import re

from ..plugins import packages_distributions

CORE_DISTRIBUTION = "core-monitor"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_modules(module: str) -> set[str] | None:
    """Top-level import names of the requirements (without extras-only ones and without
    core-monitor) of the distribution providing ``module``; ``None`` when no installed
    distribution provides it."""
    providers = packages_distributions()  # Python 3.10: inferred from RECORD as 3.11 does
    distributions = providers.get(module.partition(".")[0])
    if not distributions:
        return None
    wanted = set()
    for distribution in distributions:
        for requirement in importlib.metadata.requires(distribution) or []:
            name, _, marker = requirement.partition(";")
            if "extra" in marker:
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name)
            if match and _normalise(match.group(1)) != CORE_DISTRIBUTION:
                wanted.add(_normalise(match.group(1)))
    return {top for top, dists in providers.items()
            if any(_normalise(d) in wanted for d in dists)}
