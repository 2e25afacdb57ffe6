"""The process-wide safety net: close what the user left open, at exit and on SIGTERM.

It holds "things that can be closed" (any object with a ``close()`` method), never a ``Monitor``
as such: ``Monitor`` registers itself when it starts and unregisters itself when it closes. At
interpreter exit (``atexit``) and on SIGTERM every object still registered is closed, newest
first, so rows a backend buffers are not lost when a script forgets ``close()`` or is
terminated (e.g. by a scheduler's SIGTERM before SIGKILL). Closing drains each backend's queue
for at most ``EXIT_TIMEOUT`` seconds (what is left is reported, not lost silently).

Only objects of this process are closed. A forked child (``os.fork``, ``multiprocessing``'s
fork start method, DataLoader workers) inherits the parent's objects but none of its threads.
Just before a fork (``os.register_at_fork``) each registered object's ``before_fork()`` holds
its lock and has its backends write and flush what they hold (so no half-filled buffer is
copied into the child; ``after_fork_in_parent()`` lets go); right after it, in the child,
``after_fork_in_child()`` makes it inert and the child's registry starts empty, so the child's
``sys.exit``, atexit and SIGTERM never flush, close or finish the parent's runs, and the child
exits at once; SIGTERM is blocked across the ``fork()`` itself, so a child terminated before
it first ran (``Pool.terminate()`` after quick work) still dies of it. A child started with
``spawn`` or ``forkserver`` imports afresh: a ``Monitor`` it creates is an ordinary new run.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from typing import Any, Protocol

logger = logging.getLogger("core_monitor")


#: Seconds each backend gets to write its queued calls when closing at exit or on SIGTERM
#: (``Monitor.close(timeout=...)``); schedulers usually wait 30 s or more before SIGKILL. A
#: writer process still making progress then is not killed (``exiting``).
EXIT_TIMEOUT = 20.0


class Closeable(Protocol):
    """What the registry holds: an object whose ``close(timeout)`` may be called once more and
    that can be made inert in a forked child."""

    def close(self, timeout: float | None = None) -> None: ...

    def before_fork(self) -> None: ...

    def after_fork_in_parent(self) -> None: ...

    def after_fork_in_child(self) -> None: ...


#: Objects not yet closed, oldest first. Strong references: a monitor the user dropped without
#: closing must still be closed at exit, or the rows its backends buffer are lost.
_open: dict[int, Closeable] = {}
#: Why this process is closing everything, set on SIGTERM before anything is closed; a writer
#: process is told it with its stop request and reports it as the run's end (``monitor_crash``)
#: where the tracker has a status. ``None`` for an ordinary close or exit.
terminating: str | None = None
#: Whether this process is closing everything at exit or on SIGTERM (``close_all``): the
#: ``EXIT_TIMEOUT`` limit then never ends a writer process that is still making progress
#: (``core_monitor.dispatch.wire.Progress``); a ``close(timeout=)`` of the user's keeps its
#: deadline.
exiting = False
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
    """Close every registered object of this process, newest first, each backend draining
    for at most ``EXIT_TIMEOUT`` seconds. Called at exit and on SIGTERM.

    An exception from one ``close()`` is logged (logger ``core_monitor``) and the others are
    still closed: at exit there is nobody left to raise to.
    """
    global exiting
    exiting = True
    for closeable in reversed(list(_open.values())):
        try:
            closeable.close(timeout=EXIT_TIMEOUT)
        except Exception:
            logger.exception("closing %r at exit failed", closeable)


#: Whether ``_before_fork`` blocked SIGTERM in the forking thread (``_unblock_sigterm``).
_sigterm_blocked = False


def _block_sigterm() -> None:
    """Block SIGTERM in the forking thread across ``fork()`` while this module's handler is
    installed. A child gets the parent's Python-level handler, and a SIGTERM that reaches it
    before CPython's own after-fork step (a ``Pool`` that finished its work and terminates a
    worker not yet scheduled) is cleared there with Python's other pending signals: the child
    lives on, and ``Pool.terminate()`` waits for it forever (95 of 100 children sent SIGTERM
    right after ``fork()`` survived it). Blocked, the signal waits in the kernel until
    ``_after_fork_in_child`` has put the default action back, then ends the child."""
    global _sigterm_blocked
    if _sigterm_installed and hasattr(signal, "pthread_sigmask"):
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        _sigterm_blocked = signal.SIGTERM not in before


def _unblock_sigterm() -> None:
    """Undo ``_block_sigterm`` (in the parent's forking thread, or the child's one thread): a
    SIGTERM that arrived meanwhile is delivered now."""
    global _sigterm_blocked
    if _sigterm_blocked:
        _sigterm_blocked = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _before_fork() -> None:
    for closeable in list(_open.values()):
        try:
            closeable.before_fork()
        except Exception:  # never make the fork fail
            logger.exception("flushing %r before a fork failed", closeable)
    _block_sigterm()  # last: a SIGTERM to this process waits for the fork only


def _after_fork_in_parent() -> None:
    _unblock_sigterm()
    for closeable in list(_open.values()):
        try:
            closeable.after_fork_in_parent()
        except Exception:
            logger.exception("resuming %r after a fork failed", closeable)


def _after_fork_in_child() -> None:
    """In a forked child: make every inherited object inert, forget them all, and give SIGTERM
    back the handling it had before the safety net (a pool's worker dies of it at once)."""
    global _sigterm_installed
    inherited = list(_open.values())
    _open.clear()
    if _sigterm_installed and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        previous = _previous_sigterm if _previous_sigterm is not None else signal.SIG_DFL
        try:
            signal.signal(signal.SIGTERM, previous)
            _sigterm_installed = False
        except (ValueError, OSError):  # not the main thread: the handler then closes nothing
            pass
    _unblock_sigterm()  # a SIGTERM sent meanwhile (``_block_sigterm``) ends the child now
    for closeable in inherited:
        try:
            closeable.after_fork_in_child()
        except Exception:  # never let the child's start fail because of the parent's monitor
            logger.exception("making %r inert in a forked child failed", closeable)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


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
    global terminating
    terminating = (f"the training process (pid {os.getpid()}) received SIGTERM (the job was "
                   "terminated, e.g. preempted or cancelled) and closed the monitor")
    close_all()
    if callable(_previous_sigterm):
        _previous_sigterm(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
