"""The names the backend exposes and writes, shared by the backend and its reader.

Prometheus's data model allows metric names ``[a-zA-Z_:][a-zA-Z0-9_:]*`` and label names
``[a-zA-Z_][a-zA-Z0-9_]*``; colons are for recording rules
(https://prometheus.io/docs/concepts/data_model/, https://prometheus.io/docs/practices/naming/).
A tag becomes a metric name as ``metric_name`` says; the exact tag is kept as the ``tag``
label of the step gauge (``step_name``), which is how a reader maps a metric back to its tag.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from core_monitor import RunInfo

#: The file the backend writes at every flush and at close: the registry in Prometheus's text
#: format (``prometheus_client.write_to_textfile``, the node exporter's textfile collector
#: format), under the run's folder.
TEXTFILE = "metrics.prom"
#: The file naming the HTTP endpoint while the run is open, in Prometheus's ``file_sd_configs``
#: format: ``[{"targets": ["127.0.0.1:PORT"], "labels": {...}}]``; removed at close.
TARGETS = "targets.json"
#: The default metric name prefix (Prometheus: "a single-word application prefix").
DEFAULT_PREFIX = "training"
#: The labels of every series, in order; ``tag`` and ``metric`` are the step gauge's own.
RUN_LABELS = ("project", "run", "rank", "host")
STEP_LABELS = ("tag", "metric")
#: A valid prefix (a metric name without colons).
PREFIX = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

_INVALID = re.compile(r"[^a-zA-Z0-9_]+")


def run_dir(run: RunInfo) -> Path | None:
    """The folder of ``run``: ``<log_dir>/<project>/<name>`` (``<name>-rank<rank>`` above rank
    0, ``run.ranked_name``); ``None`` when the run has no ``log_dir`` (nothing is written)."""
    if run.log_dir is None:
        return None
    return run.log_dir / run.project / run.ranked_name


def step_name(prefix: str) -> str:
    """The gauge holding the step of each tag's latest value: ``<prefix>_step``."""
    return f"{prefix}_step"


def timestamp_name(prefix: str) -> str:
    """The gauge holding the wall time of the latest ``log()``, in seconds since the epoch:
    ``<prefix>_last_log_timestamp_seconds`` (for alerts on a job that stopped logging)."""
    return f"{prefix}_last_log_timestamp_seconds"


def crash_name(prefix: str) -> str:
    """The info metric marking a run that ended by a crash: ``<prefix>_crash`` (exposed as
    ``<prefix>_crash_info{..., reason="..."} 1``, Prometheus's info-metric convention, as
    ``prometheus_client.Info`` writes it); absent from a run that did not crash."""
    return f"{prefix}_crash"


def reserved_names(prefix: str) -> set[str]:
    """The names the backend exposes for itself, which no tag takes."""
    return {step_name(prefix), timestamp_name(prefix), crash_name(prefix),
            f"{crash_name(prefix)}_info"}


def metric_name(prefix: str, tag: str) -> str:
    """The metric name of ``tag`` before collisions are resolved (``unique_name``).

    Every run of characters outside ``[a-zA-Z0-9_]`` becomes one ``_`` (``/`` included, so
    ``train/loss`` -> ``train_loss``), leading and trailing ``_`` are dropped, a trailing
    ``_total`` is dropped (Prometheus keeps that suffix for counters; every metric here is a
    gauge), and ``<prefix>_`` goes in front: ``training_train_loss``. Case is kept. A tag with
    no character left (``损失``) becomes ``<prefix>_tag_<8 hex digits of its SHA-1>``.
    """
    body = _INVALID.sub("_", tag).strip("_")
    if body.endswith("_total"):
        body = body[: -len("_total")].rstrip("_")
    if not body:
        return f"{prefix}_tag_{_digest(tag)}"
    return f"{prefix}_{body}"


def unique_name(prefix: str, tag: str, taken: set[str]) -> str:
    """``metric_name(prefix, tag)``, or, when that name is ``taken`` (by an earlier tag of the
    run or by ``reserved_names``), that name + ``_`` + the first 8 hex digits of the tag's
    SHA-1 (``loss 🔥`` after ``loss``: ``training_loss_5c6e...``). The first tag keeps the plain
    name; the ``tag`` label of the step gauge always names the tag a metric holds."""
    name = metric_name(prefix, tag)
    if name in taken:
        name = f"{name}_{_digest(tag)}"
    return name


def _digest(tag: str) -> str:
    return hashlib.sha1(tag.encode("utf-8")).hexdigest()[:8]
