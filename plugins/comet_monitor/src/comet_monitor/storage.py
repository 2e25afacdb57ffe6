"""Where a run's offline archives are, and the names this plugin stores in them. Imports no
comet_ml; the backend and the reader both import it, so writing and reading cannot drift
apart."""

from __future__ import annotations

import os
from pathlib import Path

from core_monitor import RunInfo

#: Comet's own default offline directory (``comet.offline_directory``), used when the monitor
#: has no ``log_dir`` and ``COMET_OFFLINE_DIRECTORY`` is not set.
DEFAULT_DIR = Path(".cometml-runs")
#: The ``log_other`` key and the tag that mark a run whose training process died
#: (``CometMonitor.monitor_crash``); the ``log_other`` value is the reason.
CRASH_OTHER = "crash_reason"
CRASH_TAG = "crashed"
#: The ``log_other`` key holding the job's run group (``RunInfo.group``) when every rank writes
#: an experiment of its own: Comet experiments have no group field; an "Other" value is a
#: column its project view groups and filters by, and ``API.query(..., Other("job.group") ==
#: <group>)`` finds the job's experiments.
GROUP_OTHER = "job.group"
#: The sub-folder of the run folder Comet writes the final archive in at ``end()`` (the
#: backend then moves it into the run folder, over the archive of the last flush).
STAGING = ".ending"
#: The upload metadata keys holding a text sample's tag and an image's caption (``media``).
TAG_KEY, CAPTION_KEY = "tag", "caption"


def run_dir(run: RunInfo) -> Path:
    """The folder Comet's ``offline_directory`` is for ``run``: ``<log_dir>/comet/<project>/
    <run name>`` (``<run name>-rank<r>`` above rank 0, ``RunInfo.ranked_name``); without a
    ``log_dir``, ``<COMET_OFFLINE_DIRECTORY or .cometml-runs>/<project>/<run name>``. Every
    archive of the run (one per process that wrote it: a resumed run has several) is a
    ``*.zip`` in it, and ``comet upload <folder>/*.zip`` uploads them."""
    if run.log_dir is not None:
        root = Path(run.log_dir).expanduser() / "comet"
    else:
        root = Path(os.environ.get("COMET_OFFLINE_DIRECTORY") or DEFAULT_DIR).expanduser()
    return root / run.project / run.ranked_name
