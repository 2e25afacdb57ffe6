"""swanlab-monitor: the ``swanlab`` backend for core-monitor (a SwanLab run, every point at
the caller's step), and its reader.

Importing this package imports nothing beyond the standard library and core-monitor; SwanLab
is imported when a backend is constructed or a run is read back.
"""

from __future__ import annotations

from .backend import SwanlabMonitor
from .reader import find_run_dir, read_config, read_finish, read_media, read_rows

__all__ = ["SwanlabMonitor", "find_run_dir", "read_config", "read_finish", "read_media",
           "read_rows"]
