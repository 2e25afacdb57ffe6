"""``PrometheusMonitor``: the latest value of every tag, served for Prometheus to scrape and
pushed to a Pushgateway."""

from __future__ import annotations

import json
import logging
import os
import socket
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl

from . import _compat
from .storage import (
    DEFAULT_PREFIX,
    NODE_LABEL,
    PREFIX,
    RUN_LABELS,
    STEP_LABELS,
    TARGETS,
    TEXTFILE,
    crash_name,
    help_text,
    reserved_names,
    run_dir,
    split_node,
    step_name,
    timestamp_name,
    unique_name,
)

if TYPE_CHECKING:
    from core_monitor.hookspecs import Backend

log = logging.getLogger("prometheus_monitor")

#: The largest step stored exactly: Prometheus stores every sample value as a float64, whose
#: integers are exact up to 2**53.
MAX_STEP = 2**53


class PrometheusMonitor:
    """Serve the latest value of every tag over HTTP for Prometheus, and push it to a
    Pushgateway at every flush and at close when one is given.

    Constructed by the core as ``PrometheusMonitor(run, **options)``; users select it as
    ``Monitor(["prometheus"], project=..., prometheus={"port": 9400})``. prometheus-client is
    imported here, never when ``prometheus_monitor`` is imported.

    What is exposed (one ``CollectorRegistry`` per backend, nothing of the process's default
    registry): for each tag a gauge ``<prefix>_<tag as storage.metric_name maps it>`` holding
    the latest value logged, the gauge ``<prefix>_step{tag=..., metric=...}`` holding the step
    of that value, and ``<prefix>_last_log_timestamp_seconds`` (the wall time of the latest
    event); after a crash, ``<prefix>_crash_info{..., reason="<why>"} 1``. Every series has
    the labels ``project``, ``run``, ``rank`` and ``host`` (the host
    name): a handful of series per tag and run, no label per step or value. A system sample
    of node ``k`` of a job of several nodes (``system/node<k>/...``) is the gauge the same
    reading has on a single node, labelled ``node="<k>"``; its ``host`` is this host's name
    for this process's own node (``job.node_rank`` of the run's config) and empty (absent to
    Prometheus) for the other nodes, whose host the core does not send. The step series of a
    tag has the labels of its value series. Prometheus stores
    what it samples at each scrape, not each step: the steps between two scrapes are not in
    Prometheus (``capabilities.history == "latest"``).

    Args:
        run: the run (project, name, log_dir, rank) from the core.
        port: the TCP port of the ``/metrics`` endpoint; ``0`` (the default) picks a free one,
            written to ``<run folder>/targets.json`` (Prometheus's ``file_sd_configs`` format)
            and logged; ``None`` serves nothing (push only).
        address: the address the endpoint binds: ``127.0.0.1`` (the default: this machine
            only); ``0.0.0.0`` for a Prometheus on another host.
        prefix: the metric name prefix (``[a-zA-Z_][a-zA-Z0-9_]*``), ``training`` by default.
        pushgateway: a Pushgateway's address (``"127.0.0.1:9091"`` or ``"http://host:9091"``):
            every flush and close replaces the run's group there (``push_to_gateway``, job
            ``<prefix>``, grouping key project, run and rank), so a job shorter than a scrape
            interval still reaches Prometheus. ``None`` (the default): no push.
        push_timeout: seconds one push may take before it fails (default 5).
        textfile: write the registry to ``<log_dir>/<project>/<run>/metrics.prom`` at every
            flush and at close (what ``read_rows`` reads, and what the node exporter's
            textfile collector reads); only with a ``log_dir``.

    Raises:
        OSError: the port is taken, or the run's folder cannot be written.
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="prometheus",
        rows_readable_after="flush",  # metrics.prom is rewritten at every flush
        value_dtype="float64",  # Prometheus's sample values are float64
        history="latest",  # a gauge per tag: the latest value and its step
        max_step=MAX_STEP,  # the step gauge is a float64: exact up to 2**53
        tested_sdk=_compat.TESTED,
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Ranges and formats the annotations of ``__init__`` cannot say.

        Raises:
            ConfigError: ``port`` outside 0..65535, ``prefix`` not a valid metric name,
                ``pushgateway`` empty, or ``push_timeout`` not positive.
        """
        port = options.get("port", 0)
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"prometheus: option port={port!r} must be a TCP port from 0 to "
                              "65535 (0: a free one), or None to serve nothing")
        prefix = options.get("prefix", DEFAULT_PREFIX)
        if not PREFIX.fullmatch(prefix):
            raise ConfigError(f"prometheus: option prefix={prefix!r} is not a valid metric "
                              "name prefix ([a-zA-Z_][a-zA-Z0-9_]*); e.g. prefix='training'")
        gateway = options.get("pushgateway")
        if gateway is not None and not gateway.strip():
            raise ConfigError("prometheus: option pushgateway='' names no Pushgateway; give "
                              "its address, e.g. pushgateway='127.0.0.1:9091', or None")
        timeout = options.get("push_timeout", 5.0)
        if not timeout > 0:
            raise ConfigError(f"prometheus: option push_timeout={timeout!r} must be a number of "
                              "seconds above 0, e.g. push_timeout=5")

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(self, run: RunInfo, *, port: int | None = 0, address: str = "127.0.0.1",
                 prefix: str = DEFAULT_PREFIX, pushgateway: str | None = None,
                 push_timeout: float = 5.0, textfile: bool = True) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self._prefix = prefix
        self._gateway = pushgateway
        self._push_timeout = float(push_timeout)
        self._labels = {"project": run.project, "run": run.name, "rank": str(run.rank),
                        "host": socket.gethostname()}
        self._grouping = {k: self._labels[k] for k in ("project", "run", "rank")}
        self._folder = run_dir(run)
        self._textfile = self._folder / TEXTFILE if textfile and self._folder else None
        if self._folder is not None:
            self._folder.mkdir(parents=True, exist_ok=True)
        self._registry = CollectorRegistry(auto_describe=True)
        self._gauge_class = Gauge
        self._steps = Gauge(step_name(prefix), "The step of the latest value of each tag",
                            [*RUN_LABELS, NODE_LABEL, *STEP_LABELS], registry=self._registry)
        self._last = Gauge(timestamp_name(prefix), "Wall time of the latest value logged, in "
                           "seconds since the epoch", RUN_LABELS, registry=self._registry)
        self._taken = reserved_names(prefix)
        self._node_gauges: dict[str, Any] = {}  # name -> gauge with the node label
        self._node_names: dict[str, set[str]] = {}  # name -> the nodes its gauge holds
        node = run.config.get("job.node_rank")  # a job of several nodes: this process's node
        self._node = str(node) if isinstance(node, int) else None
        self._tags: dict[str, tuple[Any, Any]] = {}  # tag -> (value child, step child)
        self._too_large: set[str] = set()
        self._server: Any = None
        self._thread: Any = None
        self.endpoint: str | None = None  #: ``http://address:port/metrics`` while served
        if port is not None:
            self._serve(address, port)

    def _serve(self, address: str, port: int) -> None:
        from prometheus_client import start_http_server

        self._server, self._thread = start_http_server(port, addr=address,
                                                       registry=self._registry)
        bound = self._server.server_address[1]
        self.endpoint = f"http://{address}:{bound}/metrics"
        log.info("prometheus: serving run %r on %s", self._labels["run"], self.endpoint)
        if self._folder is not None:
            target = [{"targets": [f"{address}:{bound}"], "labels": {}}]
            partial = self._folder / (TARGETS + ".partial")
            partial.write_text(json.dumps(target), encoding="utf-8")
            os.replace(partial, self._folder / TARGETS)

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Set each tag's gauge to ``event.value`` and its step gauge to ``event.step``; a
        point beyond ``MAX_STEP`` is not stored (one ``RuntimeWarning`` per tag)."""
        latest = None
        for event in events:
            if event.step > MAX_STEP:
                self._report_too_large(event.tag, event.step)
                continue
            value, step = self._tags.get(event.tag) or self._add(event.tag)
            value.set(event.value)
            step.set(event.step)
            latest = event.wall_time
        if latest is not None:
            self._last.labels(**self._labels).set(latest)

    def _add(self, tag: str) -> tuple[Any, Any]:
        name = unique_name(self._prefix, tag, self._taken, self._node_names)
        self._taken.add(name)
        node = split_node(tag)[1]
        gauge: Any
        if node is None:
            gauge = self._gauge_class(name, help_text(tag), RUN_LABELS,
                                      registry=self._registry)
            value = gauge.labels(**self._labels)
            labels = {**self._labels, NODE_LABEL: ""}
        else:
            gauge = self._node_gauges.get(name)
            if gauge is None:
                gauge = self._gauge_class(name, help_text(tag), [*RUN_LABELS, NODE_LABEL],
                                          registry=self._registry)
                self._node_gauges[name] = gauge
            self._node_names.setdefault(name, set()).add(node)
            host = self._labels["host"] if node == self._node else ""  # unknown: not invented
            labels = {**self._labels, "host": host, NODE_LABEL: node}
            value = gauge.labels(**labels)
        children = (value, self._steps.labels(**labels, tag=tag, metric=name))
        self._tags[tag] = children
        return children

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Nothing: Prometheus keeps no hyperparameters (a label per value would make a new
        series per run and value), so ``capabilities.stores_config`` is off."""

    @hookimpl
    def monitor_flush(self) -> None:
        """Rewrite ``metrics.prom`` and push to the Pushgateway (when given).

        Raises:
            OSError: the push failed or took more than ``push_timeout`` seconds (the values
                are still served and in ``metrics.prom``; the next flush pushes them again).
        """
        from prometheus_client import push_to_gateway, write_to_textfile

        if self._textfile is not None:
            write_to_textfile(str(self._textfile), self._registry)
        if self._gateway is None:
            return
        try:
            push_to_gateway(self._gateway, job=self._prefix, registry=self._registry,
                            grouping_key=self._grouping, timeout=self._push_timeout)
        except OSError as error:
            raise OSError(f"prometheus: the push to the Pushgateway at {self._gateway!r} "
                          f"failed ({error}); the values are still served"
                          f"{' and in ' + str(self._textfile) if self._textfile else ''}, "
                          "and the next flush or the close pushes them again") from error

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Mark the run crashed: the info metric ``<prefix>_crash_info`` with the label
        ``reason`` (written and pushed by the close that follows), for an alert rule such as
        ``training_crash_info == 1``."""
        from prometheus_client import Info

        crash = Info(crash_name(self._prefix), "Why the run ended by a crash", RUN_LABELS,
                     registry=self._registry)
        crash.labels(**self._labels).info({"reason": reason})

    @hookimpl
    def monitor_close(self) -> None:
        """Flush (write and push a last time), then stop the endpoint and remove
        ``targets.json``. The pushed group stays on the Pushgateway.

        Raises:
            OSError: the last push failed (the endpoint is stopped all the same).
        """
        try:
            self.monitor_flush()
        finally:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._thread.join(timeout=5)
                self.endpoint = None
                if self._folder is not None:
                    (self._folder / TARGETS).unlink(missing_ok=True)

    def _report_too_large(self, tag: str, step: int) -> None:
        if tag in self._too_large:
            return
        self._too_large.add(tag)
        warnings.warn(f"prometheus: a point of tag {tag!r} is not stored: its step {step} is "
                      f"above 2**53, the largest a Prometheus sample (a float64) holds exactly; "
                      "further such points of this tag are dropped without a warning",
                      RuntimeWarning, stacklevel=2)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[Backend] = PrometheusMonitor
