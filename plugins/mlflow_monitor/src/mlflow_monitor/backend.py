"""``MlflowMonitor``: a run's scalars as MLflow metrics and its config as params.

MLflow is imported when the first ``MlflowMonitor`` is constructed (or by ``check_sdk``),
never at import of this module.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from core_monitor import ConfigError, Event, RunInfo, hookimpl
from core_monitor.resume import NoRunToResume

from . import _compat, output
from .buffer import RowBuffer
from .delivery import MlflowDeliveryError
from .media import MEDIA_KINDS, MediaWriter
from .options import MAX_BATCH, check_options
from .storage import local_store_uri, sqlite_artifact_root


class MlflowMonitor(RowBuffer):
    """Log a run's scalars to MLflow (a tracking server or a local store) through ``MlflowClient``.

    Constructed by the core as ``MlflowMonitor(run, **options)``; users select it as
    ``Monitor(["mlflow"], ..., mlflow={"tracking_uri": "http://127.0.0.1:5000"})``. Only
    ``mlflow.MlflowClient`` is used: a run the user started with ``mlflow.start_run()`` (the
    fluent API's active run) is neither used nor ended.

    Storage: experiment = ``experiment`` (default: the project), run name = the run name
    (``<name>-rank<k>`` on a rank k > 0), one MLflow metric point per scalar with
    ``step`` = the caller's step exactly (0 .. 2**63-1) and ``value`` the float64 as logged
    (MLflow stores +-inf as +-1.7976931348623157e308; the readers turn it back into +-inf).
    ``timestamp`` is the ``log`` call's wall time in milliseconds, made strictly increasing per
    tag (+1 ms after the previous point of that tag when needed), so that MLflow, which orders a
    metric's history by timestamp and drops an exactly identical point, keeps every point in
    the order it was logged. Tags MLflow would refuse are escaped (``mlflow_monitor.storage``).
    The config is stored as params (``storage.param_value``). Images and text are stored as
    run artifacts at the caller's step when ``monitor_write_media`` runs (``media``); MLflow
    has no histogram, so ``media_kinds`` leaves it out and the core skips histograms here.

    Resume (``run.resume``, unless ``run_id`` is given): with ``"allow"`` or ``"must"`` the
    newest run named ``run.ranked_name`` in the experiment is reopened (status ``RUNNING``
    again, then ``FINISHED`` at close) and logged to; ``last_step`` is the largest step of its
    metrics. A step logged again is a second point at that step in the metric's history (the
    run page's chart draws both, ``get_metric_history`` returns both). ``"must"`` with no such
    run raises ``NoRunToResume`` before anything is created (no local store, no experiment,
    no run).

    Rows are buffered and sent with ``MlflowClient.log_batch`` (at most ``batch_size`` metrics
    per request) when the buffer holds ``batch_size`` scalars, when a ``log`` finds the oldest
    buffered row older than ``flush_secs``, at ``Monitor.flush()`` and at ``close()``. After
    ``Monitor.flush()`` every row is readable with ``MlflowClient.get_metric_history``.

    Failures: when a request fails (after ``max_retries`` retries of ``request_timeout``
    seconds each) the hook raises ``MlflowDeliveryError`` once (the core reports it once and
    the other backends carry on) and the backend stops sending for the rest of the run:
    scalars it could not deliver are counted in ``undelivered`` (media values in
    ``undelivered_media``) and, at ``close()``, reported in one ``BackendWarning``. No hook
    then blocks: ``close()`` returns at once. Otherwise
    ``close()`` returns within the time of its requests, each bounded by
    ``request_time_bound(request_timeout, max_retries)`` seconds (17 s by default).

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        tracking_uri: where to log, e.g. ``"http://127.0.0.1:5000"`` or
            ``"sqlite:////abs/path/mlflow.db"``. Default: a URI the user set
            (``MLFLOW_TRACKING_URI`` or ``mlflow.set_tracking_uri``); else, when the monitor
            has a ``log_dir``, the local store ``sqlite:///<log_dir>/mlflow/mlflow.db``; else
            MLflow's own default.
        experiment: experiment name (created when missing). Default: ``run.project``.
        tags: run tags, ``{key: value}`` (values ``str()``-ed); keys must be valid MLflow
            keys.
        run_id: log into this existing run (resume it) instead of creating one. On a rank
            k > 0 a new run ``<name>-rank<k>`` is created in the same experiment.
        request_timeout: seconds (> 0) each HTTP attempt waits to connect and for an answer
            (MLflow's own default: 120).
        max_retries: retries (0..10) of a failed HTTP attempt (MLflow's own default: 7, about
            four minutes with a server down).
        batch_size: metrics per ``log_batch`` request and buffer size (1..1000; 1000 is the
            server's limit).
        flush_secs: send the buffer at the next ``log`` once its oldest row is older than this
            many seconds (>= 0; 0 sends at every ``log``).
        quiet: ``True`` (default) keeps MLflow's own lines off the terminal (the "creating
            database tables" log lines of a new local store, the run's URL printed when it
            ends on a server: ``mlflow_monitor.output``); ``False`` shows them.

    Raises:
        ConfigError: an option has a wrong type or value.
        ImportError, core_monitor.BackendLoadError: MLflow is missing or of an unsupported
            version.
        MlflowDeliveryError: the tracking store could not be reached to create the run
            (the core reports it and carries on without this backend).
    """

    #: Backend name used when the class is passed to ``Monitor`` directly.
    name = "mlflow"
    #: ``Monitor.flush()`` sends every buffered row synchronously.
    rows_readable_after = "flush"
    #: MLflow metric values are float64.
    value_dtype = "float64"
    #: The config is stored as MLflow params (``read_config`` reads it back).
    stores_config = True
    #: ``monitor_write_media`` stores images and text as run artifacts (``media``); MLflow has
    #: no histogram, so the core skips histograms for this backend.
    media_kinds = MEDIA_KINDS
    #: ``run.resume`` reopens the run of that name in the experiment (see "Resume" above).
    supports_resume = True
    #: The MLflow versions this plugin is tested with; outside them the core warns once.
    tested_sdk = _compat.TESTED

    def __init__(
        self,
        run: RunInfo,
        *,
        tracking_uri: str | None = None,
        experiment: str | None = None,
        tags: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        request_timeout: float = 5.0,
        max_retries: int = 2,
        batch_size: int = MAX_BATCH,
        flush_secs: float = 5.0,
        quiet: bool = True,
    ) -> None:
        check_options(tracking_uri, experiment, tags, run_id, request_timeout, max_retries,
                      batch_size, flush_secs)
        if not isinstance(quiet, bool):
            raise ConfigError(f"mlflow: option quiet={quiet!r} must be True or False")
        self.quiet = quiet
        mlflow = _compat.check()
        from mlflow.entities import Metric, Param, RunTag

        self._Metric, self._Param, self._RunTag = Metric, Param, RunTag
        self.run = run
        self.request_timeout = float(request_timeout)
        self.max_retries = max_retries
        self.batch_size = batch_size
        self.flush_secs = float(flush_secs)
        #: Scalars that did not reach MLflow (the server failed, or the tag is too long).
        self.undelivered = 0
        #: Config keys that did not reach MLflow.
        self.undelivered_config = 0
        #: Images and texts that did not reach MLflow.
        self.undelivered_media = 0
        self._error: BaseException | None = None
        self._closed = False
        self._lock = threading.RLock()
        self._buffer: list[Any] = []
        self._oldest = 0.0
        self._keys: dict[str, str | None] = {}
        self._last_ms: dict[str, int] = {}
        self._params: dict[str, str] = {}  # stored key -> stored value, as MLflow has it

        resume = run.resume if run_id is None else "never"  # a run_id given wins
        #: Whether an earlier run was continued; the largest step it held (``None``: none).
        self.resumed, self.last_step = False, None
        if tracking_uri is None and not mlflow.is_tracking_uri_set() and run.log_dir is not None:
            if resume == "must" and not (run.log_dir / "mlflow" / "mlflow.db").exists():
                raise NoRunToResume(f"mlflow: no local store at "
                                    f"{str(run.log_dir / 'mlflow' / 'mlflow.db')!r}")
            (run.log_dir / "mlflow").mkdir(parents=True, exist_ok=True)
            tracking_uri = local_store_uri(run.log_dir)
        with output.hidden(quiet):  # a new local store logs its table creation
            self._client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        #: The tracking URI in use (MLflow's resolution when none was given).
        self.tracking_uri = self._client.tracking_uri
        with self._limits(), output.hidden(quiet):
            try:
                if resume != "never":
                    run_id = self._earlier_run(experiment or run.project, resume)
                self.run_id, self.experiment_id = self._start_run(
                    experiment or run.project, dict(tags or {}), run_id,
                    sqlite_artifact_root(self.tracking_uri), resumed=self.resumed,
                )
            except NoRunToResume:
                raise
            except Exception as error:
                raise MlflowDeliveryError(
                    f"mlflow: could not start the run at {self.tracking_uri}: "
                    f"{type(error).__name__}: {error}"
                ) from error
        self._media = MediaWriter(self._client, self.run_id)
        if run.config:
            self._send_config(run.config)

    def _earlier_run(self, experiment: str, resume: str) -> str | None:
        """The id of the newest run of this name in ``experiment`` (setting ``resumed`` and
        ``last_step``), ``None`` when there is none; ``NoRunToResume`` for ``"must"``."""
        client, name = self._client, self.run.ranked_name
        found = client.get_experiment_by_name(experiment)
        runs = []
        if found is not None:
            quote = next((q for q in ("'", '"') if q not in name), None)
            runs = [r for r in client.search_runs(
                [found.experiment_id], order_by=["attributes.start_time DESC"],
                filter_string="" if quote is None else
                f"attributes.run_name = {quote}{name}{quote}",
                max_results=1 if quote is not None else 50_000)
                if r.info.run_name == name][:1]
        if not runs:
            if resume == "must":
                raise NoRunToResume(f"mlflow: no run named {name!r} in experiment "
                                    f"{experiment!r} at {self.tracking_uri}")
            return None
        self.resumed = True
        self.last_step = max((int(m.step) for m in runs[0].data.to_proto().metrics),
                             default=None)
        return runs[0].info.run_id

    @classmethod
    def check_sdk(cls) -> list[str]:
        """Import MLflow; what it lacks of what the plugin uses (``[]``: nothing). The core
        reports a problem as a ``BackendLoadError`` naming ``tested_sdk``.

        Raises:
            ImportError: MLflow is not installed.
        """
        return _compat.problems()

    # Hooks -------------------------------------------------------------------------------------

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Buffer one MLflow metric point per event; send when a threshold is reached.

        Raises:
            MlflowDeliveryError: sending failed (once per run; later rows are only counted).
            ValueError: a tag is longer than MLflow's 250-character key limit even after
                escaping; the other events of the batch are kept.
        """
        with self._lock:
            if self._error is not None or self._closed:
                self.undelivered += len(events)
                return
            self._add_rows(events)

    # Optional: a core without media never calls it.
    @hookimpl(optionalhook=True)
    def monitor_write_media(self, items: Sequence[Any]) -> None:
        """Store each image and text (``MediaItem``) at its step as run artifacts, now
        (``media``: ``log_image``/``log_text``, one request or more per value, not buffered).

        Raises:
            MlflowDeliveryError: a request failed (once per run; the values of this call not
                yet stored and all later ones are counted in ``undelivered_media``).
            ValueError: a tag is longer than ``storage.MAX_MEDIA_KEY`` characters once escaped;
                the other values of the call are stored.
        """
        with self._lock:
            if self._error is not None or self._closed:
                self.undelivered_media += len(items)
                return
            self._send_media(items)

    @hookimpl
    def monitor_flush(self) -> None:
        """Send every buffered row; afterwards ``get_metric_history`` returns them all.

        Raises:
            MlflowDeliveryError: sending failed (the first time only).
        """
        with self._lock:
            if self._error is None and self._buffer:
                self._send()

    # Optional: a core without this hookspec (before log_config existed) just never calls it.
    @hookimpl(optionalhook=True)
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge hyperparameters given after the start into the run's params.

        A new key becomes a param. A key already stored with another value cannot change
        (MLflow params are immutable): the param keeps its first value and the new value is
        stored in the run tag ``mlflow_monitor.config.<key>``, which ``read_config`` prefers.

        Raises:
            MlflowDeliveryError: the request failed (the first time only).
        """
        with self._lock:
            if self._closed:
                return
            self._send_config(config)

    @hookimpl
    def monitor_close(self) -> None:
        """Send what is buffered, mark the run FINISHED and report undelivered scalars.

        A second call does nothing. With the server already found down, returns at once.

        Raises:
            MlflowDeliveryError: the last send or ending the run failed (first failure only).
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self._error is None and self._buffer:
                    self._send()
                self._finish_run()
            finally:
                self._closed = True
                self._report()
