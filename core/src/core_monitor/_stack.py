"""Where a warning the core issues points: the user's frame, not the core's."""

from __future__ import annotations

import os
import sys


def caller_level() -> int:
    """The ``stacklevel`` that makes a warning issued by the function calling this point at
    the first frame outside ``core_monitor`` (the user's call of ``log``, ``flush``, ...)."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
