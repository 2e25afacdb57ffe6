"""What comet_ml prints on its own, and keeping it off the terminal (the ``quiet`` option).

comet_ml logs through the ``comet_ml`` logger (its own stderr handler, ``COMET INFO:`` lines):
at ``end()`` an offline run prints that it is archiving and the ``comet upload <zip>`` command,
an online run its URL and a summary. The summary itself is off (``display_summary_level=0``);
the INFO lines are hidden while the plugin's calls run, warnings and errors still show.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

#: comet_ml's logger.
LOGGER = "comet_ml"

_lock = threading.Lock()
_depth = 0  # hidden() blocks running now (several runs may start or end at once)
_saved = logging.NOTSET


@contextlib.contextmanager
def hidden(quiet: bool) -> Iterator[None]:
    """While the block runs (with ``quiet``), the ``comet_ml`` logger's level is WARNING, then
    what it was. Process-wide: a Comet experiment of the script's own that logs INFO during the
    block is quiet too."""
    global _depth, _saved
    if not quiet:
        yield
        return
    with _lock:
        if _depth == 0:
            logger = logging.getLogger(LOGGER)
            _saved = logger.level
            logger.setLevel(logging.WARNING)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                logging.getLogger(LOGGER).setLevel(_saved)
