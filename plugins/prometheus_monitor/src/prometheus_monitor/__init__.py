"""prometheus-monitor: the ``prometheus`` backend for core-monitor, and its reader.

``Monitor(["prometheus"], project=...)`` serves the latest value of every tag on an HTTP
endpoint for Prometheus to scrape, and pushes it to a Pushgateway at every flush and close
when one is given (``backend.PrometheusMonitor``). ``read_rows(run)`` reads back the latest
point of each tag from ``metrics.prom``, which the backend rewrites at every flush.

Importing this package imports no prometheus-client: core-monitor imports it on every rank
(to check the options) and ``monitors list`` never imports it.
"""

from __future__ import annotations

from .backend import MAX_STEP, PrometheusMonitor
from .reader import parse_crash, parse_rows, read_config, read_crash, read_rows
from .storage import metric_name

__all__ = ["MAX_STEP", "PrometheusMonitor", "metric_name", "parse_crash", "parse_rows",
           "read_config", "read_crash", "read_rows"]
