"""The dispatch modes ``Monitor(dispatch=...)`` accepts, and the checks of its dispatch arguments.

``MODES`` maps each mode to its fan-out class (``fanout``); ``new_dispatch`` builds one.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError
from .fanout import FanOut, ProcessDispatch, SyncDispatch, ThreadDispatch
from .policy import Policy

#: The fan-out every mode is (the name the ``Monitor``'s side of dispatch had before channels).
Dispatch = FanOut

#: ``Monitor(dispatch=...)`` -> the fan-out with that mode's default placement
#: (``fanout.MODE_KINDS``).
MODES: dict[str, type[FanOut]] = {
    "process": ProcessDispatch,
    "thread": ThreadDispatch,
    "background": ThreadDispatch,  # the name of "thread" before writer processes existed
    "sync": SyncDispatch,
}
#: What ``Monitor(on_full=...)`` accepts.
ON_FULL = ("block", "drop")
#: The environment variable naming the dispatch of a ``Monitor`` given none (``dispatch=None``,
#: the default): one of ``MODES``; unset or empty means ``"process"``. An operator (or a test
#: suite) picks the placement of every monitor of a job without changing its code.
DISPATCH_ENV = "EXPERIMENT_MONITORS_DISPATCH"
#: The dispatch when neither ``Monitor(dispatch=...)`` nor ``DISPATCH_ENV`` names one.
DEFAULT_DISPATCH = "process"

def default_dispatch(dispatch: str | None) -> str:
    """``dispatch``, or when ``None`` the mode ``DISPATCH_ENV`` names (read now), else
    ``DEFAULT_DISPATCH``.

    Raises:
        ConfigError: ``DISPATCH_ENV`` names no mode (the message names the variable, its value
            and the accepted ones).
    """
    if dispatch is not None:
        return dispatch
    chosen = os.environ.get(DISPATCH_ENV, "").strip()
    if not chosen:
        return DEFAULT_DISPATCH
    if chosen not in MODES:
        raise ConfigError(f"{DISPATCH_ENV}={chosen!r} names no dispatch mode; set it to one of "
                          f"{', '.join(map(repr, MODES))} or unset it (default "
                          f"{DEFAULT_DISPATCH!r})")
    return chosen


def check_dispatch(dispatch: Any, queue_size: Any, on_full: Any) -> None:
    """Check ``Monitor``'s ``dispatch``, ``queue_size`` and ``on_full`` arguments.

    Raises:
        ConfigError: ``dispatch`` not in ``MODES``; ``queue_size`` not an ``int`` >= 1;
            ``on_full`` neither ``"block"`` nor ``"drop"``.
    """
    if not isinstance(dispatch, str) or dispatch not in MODES:
        raise ConfigError(f"dispatch={dispatch!r} must be 'process' (each backend in a writer "
                          "process of its own, the default), 'thread' (each backend on a "
                          "worker thread; 'background' is the same) or 'sync' (on the "
                          "caller's thread)")
    if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
        raise ConfigError(f"queue_size={queue_size!r} must be an int >= 1 (log() calls each "
                          "backend's buffer holds), e.g. queue_size=10000")
    if on_full not in ON_FULL:
        raise ConfigError(f"on_full={on_full!r} must be 'block' (wait for room, lose nothing) "
                          "or 'drop' (drop and count the newest call for that backend)")


def new_dispatch(mode: str, *, strict: bool, queue_size: int, on_full: str) -> FanOut:
    """The fan-out of ``mode`` (checked by ``check_dispatch``), with no backend started."""
    return MODES[mode](Policy(strict=strict), queue_size, on_full)
