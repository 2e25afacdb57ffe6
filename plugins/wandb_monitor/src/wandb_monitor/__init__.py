"""Weights & Biases backend for ``core-monitor``: every point at the caller's step, none dropped.

wandb keeps one history row per ``log`` call and, given ``step=``, drops a row whose step is lower
than an earlier one (with only a warning). This backend therefore never passes ``step=``: it logs
the caller's step as a metric of the row (``global_step``, name configurable) declared with
``define_metric(step_metric, hidden=True)`` and ``define_metric("*", step_metric=step_metric)``,
so charts use it as their x-axis and wandb's own ``_step`` is only a row counter. Every point is
kept, including lower and repeated steps.

Layout: wandb's own, ``<log_dir>/wandb/offline-run-<YYYYmmdd_HHMMSS>-<id>/run-<id>.wandb`` (or
``run-...`` folders online), so ``wandb sync <log_dir>/wandb/offline-run-...`` uploads it.
``log_dir=None`` leaves the folder to wandb (``WANDB_DIR``, else the current directory).

After a crash (the training process killed, ``os._exit``, a segfault: the core's writer process
calls ``monitor_crash``) the run finishes with exit code 1 (``CRASH_EXIT_CODE``), which wandb
shows as a failed run; ``read_exit_code`` reads the code back (0 after a normal close).

Modules, each importing only those listed after it: ``backend`` (the hooks), ``reader``
(read-back from the ``.wandb`` transaction log: scalars, config, media), ``media`` (writing
images, histograms and text), ``service`` (the wandb-core process's lifecycle), ``storage``
(the step metric, the escaping of reserved tags and keys), ``_compat`` (every wandb internal
the plugin uses, the ``.wandb`` format decoder, and their check). Importing this package does
not import wandb; the backend's constructor does.
"""

from __future__ import annotations

from ._compat import read_records
from .backend import WandbMonitor
from .reader import find_run_dirs, read_config, read_exit_code, read_media, read_rows
from .service import CRASH_EXIT_CODE, FINISH_TIMEOUT
from .storage import DEFAULT_STEP_METRIC, ESCAPE

__all__ = [
    "CRASH_EXIT_CODE",
    "DEFAULT_STEP_METRIC",
    "ESCAPE",
    "FINISH_TIMEOUT",
    "WandbMonitor",
    "find_run_dirs",
    "read_config",
    "read_exit_code",
    "read_media",
    "read_records",
    "read_rows",
]
