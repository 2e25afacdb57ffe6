"""The hooks a backend implements: the whole plugin contract on one screen.

A backend is a class registered under the entry-point group ``experiment_monitors``. The core
constructs it as ``Backend(run: RunInfo, **options)``, registers the instance on a pluggy
``PluginManager`` and calls its hooks by keyword, one backend at a time (so that one failing
backend never stops the others; see ``core_monitor.dispatch``). Every hook is optional.

Calls into one backend never overlap (by default each backend's hooks run on a worker thread of
its own, ``core_monitor.worker``), come in the order logged, and never come from a forked child.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import pluggy

from .events import Event
from .media import MEDIA_KINDS, MediaItem

if TYPE_CHECKING:
    from .run import RunInfo

PROJECT_NAME = "experiment_monitors"

#: Marker for hook specifications (used only by the core).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marker a backend puts on its hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def monitor_write(events: Sequence[Event]) -> None:
    """Record a batch of events: every event of one ``Monitor.log`` call, in the caller's order.

    ``event.step`` is final (the core assigned it): store exactly that step, even when it is
    lower than or equal to an earlier one. ``event.value`` is a Python ``float`` and may be NaN
    or +/-inf. A backend may write one record per step for the whole batch
    (``core_monitor.events.rows_by_step`` groups a batch that way).
    """


@hookspec
def monitor_flush() -> None:
    """Make everything written so far durable and readable by the backend's own reader.

    A backend that cannot do this (its SDK has no flush) sets the class attribute
    ``rows_readable_after = "close"`` and documents it.
    """


@hookspec
def monitor_close() -> None:
    """Flush, release files, threads and processes, and finish the run.

    The core calls it once per backend; a backend should still tolerate a second call.
    """


@hookspec
def monitor_config(config: Mapping[str, Any]) -> None:
    """Store hyperparameters that arrived after the run started (``Monitor.log_config``).

    ``config`` holds only the keys of that call, sanitised like ``RunInfo.config`` (flat,
    ``str`` keys joined with ``.``, JSON-safe values). Merge them into the config the backend
    already stored, where the tracker's own UI shows it; a key given again takes the new value.
    Frameworks hand hyperparameters over this way after their tracker object exists
    (accelerate's ``store_init_configuration``, Lightning's ``log_hyperparams``, the Hugging
    Face Trainer's ``on_train_begin``). A backend without this hook is skipped for it with one
    ``BackendWarning``.
    """


@hookspec
def monitor_write_media(items: Sequence[MediaItem]) -> None:
    """Record the media values (images, histograms, text) of one ``Monitor.log`` call.

    Each ``MediaItem`` carries ``tag``, ``step`` (final, as for ``monitor_write``),
    ``wall_time`` and a validated ``value`` (``core_monitor.media.Image``: a read-only ``uint8``
    array ``(H, W, C)``, ``C`` in 1/3/4; ``Histogram``: ``binned()`` gives ``(counts, edges)``;
    ``Text``: ``text``). The core sends only the kinds the class declares in ``media_kinds``
    (``"image"``, ``"histogram"``, ``"text"``) and reports the others once per kind. Encode
    here (PNG, binning), not earlier: this hook runs where the backend's writes run, off the
    training thread when dispatch is in the background.
    """


# The backend class as a whole: constructor, hooks and capabilities ------------------------------

#: Accepted values of each capability attribute, the first one the default. The contract kit
#: (``core_monitor.testing``) and ``monitors new`` read the capabilities through ``Capabilities``.
CAPABILITY_VALUES: dict[str, tuple[Any, ...]] = {
    "rows_readable_after": ("flush", "close"),
    "value_dtype": ("float64", "float32"),
    "stores_config": (False, True),
}


@dataclass(frozen=True)
class Capabilities:
    """What a backend class declares about its storage, read from its class attributes.

    Attributes:
        name: the backend name when the class is passed to ``Monitor`` directly (an installed
            backend is known by its entry-point name); ``None`` when the class sets none.
        rows_readable_after: ``"flush"`` when the backend's own reader sees every row after
            ``monitor_flush`` while the run is open; ``"close"`` when only after
            ``monitor_close`` (an SDK without a flush, like wandb's offline writer).
        value_dtype: ``"float64"`` when values are stored exactly; ``"float32"`` when the
            storage rounds them to single precision (TensorBoard event files).
        stores_config: whether the backend stores ``RunInfo.config`` at start and merges what
            ``monitor_config`` brings later, readable back by the plugin's ``read_config``.
        media_kinds: the media kinds ``monitor_write_media`` stores, a subset of
            ``{"image", "histogram", "text"}`` (``core_monitor.media.MEDIA_KINDS``); the core
            sends the backend only these. Empty (the default): scalars only.
    """

    name: str | None = None
    rows_readable_after: Literal["flush", "close"] = "flush"
    value_dtype: Literal["float64", "float32"] = "float64"
    stores_config: bool = False
    media_kinds: frozenset[str] = frozenset()

    @classmethod
    def of(cls, backend_class: type) -> Capabilities:
        """Read the capability attributes of ``backend_class``; a missing one is the default.

        Raises:
            TypeError: an attribute has a value outside ``CAPABILITY_VALUES`` (the message
                names the class, the attribute, the value and the accepted values), or
                ``name``/``media_kinds`` has the wrong type.
        """
        found: dict[str, Any] = {}
        for attribute, accepted in CAPABILITY_VALUES.items():
            value = getattr(backend_class, attribute, accepted[0])
            if value not in accepted or type(value) is not type(accepted[0]):
                raise TypeError(
                    f"{backend_class.__qualname__}.{attribute} = {value!r} is not one of "
                    f"{', '.join(map(repr, accepted))}; set the class attribute to one of them "
                    "(see core_monitor.hookspecs.Capabilities)"
                )
            found[attribute] = value
        name = getattr(backend_class, "name", None)
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"{backend_class.__qualname__}.name = {name!r} must be a non-empty "
                            "str (the backend name) or unset")
        kinds: Any = getattr(backend_class, "media_kinds", frozenset())
        if isinstance(kinds, str) or not all(isinstance(k, str) for k in kinds) or (
            set(kinds) - MEDIA_KINDS
        ):
            raise TypeError(f"{backend_class.__qualname__}.media_kinds = {kinds!r} must be a "
                            f"set of str out of {sorted(MEDIA_KINDS)}")
        return cls(name=name, media_kinds=frozenset(kinds), **found)


class Backend(Protocol):
    """The shape of a complete backend class, on one screen (``typing.Protocol``).

    The core constructs the class registered under the ``experiment_monitors`` entry-point
    group once per run, on rank 0 (on every rank with ``Monitor(..., rank_zero_only=False)``),
    as ``Backend(run, **options)``: ``options`` are the user's mapping for this backend,
    checked against the keyword parameters of ``__init__`` before any backend starts. It then
    calls the hooks (each marked with ``@hookimpl``) by keyword, never after
    ``monitor_close``. Only ``monitor_write`` is needed for a working backend: the core skips a
    hook a backend lacks (``monitor_config`` with one ``BackendWarning``). ``monitors new``
    generates a class of this shape and the contract kit checks it; a type checker accepts
    ``MyMonitor`` where ``type[Backend]`` is expected once all members are there.

    Class attributes (read through ``Capabilities.of``; each optional, default first):
        name: the backend name when the class is passed to ``Monitor`` directly.
        rows_readable_after: ``"flush"`` | ``"close"``.
        value_dtype: ``"float64"`` | ``"float32"``.
        stores_config: ``False`` | ``True``.
        media_kinds: ``frozenset()`` | a subset of ``{"image", "histogram", "text"}``
            (``core_monitor.media.MEDIA_KINDS`` is all three).
    """

    name: ClassVar[str]
    rows_readable_after: ClassVar[Literal["flush", "close"]]
    value_dtype: ClassVar[Literal["float64", "float32"]]
    stores_config: ClassVar[bool]
    media_kinds: ClassVar[frozenset[str]]

    def __init__(self, run: RunInfo, **options: Any) -> None:
        """Open the run's storage for ``run`` (project, name, config, log_dir, rank).

        Store ``run.config`` when ``stores_config``. On ``run.rank > 0`` write a run of its
        own (e.g. named ``run.ranked_name``, ``<name>-rank<rank>``), never into rank 0's. Raise
        ``core_monitor.ConfigError`` naming an option whose value is wrong.
        """

    def monitor_write(self, events: Sequence[Event]) -> None:
        """See the ``monitor_write`` hook specification above."""

    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """See the ``monitor_write_media`` hook specification above."""

    def monitor_flush(self) -> None:
        """See the ``monitor_flush`` hook specification above."""

    def monitor_close(self) -> None:
        """See the ``monitor_close`` hook specification above."""

    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """See the ``monitor_config`` hook specification above."""
