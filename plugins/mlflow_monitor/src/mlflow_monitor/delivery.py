"""``Outbox``: the backend's requests to MLflow, sent in order by one thread, each retried with
back-off while the tracking server is unreachable, so that a server that blinks never ends the
run in MLflow and the hooks never wait on it.

The hooks put requests (``Request``: a callable making one or more MLflow calls, what it
carries, and how much) into the outbox and return; the sending thread takes the oldest, runs
it under ``_compat.request_limits`` (each HTTP attempt bounded by ``request_timeout``, MLflow's
own retries by ``max_retries``: not MLflow's four minutes), and removes it once it returned.
A request that fails with a *transient* error (no answer, a timeout, HTTP 408, 429 or 5xx:
the server down, restarting, or its database down) stays first in line and is tried again
after a back-off of ``FIRST_DELAY`` seconds doubling up to ``max_delay``: once the server is
back, what was kept is sent within ``max_delay`` seconds plus the requests' own time, in the
order logged. A request the server *refuses* (any other HTTP 4xx: a bad value) is dropped,
counted and reported (``refused``), and the requests after it go on (after a refused start of
the run, nothing can be sent: every request is dropped and counted). Retrying a metric
request that reached the server before its answer was lost stores nothing twice: MLflow keeps
one point per ``(key, step, timestamp, value)``.

The convention is OpenTelemetry's exporters' (retry on transient errors with exponential
back-off, drop on a permanent one); the bound on the delay between two attempts is ours.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from core_monitor import BackendWarning
from core_monitor.resume import NoRunToResume

from . import _compat

logger = logging.getLogger("mlflow_monitor")

#: Seconds before the first retry of a failed request; each later wait doubles, up to
#: ``Outbox(max_delay=...)``.
FIRST_DELAY = 0.5


class Request(NamedTuple):
    """One request to MLflow, as the outbox holds it.

    Attributes:
        send: makes the MLflow call(s); raises what MLflow raised.
        kind: what it carries, for the counts: ``"scalars"``, ``"config"``, ``"media"``,
            ``"start"``, ``"crash"`` or ``"end"``.
        amount: how many of ``kind`` (scalars, config keys, media values; 1 for the others).
    """

    send: Callable[[], None]
    kind: str
    amount: int = 1


def transient(error: BaseException) -> bool:
    """Whether a failed MLflow call may succeed if tried again: every failure but an HTTP 4xx
    answer other than 408 (timeout) and 429 (too many requests), which the server gives to a
    request it will always refuse."""
    if isinstance(error, NoRunToResume):  # resume="must" found no run: it never will
        return False
    status = getattr(error, "get_http_status_code", None)
    if status is None:
        return True
    try:
        code = int(status())
    except Exception:
        return True
    return not (400 <= code < 500) or code in (408, 429)


class Outbox:
    """The requests not yet taken by MLflow, and the thread sending them (module docstring).

    Args:
        where: the tracking URI, for the messages.
        request_timeout: seconds each HTTP attempt waits (``_compat.request_limits``).
        max_retries: MLflow's own retries of one attempt (``_compat.request_limits``).
        max_delay: the longest wait in seconds between two attempts of a request (> 0).

    Attributes:
        refused: requests the server refused (``transient`` false): ``{kind: count}``.
        last_error: the last failure of a request, ``None`` once one succeeded after it.
    """

    def __init__(self, where: str, request_timeout: float, max_retries: int,
                 max_delay: float) -> None:
        self.where = where
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.max_delay = max_delay
        self.refused: dict[str, int] = {}
        self.refusal: BaseException | None = None  # the first refusal not yet raised
        self.last_error: BaseException | None = None
        self._items: deque[Request] = deque()
        self._changed = threading.Condition()
        self._stopped = False
        self._taken = 0  # requests taken (or refused) so far
        self._thread = threading.Thread(target=self._send_forever, daemon=True,
                                        name="mlflow_monitor:outbox")
        self._thread.start()

    def put(self, request: Request) -> None:
        """Queue ``request`` behind every earlier one; never waits."""
        with self._changed:
            self._items.append(request)
            self._changed.notify_all()

    def wait_empty(self, timeout: float) -> bool:
        """Wait until every request queued was taken (or refused), for as long as MLflow takes
        them: give up once ``timeout`` seconds passed without one taken (a healthy server with
        a long backlog is waited for; one that is down, hung or restarting is not). Whether
        the queue is empty."""
        with self._changed:
            taken = self._taken
            deadline = time.monotonic() + timeout
            while self._items:
                if self._taken != taken:  # MLflow is taking requests: wait on
                    taken, deadline = self._taken, time.monotonic() + timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def pending(self) -> dict[str, int]:
        """What is queued and not yet taken by MLflow: ``{kind: count}``, in first-queued
        order."""
        counts: dict[str, int] = {}
        with self._changed:
            for request in self._items:
                counts[request.kind] = counts.get(request.kind, 0) + request.amount
        return counts

    def stop(self) -> dict[str, int]:
        """Stop sending (the request being sent, if any, ends first, within its limits); what
        was never taken, ``{kind: count}``."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        self._thread.join(timeout=self.request_timeout * (self.max_retries + 1) + 5)
        left = self.pending()
        with self._changed:
            self._items.clear()
        return left

    def _send_forever(self) -> None:
        delay = FIRST_DELAY
        while True:
            with self._changed:
                while not self._items and not self._stopped:
                    self._changed.wait()
                if self._stopped:
                    return
                request = self._items[0]
            try:
                with _compat.request_limits(self.request_timeout, self.max_retries):
                    request.send()
            except Exception as error:
                if not transient(error):
                    self._refused(request, error)
                    continue
                if self.last_error is None:
                    self._outage(error)
                self.last_error = error
                with self._changed:  # wakes early only to stop
                    if not self._stopped:
                        self._changed.wait(delay)
                delay = min(delay * 2, self.max_delay)
                continue
            if self.last_error is not None:
                logger.info("mlflow: %s answers again; sending what was kept", self.where)
            self.last_error = None
            delay = FIRST_DELAY
            with self._changed:
                self._items.popleft()
                self._taken += 1
                self._changed.notify_all()

    def _refused(self, request: Request, error: BaseException) -> None:
        """Drop ``request``, counted; a refused start drops everything queued (no run)."""
        with self._changed:
            dropped = [self._items.popleft()]
            if request.kind == "start":
                dropped += self._items
                self._items.clear()
            for each in dropped:
                self.refused[each.kind] = self.refused.get(each.kind, 0) + each.amount
            self._taken += 1
            if self.refusal is None:
                self.refusal = error
            self._changed.notify_all()

    def _outage(self, error: BaseException) -> None:
        held = ", ".join(f"{count} {kind}" for kind, count in self.pending().items())
        logger.warning("mlflow: %s did not take a request (%s: %.200s); retrying",
                       self.where, type(error).__name__, error)
        with contextlib.suppress(Exception):  # a filter turning warnings into errors
            self._warn(error, held)

    def _warn(self, error: BaseException, held: str) -> None:
        warnings.warn(
            f"mlflow: {self.where} did not take a request ({type(error).__name__}: "
            f"{error!s:.200}); kept: {held}. Retrying with back-off (at most "
            f"{self.max_delay:g} s apart) until it answers; training is not slowed",
            BackendWarning, stacklevel=2)
