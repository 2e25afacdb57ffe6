"""Reading a run back from what the backend exposed: ``metrics.prom`` (what the kit and
``monitors copy`` read), or the same text format served by the endpoint or a Pushgateway."""

from __future__ import annotations

from typing import Any

from core_monitor import RunInfo

from .storage import (
    DEFAULT_PREFIX,
    NODE_LABEL,
    RUN_LABELS,
    TEXTFILE,
    crash_name,
    run_dir,
    step_name,
)

__all__ = ["parse_crash", "parse_rows", "read_config", "read_crash", "read_rows"]


def parse_rows(text: str, run: RunInfo | None = None,
               prefix: str = DEFAULT_PREFIX) -> list[tuple[str, int, float]]:
    """``(tag, step, value)`` of each tag in ``text`` (Prometheus's text format), its latest
    point, sorted by tag.

    Each step series (``tag``, ``metric``) is matched to the series of its ``metric`` with
    the same run labels and ``node`` (the nodes' system samples share one metric name); an
    empty label and a missing one are alike, as in Prometheus.

    Args:
        text: a ``/metrics`` page, a Pushgateway's ``/metrics`` or ``metrics.prom``.
        run: when given, only the series labelled with its project, name and rank.
        prefix: the backend's ``prefix`` option.

    Raises:
        ValueError: ``text`` is not in Prometheus's text format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    want = None if run is None else {"project": run.project, "run": run.name,
                                     "rank": str(run.rank)}
    values: dict[tuple[str, tuple[str, ...]], float] = {}
    steps: list[tuple[str, str, tuple[str, ...], float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if want is not None and any(labels.get(k) != v for k, v in want.items()):
                continue
            key = tuple(labels.get(k, "") for k in (*RUN_LABELS, NODE_LABEL))  # one series
            if sample.name == step_name(prefix) and "tag" in labels:
                steps.append((labels["tag"], labels["metric"], key, sample.value))
            else:
                values[(sample.name, key)] = sample.value
    rows = []
    for tag, metric, key, step in steps:
        if (metric, key) in values:
            rows.append((tag, int(step), float(values[(metric, key)])))
    return sorted(rows)


def parse_crash(text: str, run: RunInfo | None = None,
                prefix: str = DEFAULT_PREFIX) -> str | None:
    """The reason of the crash mark (``<prefix>_crash_info``) in ``text``; ``None`` when there
    is none. Arguments and errors as for ``parse_rows``."""
    from prometheus_client.parser import text_string_to_metric_families

    want = None if run is None else {"project": run.project, "run": run.name,
                                     "rank": str(run.rank)}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if sample.name != f"{crash_name(prefix)}_info" or "reason" not in labels:
                continue
            if want is None or all(labels.get(k) == v for k, v in want.items()):
                return labels["reason"]
    return None


def _textfile(run: RunInfo) -> str | None:
    folder = run_dir(run)
    path = None if folder is None else folder / TEXTFILE
    if path is None or not path.exists():
        return None
    return path.read_text(encoding="utf-8")


def read_crash(run: RunInfo) -> str | None:
    """Why the run ended by a crash, as ``monitor_crash`` was told, from ``metrics.prom``;
    ``None`` for a run that did not crash (or wrote no ``metrics.prom``)."""
    text = _textfile(run)
    return None if text is None else parse_crash(text, run)


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """The run's latest point of each tag as ``(tag, step, value)``, from ``metrics.prom``
    (written at every flush and at close), sorted by tag; ``[]`` when there is none (no
    ``log_dir``, ``textfile=False``, nothing flushed). Only the default prefix is read.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``); for ``run.rank > 0``
            that rank's own file is read.
    """
    text = _textfile(run)
    return [] if text is None else parse_rows(text, run)


def read_config(run: RunInfo) -> dict[str, Any]:
    """``{}``: Prometheus keeps no hyperparameters (``stores_config`` is off); here for
    ``monitors copy``, which reads every backend alike."""
    return {}
