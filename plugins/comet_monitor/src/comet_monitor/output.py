"""What comet_ml prints on its own, and keeping it off the terminal (the ``quiet`` option).

comet_ml logs through the ``comet_ml`` logger (its own stderr handler, ``COMET INFO:`` lines):
at ``end()`` an offline run prints that it is archiving and the ``comet upload <zip>`` command,
an online run its URL and a summary. The summary itself is off (``display_summary_level=0``);
the INFO lines are hidden while the plugin's calls run, warnings and errors still show.
"""

from __future__ import annotations

import contextlib

from core_monitor.output import hidden as _hidden

#: comet_ml's logger.
LOGGER = "comet_ml"


def hidden(quiet: bool) -> contextlib.AbstractContextManager[None]:
    """While the block runs (with ``quiet``), the ``comet_ml`` logger's level is WARNING, then
    what it was (``core_monitor.output.hidden``). Process-wide: a Comet experiment of the
    script's own that logs INFO during the block is quiet too."""
    return _hidden(quiet, loggers=[LOGGER])
