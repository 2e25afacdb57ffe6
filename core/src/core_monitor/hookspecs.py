"""The hooks a backend implements: the whole plugin contract on one screen.

A backend is a class registered under the entry-point group ``experiment_monitors``. The core
constructs it as ``Backend(run: RunInfo, **options)``, registers the instance on a pluggy
``PluginManager`` and calls its hooks by keyword, one backend at a time (so that one failing
backend never stops the others; see ``core_monitor.dispatch``). Every hook is optional.

Calls into one backend never overlap (by default each backend lives in a writer process of its
own, ``core_monitor.dispatch.writer``; with ``dispatch="thread"`` on a worker thread), come in
the order logged, and never come from a forked child.

Adding a hook takes two edits: its specification here (``HOOKS`` is derived from this module)
and the ``Monitor`` method that sends it; every dispatch mode carries any hook by name.
"""

from __future__ import annotations

import sys
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
def monitor_crash(reason: str) -> None:
    """The training process died without closing the monitor (killed, ``os._exit``, a crash).

    Called in the backend's writer process after every call the training process logged was
    written and flushed, just before ``monitor_close``. Mark the run as crashed or failed where
    the tracker has a run status (wandb's exit code, MLflow's ``FAILED``), or record the crash
    as the tracker allows. ``reason`` says what the writer saw, e.g. ``"the training process
    (pid 123) ended without closing the monitor"``. Not called in ``"sync"``/``"thread"``
    dispatch, where nothing survives the training process.
    """


# The hook list, read from the specifications above ------------------------------------------

#: Reads hook markers through pluggy's public API (``parse_hookspec_opts``,
#: ``parse_hookimpl_opts``); no backend is ever registered on it.
_markers = pluggy.PluginManager(PROJECT_NAME)


def _declared_hooks() -> tuple[str, ...]:
    module = sys.modules[__name__]
    return tuple(name for name in list(vars(module))
                 if _markers.parse_hookspec_opts(module, name) is not None)


#: The name of every hook specified in this module, in declaration order (the order of a
#: backend's life: write, write media, config, flush, close, crash). The one list of hooks: the core
#: and the contract kit derive theirs from it, so adding a hook is its specification here and
#: the ``Monitor`` method that calls it.
HOOKS: tuple[str, ...] = _declared_hooks()


def hookimpl_options(backend: object, hook: str) -> pluggy.HookimplOpts | None:
    """The options of the ``@hookimpl`` marker on ``backend``'s ``hook``, read as pluggy reads
    them (``PluginManager.parse_hookimpl_opts``).

    Args:
        backend: a backend class or instance.
        hook: a hook name, one of ``HOOKS``.

    Returns:
        The marker's options (``{"wrapper": False, "tryfirst": False, ...}``), or ``None`` when
        ``backend`` has no ``hook`` or its ``hook`` is not marked (the core never calls it).
    """
    if getattr(backend, hook, None) is None:  # older pluggy releases raise AttributeError
        return None
    return _markers.parse_hookimpl_opts(backend, hook)


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
    """The shape of a backend class, on one screen (``typing.Protocol``); for a backend that
    stores media too, ``MediaBackend`` below.

    The core constructs the class registered under the ``experiment_monitors`` entry-point
    group once per run, on rank 0 (on every rank with ``Monitor(..., rank_zero_only=False)``),
    as ``Backend(run, **options)``: ``options`` are the user's mapping for this backend,
    checked against the keyword parameters of ``__init__`` before any backend starts. It then
    calls the hooks (each marked with ``@hookimpl``) by keyword, never after
    ``monitor_close``. Only ``monitor_write`` is needed for a working backend: the core skips a
    hook a backend lacks (``monitor_config`` with one ``BackendWarning``) and runs a class
    without ``check_sdk``/``tested_sdk``; this protocol is the complete shape, which
    ``monitors new`` generates and a type checker checks (``_shape: type[Backend] =
    MyMonitor`` in the generated module).

    Class attributes (read through ``Capabilities.of``; each optional, default first):
        name: the backend name when the class is passed to ``Monitor`` directly.
        rows_readable_after: ``"flush"`` | ``"close"``.
        value_dtype: ``"float64"`` | ``"float32"``.
        stores_config: ``False`` | ``True``.
        tested_sdk: the SDK versions the plugin was tested with, a PEP 508 requirement
            (``"mysdk>=1.2,<1.4"``); ``None`` for a backend without an SDK. Outside that range
            the core warns once (``SdkVersionWarning``) and the backend runs, unless
            ``check_sdk`` reports a problem (``core_monitor.compat``).

    An optional classmethod ``from_deepspeed(section: Mapping[str, Any]) -> dict[str, Any]``
    reads DeepSpeed's own config section for the tracker (``core_monitor.integrations.
    deepspeed``); a backend without such a section has none.
    """

    name: ClassVar[str]
    rows_readable_after: ClassVar[Literal["flush", "close"]]
    value_dtype: ClassVar[Literal["float64", "float32"]]
    stores_config: ClassVar[bool]
    tested_sdk: ClassVar[str | None]

    def __init__(self, run: RunInfo, **options: Any) -> None:
        """Open the run's storage for ``run`` (project, name, config, log_dir, rank).

        Call ``core_monitor.compat.ensure_sdk(type(self))`` first when the backend has an SDK.
        Store ``run.config`` when ``stores_config``. On ``run.rank > 0`` write a run of its
        own (e.g. named ``run.ranked_name``, ``<name>-rank<rank>``), never into rank 0's. Raise
        ``core_monitor.ConfigError`` naming an option whose value is wrong.
        """

    @classmethod
    def check_sdk(cls) -> list[str]:
        """Import the SDK and return what it lacks of what the backend relies on, one short
        phrase each (``["no mysdk.Run._flush"]``); ``[]`` when nothing (or no SDK).

        Run once per process by ``core_monitor.compat.ensure_sdk`` (the backend's ``__init__``)
        and by ``monitors list --check``: a problem becomes a ``BackendLoadError`` naming the
        plugin's distribution, the SDK version and ``tested_sdk``.

        Raises:
            ImportError: the SDK is not installed (the core reports it as a
                ``BackendLoadError`` naming the package to install).
        """

    def monitor_write(self, events: Sequence[Event]) -> None:
        """See the ``monitor_write`` hook specification above."""

    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """See the ``monitor_config`` hook specification above."""

    def monitor_flush(self) -> None:
        """See the ``monitor_flush`` hook specification above."""

    def monitor_close(self) -> None:
        """See the ``monitor_close`` hook specification above."""


class MediaBackend(Backend, Protocol):
    """A ``Backend`` that stores media: it declares the kinds and has the media hook.

    Class attributes:
        media_kinds: the kinds ``monitor_write_media`` stores, a non-empty subset of
            ``{"image", "histogram", "text"}`` (``core_monitor.media.MEDIA_KINDS`` is all
            three). A backend without it (``Backend``) gets scalars only.
    """

    media_kinds: ClassVar[frozenset[str]]

    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """See the ``monitor_write_media`` hook specification above."""
