"""dvclive-monitor: the ``dvclive`` backend for core-monitor (DVCLive's own files, every point
at the caller's step), and its reader.

Importing this package imports nothing beyond the standard library and core-monitor; DVCLive is
imported when a backend is constructed or a run's config is read.
"""

from __future__ import annotations

from .backend import DvcliveMonitor
from .reader import read_config, read_crash, read_rows
from .storage import run_dir

__all__ = ["DvcliveMonitor", "read_config", "read_crash", "read_rows", "run_dir"]
