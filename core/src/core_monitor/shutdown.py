"""The process-wide safety net: close what the user left open, at exit and on SIGTERM.

It holds "things that can be closed" (any object with a ``close()`` method), never a ``Monitor``
as such: ``Monitor`` registers itself when it starts and unregisters itself when it closes. At
interpreter exit (``atexit``) and on SIGTERM every object still registered is closed, newest
first, so rows a backend buffers are not lost when a script forgets ``close()`` or is
terminated (e.g. by a scheduler's SIGTERM before SIGKILL).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from typing import Any, Protocol

logger = logging.getLogger("core_monitor")


class Closeable(Protocol):
    """What the registry holds: an object whose ``close()`` may be called once more."""

    def close(self) -> None: ...


#: Objects not yet closed, oldest first. Strong references: a monitor the user dropped without
#: closing must still be closed at exit, or the rows its backends buffer are lost.
_open: dict[int, Closeable] = {}
_previous_sigterm: Any = None
_sigterm_installed = False


def register(closeable: Closeable) -> None:
    """Close ``closeable`` at exit and on SIGTERM unless ``unregister`` is called first.

    Registering again (after the SDKs started) moves the ``atexit`` handler ahead of the ones
    those SDKs registered in their own start-up (Trackio's, for one): ``atexit`` runs the last
    registered first, so the backends are closed while their SDKs still work.
    """
    _open[id(closeable)] = closeable
    atexit.unregister(close_all)
    atexit.register(close_all)
    _install_sigterm()


def unregister(closeable: Closeable) -> None:
    """Forget ``closeable`` (it closed itself); unknown objects are ignored."""
    _open.pop(id(closeable), None)


def close_all() -> None:
    """Close every registered object of this process, newest first. Called at exit.

    An exception from one ``close()`` is logged (logger ``core_monitor``) and the others are
    still closed: at exit there is nobody left to raise to.
    """
    for closeable in reversed(list(_open.values())):
        try:
            closeable.close()
        except Exception:
            logger.exception("closing %r at exit failed", closeable)


def _install_sigterm() -> None:
    """Close everything on SIGTERM, then let the previous handler (or the default) run.

    Only from the main thread (``signal.signal`` raises elsewhere), and never over a SIGTERM
    the process chose to ignore.
    """
    global _sigterm_installed, _previous_sigterm
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return
    _previous_sigterm = previous
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    close_all()
    if callable(_previous_sigterm):
        _previous_sigterm(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
