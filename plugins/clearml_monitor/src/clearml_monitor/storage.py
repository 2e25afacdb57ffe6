"""Where and how a run is stored in a ClearML offline session (no SDK import here).

A task's offline session is the folder ``<cache>/offline/<task id>/`` (ClearML's own layout):
``task.json`` (project, name, tags, hyperparameters), ``metrics.jsonl`` (each line a JSON list
of events; a scalar is ``{"type": "training_stats_scalar", "iter": step, "metric": title,
"variant": series, "value": value}``) and ``log.jsonl`` (console and ``report_text`` lines,
each with its ``level``). ``<cache>`` is ClearML's cache folder, ``CLEARML_CACHE_DIR``, which
this plugin sets to ``<log_dir>/clearml`` for the ``Task.init`` of a run unless the variable is
set already.
"""

from __future__ import annotations

import os
from pathlib import Path

from core_monitor import RunInfo

#: The hyperparameter section the config is stored in (ClearML's default for ``connect``).
SECTION = "General"
#: The start of the ``log.jsonl`` error line ``monitor_crash`` writes (the reason follows).
CRASH_PREFIX = "core-monitor crash: "
#: The task tag ``monitor_crash`` adds.
CRASH_TAG = "crashed"


def title_of(tag: str) -> str:
    """The ClearML plot title of ``tag``: the tag up to its last ``/`` (the whole tag without
    one), so ``train/loss`` and ``train/acc`` share the plot ``train``; the series is the whole
    tag, which gives the tag back exactly."""
    return tag.rpartition("/")[0] or tag


def cache_dir(run: RunInfo) -> Path | None:
    """The cache folder the run's session is in: ``CLEARML_CACHE_DIR`` when set, else
    ``<log_dir>/clearml``, else ``None`` (ClearML's default, ``~/.clearml/cache``)."""
    given = os.environ.get("CLEARML_CACHE_DIR")
    if given:
        return Path(os.path.expandvars(os.path.expanduser(given)))
    if run.log_dir is not None:
        return Path(run.log_dir) / "clearml"
    return None
