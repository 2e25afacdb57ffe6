"""``MlflowMonitor``: a run's scalars as MLflow metrics and its config as params.

MLflow is imported when the first ``MlflowMonitor`` is constructed (or by ``check_sdk``),
never at import of this module.

The class, by concern: the hooks; buffering rows (one MLflow metric point per scalar, its
timestamp made strictly increasing per tag, sent in ``log_batch`` requests when the buffer
holds ``batch_size`` rows or its oldest row is older than ``flush_secs``); and requests to
MLflow and their failures (every request runs under ``_compat.request_limits``, the first
failure raises ``MlflowDeliveryError`` once and stops all later sending, and whatever did not
arrive is counted, ``undelivered``, ``undelivered_config``, ``undelivered_media``, and reported
in one ``BackendWarning`` at close).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import BackendWarning, Capabilities, Event, RunInfo, hookimpl
from core_monitor.resume import NoRunToResume

from . import _compat, output
from . import options as _options
from .media import MEDIA_KINDS, MediaWriter
from .options import MAX_BATCH
from .storage import (
    CONFIG_TAG_PREFIX,
    CRASH_TAG,
    MAX_KEY_LENGTH,
    MAX_MEDIA_KEY,
    MAX_VALUE_LENGTH,
    escape_key,
    local_store_uri,
    param_value,
    sqlite_artifact_root,
)

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend

#: Most params plus tags the tracking server takes in one ``log_batch`` request.
MAX_PARAMS_PER_REQUEST = 100


class MlflowDeliveryError(ConnectionError):
    """MLflow did not take a request of this backend (server down, hung or refusing it).

    The backend stops sending for the rest of the run; see ``MlflowMonitor.undelivered``.
    """


class MlflowMonitor:
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
            keys. When every rank writes its own run, each run also gets the tag ``GROUP_TAG``
            (``job.group``) = ``RunInfo.group`` unless ``tags`` names it: search a job's runs
            with ``tags."job.group" = '<name>'``.
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
        ConfigError: ``resume="must"`` finds no run (``NoRunToResume``); the options' types
            and values are checked before, at ``Monitor()`` (``check_options``).
        ImportError, core_monitor.BackendLoadError: MLflow is missing or of an unsupported
            version.
        MlflowDeliveryError: the tracking store could not be reached to create the run
            (the core reports it and carries on without this backend).
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="mlflow",
        rows_readable_after="flush",  # Monitor.flush() sends every buffered row synchronously
        value_dtype="float64",  # MLflow metric values are float64
        stores_config=True,  # the config as MLflow params (``read_config`` reads it back)
        # images and text as run artifacts (``media``); MLflow has no histogram, so the core
        # skips histograms for this backend.
        media_kinds=MEDIA_KINDS,
        supports_resume=True,  # run.resume reopens the run of that name ("Resume" above)
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Ranges and forms the annotations cannot say, for the options given; run by the core
        in the training process at ``Monitor()``, before MLflow is imported
        (``options.check_options``; ``core_monitor.hookspecs.Backend.check_options``)."""
        _options.check_options(options)

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
        #: The status ``monitor_close`` ends the run with: ``"FINISHED"``, or ``"FAILED"``
        #: once ``monitor_crash`` ran.
        self.end_status = "FINISHED"
        self._lock = threading.RLock()
        self._buffer: list[Any] = []
        self._oldest = 0.0
        self._keys: dict[str, str | None] = {}
        self._last_ms: dict[str, int] = {}
        self._params: dict[str, str] = {}  # stored key -> stored value, as MLflow has it

        resume = run.resume if run_id is None else "never"  # a run_id given wins
        #: Whether an earlier run was continued; the largest step it held (``None``: none).
        self.resumed = False
        self.last_step: int | None = None
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
                    experiment or run.project, _with_group(tags, run.group), run_id,
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

    @staticmethod
    def check_sdk() -> list[str]:  # the core runs it (core_monitor.sdk): what the SDK lacks
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
    def monitor_crash(self, reason: str) -> None:
        """The training process died: store ``reason`` in the run tag ``storage.CRASH_TAG``
        (``mlflow_monitor.crash``) now, and have ``monitor_close`` (called next) end the run
        with status ``FAILED`` instead of ``FINISHED``.

        Raises:
            MlflowDeliveryError: the tag request failed (the first failure only; the run
                then stays ``RUNNING`` in the store, as after any delivery failure).
        """
        with self._lock:
            if self._closed:
                return
            self.end_status = "FAILED"
            if self._error is None:
                try:
                    with self._limits():
                        self._client.set_tag(self.run_id, CRASH_TAG, reason[:MAX_VALUE_LENGTH])
                except Exception as error:
                    self._fail(error, "tag the run as crashed")

    @hookimpl
    def monitor_close(self) -> None:
        """Send what is buffered, end the run (status ``FINISHED``, or ``FAILED`` after
        ``monitor_crash``) and report undelivered scalars.

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

    # Buffering rows -----------------------------------------------------------------------------

    def _add_rows(self, events: Sequence[Event]) -> None:
        """Buffer one metric point per event; send when a threshold is reached.

        Raises:
            MlflowDeliveryError: sending failed (``_send``).
            ValueError: a tag is too long once escaped; the other events are kept.
        """
        metric = self._Metric
        keys = self._keys
        last_ms = self._last_ms
        buffer = self._buffer
        if not buffer:
            self._oldest = time.monotonic()
        too_long = []
        for tag, value, step, wall_time in events:
            key = keys.get(tag, "")
            if key == "":
                key = keys[tag] = self._key_for(tag)
            if key is None:
                too_long.append(tag)
                continue
            ms = int(wall_time * 1000)
            previous = last_ms.get(key)
            if previous is not None and ms <= previous:
                ms = previous + 1
            last_ms[key] = ms
            buffer.append(metric(key, value, ms, step))
        if len(buffer) >= self.batch_size or (
            buffer and time.monotonic() - self._oldest >= self.flush_secs
        ):
            self._send()
        if too_long:
            self.undelivered += len(too_long)
            raise ValueError(
                f"mlflow: tag {too_long[0]!r:.80} is longer than MLflow's "
                f"{MAX_KEY_LENGTH}-character key limit once escaped; {len(too_long)} "
                "scalar(s) of this call were not stored in MLflow (the others were). Fix: "
                f"use tags of at most {MAX_KEY_LENGTH} characters"
            )

    def _key_for(self, tag: str) -> str | None:
        key = escape_key(tag)
        return key if len(key) <= MAX_KEY_LENGTH else None

    # Requests to MLflow and their failures --------------------------------------------------------

    def _limits(self) -> Any:
        return _compat.request_limits(self.request_timeout, self.max_retries)

    def _start_run(
        self, experiment: str, tags: dict[str, Any], run_id: str | None, artifacts: str | None,
        resumed: bool = False,
    ) -> tuple[str, str]:
        client = self._client
        name = self.run.ranked_name
        if run_id is not None:
            existing = client.get_run(run_id)
            experiment_id = existing.info.experiment_id
            if self.run.rank == 0 or resumed:  # resumed: this rank's own run
                self._params.update(existing.data.params)
                client.update_run(run_id, status="RUNNING")
                for key, value in tags.items():
                    client.set_tag(run_id, key, str(value))
                return run_id, experiment_id
        else:
            found = client.get_experiment_by_name(experiment)
            if found is None:
                try:
                    experiment_id = client.create_experiment(experiment,
                                                             artifact_location=artifacts)
                except Exception:  # another rank or process created it meanwhile
                    found = client.get_experiment_by_name(experiment)
                    if found is None:
                        raise
                    experiment_id = found.experiment_id
            else:
                experiment_id = found.experiment_id
        created = client.create_run(
            experiment_id, run_name=name, tags={k: str(v) for k, v in tags.items()}
        )
        return created.info.run_id, experiment_id

    def _send(self) -> None:
        batch, self._buffer = self._buffer, []
        sent = 0
        try:
            with self._limits():
                for start in range(0, len(batch), self.batch_size):
                    chunk = batch[start : start + self.batch_size]
                    self._client.log_batch(self.run_id, metrics=chunk, synchronous=True)
                    sent += len(chunk)
        except Exception as error:
            self.undelivered += len(batch) - sent
            self._fail(error, f"send {len(batch) - sent} scalar(s)")

    def _send_config(self, config: Mapping[str, Any]) -> None:
        if self._error is not None:
            self.undelivered_config += len(config)
            return
        params, tags, skipped = [], [], []
        for name, value in config.items():
            key = escape_key(str(name))
            text = param_value(value)
            if len(key) > MAX_KEY_LENGTH:
                skipped.append(name)
            elif key not in self._params:
                params.append(self._Param(key, text))
            elif self._params[key] != text:
                tag = CONFIG_TAG_PREFIX + key
                if len(tag) > MAX_KEY_LENGTH:
                    skipped.append(name)
                else:
                    tags.append(self._RunTag(tag, text))
        entries = [*params, *tags]
        sent = 0
        try:
            with self._limits():
                for start in range(0, len(entries), MAX_PARAMS_PER_REQUEST):
                    chunk = entries[start : start + MAX_PARAMS_PER_REQUEST]
                    self._client.log_batch(
                        self.run_id,
                        params=[e for e in chunk if isinstance(e, self._Param)],
                        tags=[e for e in chunk if isinstance(e, self._RunTag)],
                        synchronous=True,
                    )
                    for entry in chunk:
                        if isinstance(entry, self._Param):
                            self._params[entry.key] = entry.value
                    sent += len(chunk)
        except Exception as error:
            self.undelivered_config += len(entries) - sent
            self._fail(error, f"store {len(entries) - sent} config key(s)")
        if skipped:
            self.undelivered_config += len(skipped)
            warnings.warn(
                f"mlflow: config key {skipped[0]!r:.80} (and {len(skipped) - 1} more) is longer "
                f"than MLflow's {MAX_KEY_LENGTH}-character key limit once escaped and was not "
                "stored as a param; use shorter config keys",
                BackendWarning,
                stacklevel=2,
            )
    def _send_media(self, items: Sequence[Any]) -> None:
        """Store each image and text now (``media.MediaWriter``), each under the limits.

        Raises:
            MlflowDeliveryError: a request failed (the rest of the call is undelivered).
            ValueError: a tag is too long once escaped; the other values are stored.
        """
        too_long = []
        for index, item in enumerate(items):
            try:
                with self._limits():
                    if not self._media.write(item):
                        too_long.append(item.tag)
            except Exception as error:
                self.undelivered_media += len(items) - index
                self._fail(error, f"store {len(items) - index} media value(s)")
        if too_long:
            self.undelivered_media += len(too_long)
            raise ValueError(
                f"mlflow: media tag {too_long[0]!r:.80} is longer than "
                f"{MAX_MEDIA_KEY} characters once escaped (MLflow puts it in a file name); "
                f"{len(too_long)} media value(s) of this call were not stored in MLflow (the "
                f"others were). Fix: use media tags of at most {MAX_MEDIA_KEY} characters"
            )

    def _finish_run(self) -> None:
        """End the run with ``end_status`` unless sending already failed
        (``MlflowDeliveryError`` if it fails now)."""
        if self._error is None:
            try:
                with self._limits(), output.hidden(self.quiet):
                    self._client.set_terminated(self.run_id, status=self.end_status)
            except Exception as error:
                self._fail(error, "end the run")

    def _fail(self, error: BaseException, what: str) -> None:
        self._error = error
        # Nothing more is sent: rows still buffered (a config or media request failed) are
        # undelivered too.
        self.undelivered += len(self._buffer)
        self._buffer = []
        raise MlflowDeliveryError(
            f"mlflow: could not {what} to {self.tracking_uri} (run {self.run_id}): "
            f"{type(error).__name__}: {error}. Nothing more is sent for this run; scalars "
            "and media logged from now on are counted in MlflowMonitor.undelivered and "
            "undelivered_media"
        ) from error

    def _report(self) -> None:
        if self.undelivered or self.undelivered_config or self.undelivered_media:
            reason = (f"{type(self._error).__name__}: {self._error}" if self._error is not None
                      else "tags longer than MLflow's key limit")
            warnings.warn(
                f"mlflow: {self.undelivered} scalar(s), {self.undelivered_media} media value(s) "
                f"and {self.undelivered_config} config key(s) of run {self.run.name!r} were not "
                f"delivered to {self.tracking_uri} "
                f"(run {self.run_id}): {reason:.300}",
                BackendWarning,
                stacklevel=2,
            )


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = MlflowMonitor


#: The tag naming the job's run group on each rank's run (``RunInfo.group``).
GROUP_TAG = "job.group"


def _with_group(tags: Mapping[str, Any] | None, group: str | None) -> dict[str, Any]:
    """The run's tags, with ``GROUP_TAG`` for a job whose ranks each write a run."""
    out = dict(tags or {})
    if group is not None:
        out.setdefault(GROUP_TAG, group)
    return out
