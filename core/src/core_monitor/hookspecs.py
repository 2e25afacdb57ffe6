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
from typing import Any

import pluggy

from .events import Event

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
