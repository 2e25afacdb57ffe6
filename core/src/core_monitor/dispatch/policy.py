"""The failure policy: what happens when a backend raises, whichever way it is called.

One backend raising never stops the others: they still get the call, the failure is counted
(``Policy.failures``), and without ``strict`` the first failure of a backend is reported once
(a one-line ``BackendWarning``, an error on the ``core_monitor`` logger where logging is
configured, the traceback at DEBUG), the later ones only counted; with ``strict`` the first
exception is re-raised on the caller's thread once every backend got the call.

A backend called away from the caller's thread (a worker thread, a writer process) fails
there: the failure is counted and logged at once, and reported (the ``BackendWarning``, or the
strict re-raise) on the caller's thread at its next ``log``, ``flush`` or ``close``
(``Policy.deliver``). Warnings a writer process issued are replayed the same way.
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from typing import Any

from .._stack import caller_level
from ..errors import BackendWarning

logger = logging.getLogger("core_monitor")


class Policy:
    """Counts, keeps and reports backend failures (module docstring).

    Args:
        strict: re-raise a backend's first exception instead of warning once per backend.

    Attributes:
        strict: as given.
        failures: backend name -> how many of its hook calls (and its start) raised.
        reports: what is still to be reported on the caller's thread: ``("failure", name,
            hook, error)`` or ``("warning", message, category, None)``; checked by
            ``Monitor.log`` as a plain truth test, so it costs nothing while empty.
    """

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self.failures: dict[str, int] = {}
        self.reports: deque[tuple[str, Any, Any, Any]] = deque()
        self._pending: BaseException | None = None

    def failed(self, name: str, hook: str, error: BaseException) -> None:
        """On the caller's thread: count ``error`` against backend ``name``; keep it
        (strict) or report it once. ``hook`` is the hook that raised, or ``"start"``."""
        count = self.failures.get(name, 0)
        self.failures[name] = count + 1
        if self.strict:
            self._keep(name, hook, error, "")
            return
        if count == 0:
            message = failure_message(name, hook, error)
            log_failure(message, error)
            warnings.warn(message, BackendWarning, stacklevel=caller_level())

    def failed_elsewhere(self, name: str, hook: str, error: BaseException, where: str) -> None:
        """``failed`` away from the caller's thread (``where``: "on its thread", "in its
        writer process"): count and log now, report at the caller's next call (``deliver``)."""
        count = self.failures.get(name, 0)
        self.failures[name] = count + 1
        if self.strict:
            if self._keep(name, hook, error, f", {where}"):
                self.reports.append(("failure", name, hook, error))
            return
        if count == 0:
            log_failure(failure_message(name, hook, error), error)
            self.reports.append(("failure", name, hook, error))

    def warn_later(self, message: str, category: type[Warning]) -> None:
        """Issue a warning at the caller's next call (a warning from a writer process)."""
        self.reports.append(("warning", message, category, None))

    def _keep(self, name: str, hook: str, error: BaseException, where: str) -> bool:
        if self._pending is not None:
            return False
        if hasattr(error, "add_note"):  # Python >= 3.11
            error.add_note(f"(raised by backend {name!r} in {hook}{where})")
        self._pending = error
        return True

    def deliver(self, *, raising: bool = True) -> None:
        """On the caller's thread: issue what was kept for it, then raise a strict failure
        (unless ``raising`` is false)."""
        reports = self.reports
        while reports:
            kind, first, second, error = reports.popleft()
            if kind == "warning":
                warnings.warn(first, second, stacklevel=caller_level())
            elif not self.strict:
                warnings.warn(failure_message(first, second, error), BackendWarning,
                              stacklevel=caller_level())
        if raising and self._pending is not None:
            self.raise_pending()

    def raise_pending(self) -> None:
        """Raise (once) the exception a backend raised under ``strict``, if any."""
        error, self._pending = self._pending, None
        if error is not None:
            raise error


def log_failure(message: str, error: BaseException) -> None:
    """Log a backend's failure: ``message`` (one line) as an error on the ``core_monitor``
    logger where logging is configured (without a handler, Python would print it beside the
    ``BackendWarning`` that already says it), the traceback (the writer's too) at DEBUG."""
    if logger.hasHandlers():
        logger.error(message)
    logger.debug("the traceback of: %s", message, exc_info=error)


def failure_message(name: str, hook: str, error: BaseException) -> str:
    """The one report of a backend's failure (``BackendWarning`` and log line)."""
    kind = getattr(error, "remote_type", None) or type(error).__name__
    return (f"backend {name!r} failed in {hook}: {kind}: {error}. The other backends carry "
            "on; further failures of this backend are counted in Monitor.failures, not "
            "reported (strict=True raises instead).")
