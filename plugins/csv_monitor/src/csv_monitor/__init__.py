"""csv-monitor: the ``csv`` backend for core-monitor, in Lightning's ``CSVLogger`` layout (the
default) or DeepSpeed's ``csv_monitor`` layout, and its reader.

Importing this package imports nothing beyond the standard library and core-monitor (PyYAML,
for ``hparams.yaml``, is imported when that file is written or read).
"""

from __future__ import annotations

from .backend import CsvMonitor
from .reader import read_config, read_config_in, read_crash, read_rows, read_rows_in
from .storage import run_dir

__all__ = ["CsvMonitor", "read_config", "read_config_in", "read_crash", "read_rows",
           "read_rows_in", "run_dir"]
