"""Keeping an SDK's own lines off the training script's terminal: the ``quiet`` option.

Every first-party backend takes ``quiet: bool = True``. An SDK that prints through a logger, an
environment switch or ``print`` is silenced with ``hidden`` around the plugin's calls into it::

    with hidden(self.quiet, loggers=["comet_ml"]):
        experiment.end()

What it changes is process-wide (a logger's level, a variable, ``sys.stdout``), and several
backends may start or close at once on different threads, so the changes are reference
counted: the first block to enter applies them, the last to leave puts back what was there.
Warnings and errors still show (loggers go to ``WARNING``, not off). An SDK with a switch of
its own (wandb's ``Settings(silent=True)``) uses that instead.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["hidden"]

_lock = threading.Lock()
#: (what is hidden) -> [blocks open, what it was before]: one entry per logger name, variable
#: name, and ``"<stdout>"``.
_open: dict[tuple[str, str], list[Any]] = {}


@contextlib.contextmanager
def hidden(quiet: bool, *, loggers: Iterable[str] = (), env: Mapping[str, str] | None = None,
           stdout: bool = False) -> Iterator[None]:
    """While the block runs (only when ``quiet``), hide what the SDK prints.

    Args:
        quiet: the backend's ``quiet`` option; ``False``: nothing changes.
        loggers: names of the SDK's loggers, set to ``WARNING`` (INFO and DEBUG hidden).
        env: variables the SDK reads to stay silent, set unless the user set them
            (``{"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}``).
        stdout: swap ``sys.stdout`` for a sink (an SDK that ``print``s, with no switch).

    Every change is undone when the last block hiding the same thing leaves.
    """
    if not quiet:
        yield
        return
    keys = [("logger", name) for name in loggers]
    keys += [("env", name) for name in (env or {})]
    keys += [("stdout", "")] if stdout else []
    with _lock:
        for key in keys:
            _enter(key, (env or {}).get(key[1], ""))
    try:
        yield
    finally:
        with _lock:
            for key in reversed(keys):
                _leave(key)


def _enter(key: tuple[str, str], value: str) -> None:
    entry = _open.get(key)
    if entry is not None:
        entry[0] += 1
        return
    kind, name = key
    if kind == "logger":
        logger = logging.getLogger(name)
        _open[key] = [1, logger.level]
        logger.setLevel(max(logging.WARNING, logger.level))
    elif kind == "env":
        _open[key] = [1, os.environ.get(name)]
        os.environ.setdefault(name, value)
    else:
        _open[key] = [1, sys.stdout]
        sys.stdout = io.StringIO()


def _leave(key: tuple[str, str]) -> None:
    entry = _open[key]
    entry[0] -= 1
    if entry[0]:
        return
    del _open[key]
    kind, name = key
    before = entry[1]
    if kind == "logger":
        logging.getLogger(name).setLevel(before)
    elif kind == "env":
        if before is None:
            os.environ.pop(name, None)
    else:
        sys.stdout = before
