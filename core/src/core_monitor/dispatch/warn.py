"""Reports every dispatch mode shares: calls dropped for a full buffer, calls never delivered."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping

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
