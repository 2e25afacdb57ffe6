"""The one "did you mean ...?" helper: every message that names a misspelt key or backend
suggests through ``closest``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` most likely misspells, for a "did you mean ...?" hint; else ``None``.

    A choice equal to ``word`` ignoring case wins (``"WandB"`` -> ``"wandb"``); otherwise the
    closest by ``difflib.get_close_matches`` (ratio >= 0.6, case ignored). Names themselves
    are always matched exactly by the core: this only suggests.
    """
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None
