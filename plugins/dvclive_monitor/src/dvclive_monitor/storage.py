"""Where a run's files are, which file holds a tag, and the run's status: shared by the backend
and the reader."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, unquote

from core_monitor import RunInfo
from core_monitor.status_file import StatusFile

#: Where runs go when the user gives no ``log_dir`` (DVCLive's own default folder).
DEFAULT_DIR = Path("dvclive")
#: DVCLive's files in a run's folder (``Live.metrics_file``, ``Live.params_file``,
#: ``Live.plots_dir``/``metrics``).
METRICS_JSON = "metrics.json"
PARAMS_YAML = "params.yaml"
METRICS_DIR = Path("plots") / "metrics"
#: The plugin's own file: ``running``, ``finished`` or ``crashed: <reason>`` (DVCLive has no
#: run status).
STATUS = "status"
#: The first character of an escaped tag's file name (never the first of a tag stored as is).
ESCAPE = "%"


def run_dir(run: RunInfo) -> Path:
    """``<log_dir>/<project>/<run name>`` (``Live(dir=...)``); ``<run name>-rank<rank>`` above
    rank 0; without ``log_dir``, under ``./dvclive/``."""
    return Path(run.log_dir or DEFAULT_DIR).expanduser() / run.project / run.ranked_name


def metric_name(tag: str) -> str:
    """The name given to ``Live.log_metric`` for ``tag``: the tag itself (DVCLive writes
    ``plots/metrics/<tag>.tsv``, a ``/`` making folders), unless that would not give one file
    of its own under ``plots/metrics``: a part of the tag between ``/`` that is empty, ``.`` or
    ``..``, a last part ``step`` (DVCLive's step column would take its place), or a tag starting
    with ``%``. Those are stored as ``%`` + the whole tag percent-encoded, one file name
    (``"a//b"`` -> ``%a%2F%2Fb``); ``tag_of`` reverses it."""
    parts = tag.split("/")
    if tag.startswith(ESCAPE) or parts[-1] == "step" or any(p in ("", ".", "..") for p in parts):
        return ESCAPE + quote(tag, safe="")
    return tag


def tag_of(name: str) -> str:
    """The tag stored under the metric ``name`` (the inverse of ``metric_name``)."""
    return unquote(name[1:]) if name.startswith(ESCAPE) else name


def status_of(folder: Path) -> StatusFile:
    """The run's ``status`` file beside DVCLive's (``core_monitor.status_file``)."""
    return StatusFile(folder, STATUS)


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` holds a DVCLive run (its metrics, params or summary file)."""
    return any((folder / name).exists() for name in (METRICS_JSON, PARAMS_YAML, METRICS_DIR))
