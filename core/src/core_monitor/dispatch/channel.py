"""``Channel``: how one backend's calls reach it, whichever way it runs.

The fan-out (``fanout.FanOut``) holds one channel per started backend, in start order, and
hands every call to all of them in one pass. A channel is one of three kinds, chosen per
backend when it starts (``FanOut.placement``):

==============  ==========================================  ===============================
``kind``        where the backend's hooks run               class
==============  ==========================================  ===============================
``"inline"``    the caller's thread, before ``log()`` ends  ``sync.InlineChannel``
``"thread"``    a worker thread of its own                  ``threads.ThreadChannel``
``"process"``   a writer process of its own                 ``processes.WriterChannel``
==============  ==========================================  ===============================

Every kind holds the same call, the ``(hook, kwargs)`` the ``Monitor`` built: an in-line
channel calls ``hook(**kwargs)``, a thread channel's queue holds that tuple, a writer channel's
pipe holds its encoding (``wire``; encoded once per call, whatever the number of writers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

#: What ``Channel.make_room`` answers: the call fits now (``ROOM``), the channel's buffer is
#: full and the call is dropped for it (``FULL``, ``on_full="drop"``), or whatever drains the
#: buffer is gone (``GONE``: a thread or writer process that died).
ROOM, FULL, GONE = "room", "full", "gone"


class BackendSpec(NamedTuple):
    """A backend to start: the name it was selected by, its class, the user's options, and
    whether the class came from an installed entry point (so any interpreter imports it)."""

    name: str
    cls: type
    options: Mapping[str, Any]
    installed: bool = False


class Channel:
    """One started backend's channel (module docstring): its buffer, how a call gets into it,
    how it is flushed and stopped.

    Attributes:
        kind: ``"inline"``, ``"thread"`` or ``"process"``.
        name: the backend's name.
        skipped: calls of the fan-out's count (``FanOut.sent``) this channel never got
            (dropped for a full buffer, or lost: its thread or process was gone).
        full: why its buffer counts as full, for the drop warning (``warn.report_drop``).
    """

    kind: ClassVar[str]
    name: str
    full = "its buffer is full"
    #: The journal's seq of the first call this channel did not get (dropped, or its
    #: writer gone), ``None`` while it got every call: its cursor never passes it.
    gap: int | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.skipped = 0

    def make_room(self, size: int, on_full: str) -> str:
        """Wait for room for one more call (a frame of ``size`` bytes, 0 when unencoded) as
        ``on_full`` says; ``ROOM``, ``FULL`` or ``GONE``. Writes nothing: an interrupt while
        waiting leaves no trace of the call."""
        return ROOM

    def counts_gone(self) -> bool:
        """Whether a call refused for ``GONE`` is counted in ``undelivered`` now (a writer that
        died is counted once, at close; one that failed to start was reported as that)."""
        return True

    def request_flush(self) -> Any:
        """Ask for everything sent before to be written and flushed (under the monitor's
        lock); a ticket for ``wait_flushed``."""
        return None

    def wait_flushed(self, ticket: Any, deadline: float | None) -> bool:
        """Wait until the flush of ``ticket`` is done (or the channel ended), at most until
        ``deadline`` (``time.monotonic()``; ``None``: no limit); whether it is done."""
        return True

    def pending(self, sent: int) -> int:
        """Calls handed to this channel (``sent`` in all by the fan-out) not yet written."""
        return 0

    def request_stop(self, reason: str | None) -> None:
        """Nothing more comes: end once what is buffered is written (``reason``: why the
        process is closing, e.g. SIGTERM, for a writer's ``monitor_crash``)."""

    def forget(self) -> None:
        """In a forked child: let go of everything inherited, never writing to it."""
