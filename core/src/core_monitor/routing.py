"""Which media go to which backend: each backend gets only the kinds it declares and can take.

A backend declares ``media_kinds`` (a subset of ``core_monitor.media.MEDIA_KINDS``) and
implements ``monitor_write_media``. The core counts, on the caller's thread, the media items a
backend does not store (``MediaRoutes.skip``), and wraps each backend's hook so that it takes
only its own kinds, whether it runs on the caller's thread or on its worker thread.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._stack import caller_level
from .errors import BackendWarning
from .media import MEDIA_KINDS, MediaItem


class MediaRoutes:
    """The media kinds each started backend is sent, and what the others were not sent.

    Attributes:
        kinds: backend name -> the kinds it is sent (declared, known, and with the hook).
        skipped: (backend name, kind) -> media values not sent there (``Monitor.media_skipped``).
    """

    def __init__(self) -> None:
        self.kinds: dict[str, frozenset[str]] = {}
        self.skipped: dict[tuple[str, str], int] = {}
        self._told: set[tuple[str, str]] = set()

    def add(self, name: str, declared: Iterable[str], hooks: dict[str, Callable[..., Any]]) -> None:
        """Note a backend's kinds; wrap its ``monitor_write_media`` in ``hooks`` (changed in
        place) to take only those kinds."""
        hook = hooks.get("monitor_write_media")
        kinds = self.kinds[name] = (
            MEDIA_KINDS.intersection(declared) if hook is not None else frozenset()
        )
        if hook is not None and kinds:
            hooks["monitor_write_media"] = _only_kinds(hook, kinds)

    def skip(self, names: Iterable[str], items: Sequence[MediaItem]) -> bool:
        """Count, on the caller's thread, the items each backend of ``names`` does not store;
        return whether any of them stores any item (then the core sends them all: each hook
        takes its own kinds).

        A kind a backend does not store is reported once per (backend, kind) as a
        ``BackendWarning``, then only counted in ``skipped``. Not a failure.
        """
        wanted = False
        for name in names:
            kinds = self.kinds[name]
            for item in items:
                if item.value.kind in kinds:
                    wanted = True
                else:
                    self._skip(name, item)
        return wanted

    def _skip(self, name: str, item: MediaItem) -> None:
        key = (name, item.value.kind)
        self.skipped[key] = self.skipped.get(key, 0) + 1
        if key not in self._told:
            self._told.add(key)
            warnings.warn(
                f"backend {name!r} does not store {item.value.kind} media (its class "
                f"declares media_kinds = {sorted(self.kinds[name])}): {item.tag!r} "
                "and later values of that kind are not sent to it (the other backends store "
                "them); Monitor.media_skipped counts them", BackendWarning,
                stacklevel=caller_level())


def _only_kinds(hook: Callable[..., Any], kinds: frozenset[str]) -> Callable[..., Any]:
    """``hook`` (a backend's ``monitor_write_media``) called with only the items of ``kinds``,
    and not at all when none is left."""

    def monitor_write_media(items: Sequence[MediaItem]) -> None:
        mine = tuple(item for item in items if item.value.kind in kinds)
        if mine:
            hook(items=mine)

    return monitor_write_media
