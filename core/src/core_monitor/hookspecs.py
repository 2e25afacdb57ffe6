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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pluggy

from .capabilities import CAPABILITY_VALUES as CAPABILITY_VALUES
from .capabilities import Capabilities
from .events import Event
from .media import MediaItem

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
    ``Text``: ``text``). The core sends only the kinds the class declares in
    ``capabilities.media_kinds``
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

    A backend that cannot do this (its SDK has no flush) declares
    ``Capabilities(rows_readable_after="close")`` and documents it.
    """


@hookspec
def monitor_close() -> None:
    """Flush, release files, threads and processes, and finish the run.

    The core calls it once per backend, as the last call: no hook follows it, and a second
    ``Monitor.close()`` does not call it again (``core_monitor.dispatch`` drops its channels
    before closing; the contract kit's ``test_no_hook_is_called_after_close`` proves it), so a
    backend needs no ``if self._closed: return`` guard.
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

#: ``Capabilities`` (the one declaration of what a backend class stores and needs) lives in
#: ``core_monitor.capabilities``, which imports no pluggy; it is re-exported here and from
#: ``core_monitor``.


class Backend(Protocol):
    """The shape of a backend class, on one screen (``typing.Protocol``); for a backend that
    stores media too, ``MediaBackend`` below.

    The core constructs the class registered under the ``experiment_monitors`` entry-point
    group once per run, on rank 0 (on every rank with ``Monitor(..., rank_zero_only=False)``),
    as ``Backend(run, **options)``. Before that, in the training process at ``Monitor()``
    (importing the plugin's module, not its SDK), it checks:

    * the options: every key is a keyword parameter of ``__init__``, every value has the
      type its annotation says (``core_monitor.options``: ``bool``, ``int``, ``float``,
      ``str``, ``None``, ``Literal``, unions, ``Path``, ``Mapping``/``Sequence``), then the
      optional ``check_options`` classmethod (below) checks what types cannot say;
    * the SDK: the distribution ``capabilities.tested_sdk`` names is installed (from metadata).

    Where it constructs the backend (the writer process by default) it runs ``check_sdk`` once
    per process (``core_monitor.sdk.ensure_sdk``), then ``cls(run, **options)``, then calls
    the hooks (each marked with ``@hookimpl``) by keyword, never after ``monitor_close``. Only
    ``monitor_write`` is needed for a working backend: the core skips a hook a backend lacks
    (``monitor_config`` with one ``BackendWarning``) and runs a class without
    ``capabilities``, ``check_options`` or ``check_sdk``; this protocol is the complete shape,
    which ``monitors new`` generates and a type checker checks (``_shape: type[Backend] =
    MyMonitor`` in the generated module).

    Class attributes:
        capabilities: everything the class declares about itself, at once
            (``core_monitor.Capabilities``: ``name``, ``rows_readable_after``,
            ``value_dtype``, ``stores_config``, ``media_kinds``, ``supports_resume``,
            ``tested_sdk``), read by the core and the contract kit
            through ``Capabilities.of``.

    An optional classmethod ``check_options(options: Mapping[str, Any]) -> None`` checks what
    the annotations cannot (ranges, formats, values that go together): ``options`` are the
    user's options for this backend (only those given), their types already checked. The core
    calls it in the training process at ``Monitor()``, before any backend is constructed and
    without the SDK, so a wrong value fails at once on every rank; it raises
    ``core_monitor.ConfigError`` naming the backend, the option, the value and the fix
    (``"mysdk: retries=-1 must be >= 0, e.g. retries=3"``). Not a protocol member, so a class
    without it still has the ``Backend`` shape.

    An optional classmethod ``from_deepspeed(section: Mapping[str, Any]) -> dict[str, Any]``
    reads DeepSpeed's own config section for the tracker (the section named like the backend;
    ``core_monitor.integrations.deepspeed``); a backend without
    such a section has none.
    """

    capabilities: ClassVar[Capabilities]

    def __init__(self, run: RunInfo, **options: Any) -> None:
        """Open the run's storage for ``run`` (project, name, config, log_dir, rank).

        The options arrive checked (types and ``check_options``) and the SDK checked
        (``check_sdk``). Store ``run.config`` when ``capabilities.stores_config``. On
        ``run.rank > 0`` write a run of its own (e.g. named ``run.ranked_name``,
        ``<name>-rank<rank>``), never into rank 0's. Raise ``core_monitor.ConfigError`` for
        what only the SDK can refuse (naming the option, the value and the fix).
        """

    @property
    def check_sdk(self) -> Callable[[], list[str]]:
        """A function of no arguments that imports the SDK and returns what it lacks of what
        the backend relies on, one short phrase each (``["no mysdk.Run._flush"]``); ``[]``
        when nothing. Declared as a class attribute, usually in one line::

            check_sdk = staticmethod(_compat.problems)  # the plugin's fenced SDK internals
            check_sdk = staticmethod(no_sdk)  # no SDK (``core_monitor.sdk.no_sdk``)

        (a ``staticmethod`` or ``classmethod`` of the class's own fits the same shape; the
        protocol spells it as a read-only property only so a type checker accepts all three).

        Run by the core once per process before the backend is first constructed
        (``core_monitor.sdk.ensure_sdk``) and by ``monitors list --check``: a problem
        becomes a ``BackendLoadError`` naming the plugin's distribution, the SDK version and
        ``capabilities.tested_sdk``. A backend never calls it itself.

        Raises:
            ImportError: (the function) the SDK is not installed (the core reports it as a
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
    """A ``Backend`` that stores media: its ``capabilities.media_kinds`` names the kinds (a
    non-empty subset of ``{"image", "histogram", "text"}``, ``core_monitor.media.MEDIA_KINDS``
    is all three) and it has the media hook. A backend without them (``Backend``) gets
    scalars only."""

    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """See the ``monitor_write_media`` hook specification above."""
