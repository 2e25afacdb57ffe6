"""The names the backend exposes and writes, shared by the backend and its reader.

Prometheus's data model allows metric names ``[a-zA-Z_:][a-zA-Z0-9_:]*`` and label names
``[a-zA-Z_][a-zA-Z0-9_]*``; colons are for recording rules
(https://prometheus.io/docs/concepts/data_model/, https://prometheus.io/docs/practices/naming/).
A tag becomes a metric name as ``metric_name`` says; the exact tag is kept as the ``tag``
label of the step gauge (``step_name``), which is how a reader maps a metric back to its tag.

A system sample of one node of a job of several nodes (``system/node<k>/...``, as
``core_monitor.system.sampler.prefix`` names it) keeps the name the same tag has on a single
node and gets the label ``node="<k>"`` (``split_node``): one metric per reading, one series
per node, so a query reads every node alike.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
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
#: The label of a node's system samples (``split_node``), on their gauges and on the step
#: gauge (empty, i.e. absent to Prometheus, for every other tag).
NODE_LABEL = "node"
#: A valid prefix (a metric name without colons).
PREFIX = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

_INVALID = re.compile(r"[^a-zA-Z0-9_]+")
#: A node's system tag as the core names it: ``system/node<k>/<reading>``, ``<k>`` a node rank
#: written without leading zeros (``core_monitor.system.sampler.prefix``).
_NODE_TAG = re.compile(r"(system/)node(0|[1-9][0-9]*)/(.+)", re.DOTALL)


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


def split_node(tag: str) -> tuple[str, str | None]:
    """``tag`` without its node level, and the node: ``("system/gpu0/power_watts", "1")`` for
    ``system/node1/gpu0/power_watts``, a sample of node 1 as the core names it on a job of
    several nodes (``core_monitor.system.sampler.prefix``); ``(tag, None)`` for every other
    tag (``system/gpu0/power_watts`` of a single node, ``train/loss``, ``system/node01/x``).
    """
    found = _NODE_TAG.fullmatch(tag)
    if found is None:
        return tag, None
    return found.group(1) + found.group(3), found.group(2)


def metric_name(prefix: str, tag: str) -> str:
    """The metric name of ``tag`` before collisions are resolved (``unique_name``).

    Every run of characters outside ``[a-zA-Z0-9_]`` becomes one ``_`` (``/`` included, so
    ``train/loss`` -> ``train_loss``), leading and trailing ``_`` are dropped, a trailing
    ``_total`` is dropped (Prometheus keeps that suffix for counters; every metric here is a
    gauge), and ``<prefix>_`` goes in front: ``training_train_loss``. Case is kept. A tag with
    no character left (``损失``) becomes ``<prefix>_tag_<8 hex digits of its SHA-1>``.

    A node's system tag is named without its node level (``split_node``):
    ``system/node1/cpu_percent`` -> ``training_system_cpu_percent``, the name of
    ``system/cpu_percent`` on a single node; the backend labels its series ``node="1"``.
    """
    body = _INVALID.sub("_", split_node(tag)[0]).strip("_")
    if body.endswith("_total"):
        body = body[: -len("_total")].rstrip("_")
    if not body:
        return f"{prefix}_tag_{_digest(tag)}"
    return f"{prefix}_{body}"


def help_text(tag: str) -> str:
    """The help (``# HELP``) of the gauge of ``tag``: the tag, quoted. A system reading
    (``system/...``) has one help however many nodes the job has, on a single node and on
    each node (``system/node<k>/...``), as its gauge has one name: a Pushgateway that holds
    runs of both (each run a group) finds every family's help the same, as it requires
    (it logs "inconsistent help strings" and keeps one otherwise).
    """
    reading = split_node(tag)[0]
    if not reading.startswith("system/"):
        return f"The latest value of the tag {tag!r}"
    rest = reading[len("system/"):]
    return (f"The latest value of the tag {reading!r}; on a job of several nodes, of the tag "
            f"'system/node<k>/{rest}' of node k (label {NODE_LABEL}=\"<k>\")")


def unique_name(prefix: str, tag: str, taken: set[str],
                node_names: Mapping[str, set[str]] | None = None) -> str:
    """``metric_name(prefix, tag)``, or, when that name is ``taken`` (by an earlier tag of the
    run or by ``reserved_names``), that name + ``_`` + the first 8 hex digits of the tag's
    SHA-1 (``loss 🔥`` after ``loss``: ``training_loss_5c6e...``). The first tag keeps the plain
    name; the ``tag`` label of the step gauge always names the tag a metric holds.

    A node's system tag (``split_node``) shares a name with the same reading of the other
    nodes: ``node_names`` maps each name whose gauge has the ``node`` label to the nodes it
    holds, and a name held for other nodes only is the tag's too. When the plain name is not
    the tag's (a tag without a node holds it, or this node already does), the hashed name is
    that of the tag without its node, so the nodes of one reading still share one name; the
    hash of the whole tag only if that one is not free either.
    """
    name = metric_name(prefix, tag)
    if name not in taken:
        return name
    reading, node = split_node(tag)
    if node is None:
        return f"{name}_{_digest(tag)}"
    for candidate in (name, f"{name}_{_digest(reading)}"):
        held = None if node_names is None else node_names.get(candidate)
        if candidate not in taken or (held is not None and node not in held):
            return candidate
    return f"{name}_{_digest(tag)}"


def _digest(tag: str) -> str:
    return hashlib.sha1(tag.encode("utf-8")).hexdigest()[:8]
