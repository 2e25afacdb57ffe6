"""Reports every dispatch mode shares: calls dropped for a full buffer, calls never delivered,
and at close what each backend lacks (``report_losses``)."""

from __future__ import annotations

import logging
import shlex
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._stack import caller_level
from ..errors import BackendWarning

logger = logging.getLogger("core_monitor")


def report_drop(name: str, why: str) -> None:
    """Warn once that backend ``name``'s buffer was full (``why``) and calls are dropped."""
    message = (
        f"backend {name!r} is slower than the logging: {why} and on_full='drop' drops the "
        "newest calls for it; Monitor.dropped counts them (the other backends still get every "
        "call). Raise queue_size, log less often, or use on_full='block'."
    )
    logger.warning(message)
    warnings.warn(message, BackendWarning, stacklevel=caller_level())


def report_lost(counts: Mapping[str, int], why: str) -> None:
    """Report, per backend, calls that never reached it: a ``BackendWarning`` (pointing at the
    caller of ``Monitor.close``) and an error on the ``core_monitor`` logger."""
    for name, lost in counts.items():
        message = f"backend {name!r}: {lost} call(s) were not delivered: {why}"
        logger.error(message)
        warnings.warn(message, BackendWarning, stacklevel=caller_level())


#: Why calls never reached a backend, were dropped for it, or were not sent once its budget was
#: spent, per kind of channel (``"process"`` is the default).
LOST = {"process": ("not written when close(timeout={timeout}) gave up or its writer process "
                    "had ended; the backend is not closed"),
        "thread": "still queued when close(timeout={timeout}) gave up; the backend is not closed"}
DROPPED = {"process": "dropped, its buffer was full (on_full='drop')",
           "thread": "dropped, its queue was full (on_full='drop')"}
DETACHED = {"process": "not sent once its budget was spent (it fell too far behind)"}


def report_losses(kinds: Mapping[str, str], undelivered: Mapping[str, int],
                  dropped: Mapping[str, int], detached: Sequence[str], timeout: float | None,
                  journal: Path | None = None, names: Sequence[str] = ()) -> None:
    """At close: report what never reached each backend (``undelivered``), then what was
    dropped for it (``dropped``), then the backends ``detached`` (their budget spent), each
    once, in the words of its channel's kind (``kinds``: backend name -> ``"process"``,
    ``"thread"`` or ``"inline"``). With the run's ``journal`` folder, each report also names
    the calls of backends ``names`` whose cursor has not passed them and the command
    delivering them (``monitors sync``); a backend behind for another reason (it raised, or its
    writer was left to finish its start) is logged at INFO with that command."""
    from ..journal import journal_left  # the journal imports this package's wire

    left: dict[str, int] = {}
    hint = ""
    if journal is not None:
        left = journal_left(journal, list(names))
        hint = f"monitors sync {shlex.quote(str(journal))}"
    told = set()
    spent = {name: left.get(name, 0) for name in detached}
    for counts, texts in ((undelivered, LOST), (dropped, DROPPED), (spent, DETACHED)):
        by_kind: dict[str, dict[str, int]] = {}
        for name, count in counts.items():
            if name not in told:
                by_kind.setdefault(kinds.get(name, "process"), {})[name] = count
        for kind, part in by_kind.items():
            why = texts.get(kind, texts["process"]).format(timeout=timeout)
            for name, count in part.items():
                told.add(name)
                kept = (f". The {left[name]} call(s) its tracker has not confirmed are kept in "
                        f"the run's journal; deliver them with: {hint}"
                        if left.get(name) else "")
                report_lost({name: count}, why + kept)
    for name, count in left.items():
        if name not in told:
            logger.info("backend %r: %d call(s) not confirmed by its tracker are kept in the "
                        "run's journal; deliver them with: %s", name, count, hint)
