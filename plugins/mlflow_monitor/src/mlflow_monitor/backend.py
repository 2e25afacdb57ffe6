"""``MlflowMonitor``: a run's scalars as MLflow metrics and its config as params.

MLflow is imported when the first ``MlflowMonitor`` is constructed (or by ``check_sdk``),
never at import of this module.

The class, by concern: the hooks; buffering rows (one MLflow metric point per scalar, its
timestamp made strictly increasing per tag, sent in ``log_batch`` requests when the buffer
holds ``batch_size`` rows or its oldest row is older than ``flush_secs``); and requests to
MLflow, queued in order in an ``delivery.Outbox`` whose thread sends them, retrying with
back-off while the server is unreachable (the hooks never wait on MLflow, but ``monitor_flush``
and ``monitor_close`` for a bounded time).
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import BackendWarning, Capabilities, Event, RunInfo, hookimpl
from core_monitor.output import hidden
from core_monitor.resume import NoRunToResume

from . import _compat
from . import options as _options
from .delivery import Outbox, Request, transient
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
    media_key,
    param_value,
    sqlite_artifact_root,
)

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend

#: What ``quiet`` hides (``core_monitor.output.hidden``): the INFO lines MLflow logs when it
#: creates a local SQLite store (``Creating initial MLflow database tables...``) and, on a
#: tracking server, the two lines a run's end prints on stdout (``View run ... at: http://...``,
#: off with ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` unless the user set it). Both are
#: process-wide while the plugin's calls run; warnings and errors still show.
QUIET_LOGGERS = ("mlflow.store.db.utils",)
QUIET_ENV = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
#: Most params plus tags the tracking server takes in one ``log_batch`` request.
MAX_PARAMS_PER_REQUEST = 100


class MlflowDeliveryError(ConnectionError):
    """MLflow has not taken requests of this backend: the server is unreachable (they are kept
    and retried) or refused one (it is dropped and counted).

    Attributes:
        pending: what is kept, not yet taken by MLflow: ``{kind: count}`` (kinds: ``scalars``,
            ``config``, ``media``, ``start``, ``crash``, ``end``).
    """

    def __init__(self, message: str, pending: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.pending = dict(pending or {})


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

    A server that blinks (issue 41): every request (rows, config, media, the run's start,
    its crash tag and its end) is queued in order and sent by one thread (``delivery.Outbox``);
    ``monitor_write`` only queues, so ``log()`` never waits on the tracker. A request that
    gets no answer (server down or restarting, its database down: no answer, a timeout, HTTP
    408, 429 or 5xx) is kept and tried again after 0.5 s, then 1, 2, 4 ... seconds, at most
    ``retry_max_delay`` apart (each attempt bounded by ``request_timeout`` and MLflow's own
    ``max_retries``, not MLflow's four minutes), for as long as the run lasts: once the server
    is back, every row lands at its step, in order, and the run ends as it would have. One
    ``BackendWarning`` names the outage when it begins. A server that is down when the
    monitor starts does not disable the backend: the run is created (or resumed) when the
    server answers, before anything else is sent (``resumed``/``last_step`` then stay
    ``False``/``None``). A request the server refuses (another HTTP 4xx) is dropped and
    counted in ``undelivered*``; the next hook raises ``MlflowDeliveryError`` once for it.

    ``monitor_flush`` waits for everything queued to be taken while MLflow takes requests; once
    ``flush_wait`` seconds pass without one taken it raises ``MlflowDeliveryError`` naming what
    is still kept (the core's cursor then does not advance past it); the rows stay queued.
    ``monitor_close`` waits likewise, ``close_wait`` seconds without a request taken at most,
    then stops sending and reports what MLflow never confirmed in one
    ``BackendWarning`` (counted in ``undelivered``, ``undelivered_config``,
    ``undelivered_media``); the run then stays ``RUNNING`` in MLflow.

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
        max_retries: MLflow's own retries (0..10) of a failed HTTP attempt (MLflow's default:
            7, about four minutes with a server down); the backend retries by itself anyway.
        retry_max_delay: the longest wait in seconds (> 0) between two attempts of a request
            the server did not answer: what was kept is sent at most this long after the
            server is back.
        flush_wait: seconds (>= 0) ``monitor_flush`` waits without MLflow taking a request
            before it raises (a healthy server with a long backlog is waited for).
        close_wait: seconds (>= 0) ``monitor_close`` waits without MLflow taking a request
            before it gives up on what is queued.
        batch_size: metrics per ``log_batch`` request and buffer size (1..1000; 1000 is the
            server's limit).
        flush_secs: send the buffer at the next ``log`` once its oldest row is older than this
            many seconds (>= 0; 0 sends at every ``log``).
        quiet: ``True`` (default) keeps MLflow's own lines off the terminal (the "creating
            database tables" log lines of a new local store, the run's URL printed when it
            ends on a server: ``QUIET_LOGGERS``, ``QUIET_ENV``); ``False`` shows them.

    Raises:
        ConfigError: ``resume="must"`` finds no run (``NoRunToResume``); the options' types
            and values are checked before, at ``Monitor()`` (``check_options``).
        ImportError, core_monitor.BackendLoadError: MLflow is missing or of an unsupported
            version.
        MlflowDeliveryError: the tracking store refused to create the run (an HTTP 4xx other
            than 408 and 429); one that does not answer is tried again in the background.
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
        max_retries: int = 0,
        batch_size: int = MAX_BATCH,
        flush_secs: float = 5.0,
        quiet: bool = True,
        retry_max_delay: float = 10.0,
        flush_wait: float = 10.0,
        close_wait: float = 10.0,
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
        self.flush_wait = float(flush_wait)
        self.close_wait = float(close_wait)
        #: Scalars that did not reach MLflow (the server failed, or the tag is too long).
        self.undelivered = 0
        #: Config keys that did not reach MLflow.
        self.undelivered_config = 0
        #: Images and texts that did not reach MLflow.
        self.undelivered_media = 0
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
        # a new local store logs its table creation; a SQLite store is created under a lock
        # shared with the other processes opening it (_compat.open_client)
        with hidden(quiet, loggers=QUIET_LOGGERS, env=QUIET_ENV):
            self._client = _compat.open_client(tracking_uri)
        #: The tracking URI in use (MLflow's resolution when none was given).
        self.tracking_uri = self._client.tracking_uri
        #: The run's id and experiment's id; ``None`` until the server created the run.
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self._media: MediaWriter | None = None
        self._outbox = Outbox(self.tracking_uri, self.request_timeout, max_retries,
                              float(retry_max_delay))

        def start() -> None:
            self._begin(experiment or run.project, _with_group(tags, run.group), run_id, resume)

        try:
            with self._limits():
                start()
        except NoRunToResume:
            self._outbox.stop()
            raise
        except Exception as error:
            if not transient(error):
                self._outbox.stop()
                raise MlflowDeliveryError(
                    f"mlflow: {self.tracking_uri} refused to start the run: "
                    f"{type(error).__name__}: {error}"
                ) from error
            self._outbox.put(Request(start, "start"))  # created once the server answers
        if run.config:
            self._send_config(run.config)

    def _begin(self, experiment: str, tags: dict[str, Any], run_id: str | None,
               resume: str) -> None:
        """Create (or resume) the run; sets ``run_id`` and ``experiment_id``."""
        with hidden(self.quiet, loggers=QUIET_LOGGERS, env=QUIET_ENV):
            if resume != "never" and run_id is None:
                run_id = self._earlier_run(experiment, resume)
            self.run_id, self.experiment_id = self._start_run(
                experiment, tags, run_id, sqlite_artifact_root(self.tracking_uri),
                resumed=self.resumed)
        self._media = MediaWriter(self._client, self.run_id)

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

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    # Hooks -------------------------------------------------------------------------------------

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Buffer one MLflow metric point per event; queue them for sending when a threshold
        is reached (never waits on MLflow).

        Raises:
            MlflowDeliveryError: MLflow refused an earlier request (once per refusal).
            ValueError: a tag is longer than MLflow's 250-character key limit even after
                escaping; the other events of the batch are kept.
        """
        with self._lock:
            self._add_rows(events)
            self._raise_refusal()

    # Optional: a core without media never calls it.
    @hookimpl(optionalhook=True)
    def monitor_write_media(self, items: Sequence[Any]) -> None:
        """Queue each image and text (``MediaItem``) to be stored at its step as run
        artifacts (``media``: ``log_image``/``log_text``), behind the rows logged before.

        Raises:
            MlflowDeliveryError: MLflow refused an earlier request (once per refusal).
            ValueError: a tag is longer than ``storage.MAX_MEDIA_KEY`` characters once escaped;
                the other values of the call are stored.
        """
        with self._lock:
            self._send_media(items)
            self._raise_refusal()

    @hookimpl
    def monitor_flush(self) -> None:
        """Send every buffered row; afterwards ``get_metric_history`` returns them all.

        Waits while MLflow takes the queued requests, ``flush_wait`` seconds without one taken
        at most.

        Raises:
            MlflowDeliveryError: MLflow took no request for ``flush_wait`` seconds (its
                ``pending`` names what is kept; it stays queued and is sent when the server
                answers), or refused a request.
        """
        with self._lock:
            if self._buffer:
                self._send()
            self._raise_refusal()
        if not self._outbox.wait_empty(self.flush_wait):
            pending = self._outbox.pending()
            error = self._outbox.last_error
            why = ("a request is still waiting for its answer" if error is None else
                   f"last error: {type(error).__name__}: {error!s:.200}")
            raise MlflowDeliveryError(
                f"mlflow: backend 'mlflow' has {_counts(pending)} not yet taken by "
                f"{self.tracking_uri}, which took none for {self.flush_wait:g} s (flush_wait); "
                f"they are kept and sent when it answers ({why})", pending)
        with self._lock:
            self._raise_refusal()

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
            self._send_config(config)

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """The training process died: store ``reason`` in the run tag ``storage.CRASH_TAG``
        (``mlflow_monitor.crash``) now, and have ``monitor_close`` (called next) end the run
        with status ``FAILED`` instead of ``FINISHED``.

        The tag is queued behind everything logged before it.
        """
        with self._lock:
            self.end_status = "FAILED"
            if self._buffer:
                self._send()
            text = reason[:MAX_VALUE_LENGTH]
            self._outbox.put(Request(
                lambda: self._client.set_tag(self.run_id, CRASH_TAG, text), "crash"))

    @hookimpl
    def monitor_close(self) -> None:
        """Send what is buffered, end the run (status ``FINISHED``, or ``FAILED`` after
        ``monitor_crash``), waiting while MLflow takes requests (``close_wait`` seconds without
        one taken at most); then stop sending and report, in one ``BackendWarning``, what
        MLflow never took.
        """
        with self._lock:
            if self._buffer:
                self._send()
            status = self.end_status

            def end() -> None:
                with hidden(self.quiet, loggers=QUIET_LOGGERS, env=QUIET_ENV):
                    self._client.set_terminated(self.run_id, status=status)

            self._outbox.put(Request(end, "end"))
        self._outbox.wait_empty(self.close_wait)
        left = self._outbox.stop()
        with self._lock:
            self.undelivered += left.get("scalars", 0)
            self.undelivered_config += left.get("config", 0)
            self.undelivered_media += left.get("media", 0)
            self._report(left)

    # Buffering rows -----------------------------------------------------------------------------

    def _add_rows(self, events: Sequence[Event]) -> None:
        """Buffer one metric point per event; queue them when a threshold is reached.

        Raises:
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
        """Queue the buffered rows, ``batch_size`` metrics a request."""
        batch, self._buffer = self._buffer, []
        for start in range(0, len(batch), self.batch_size):
            chunk = batch[start : start + self.batch_size]
            self._outbox.put(Request(functools.partial(self._log_metrics, chunk), "scalars",
                                     len(chunk)))

    def _log_metrics(self, chunk: list[Any]) -> None:
        self._client.log_batch(self.run_id, metrics=chunk, synchronous=True)

    def _raise_refusal(self) -> None:
        """Raise ``MlflowDeliveryError`` for a request MLflow refused (once each refusal)."""
        error, self._outbox.refusal = self._outbox.refusal, None
        if error is None:
            return
        refused = self._outbox.refused
        raise MlflowDeliveryError(
            f"mlflow: {self.tracking_uri} refused a request of run {self.run_id}: "
            f"{type(error).__name__}: {error!s:.300}; refused so far: {_counts(refused)} "
            "(not retried; later requests are sent)") from error

    def _send_config(self, config: Mapping[str, Any]) -> None:
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
        for entry in params:  # as MLflow will have them once the requests are taken
            self._params[entry.key] = entry.value
        for start in range(0, len(entries), MAX_PARAMS_PER_REQUEST):
            chunk = entries[start : start + MAX_PARAMS_PER_REQUEST]
            self._outbox.put(Request(functools.partial(self._log_entries, chunk), "config",
                                     len(chunk)))
        if skipped:
            self.undelivered_config += len(skipped)
            warnings.warn(
                f"mlflow: config key {skipped[0]!r:.80} (and {len(skipped) - 1} more) is longer "
                f"than MLflow's {MAX_KEY_LENGTH}-character key limit once escaped and was not "
                "stored as a param; use shorter config keys",
                BackendWarning,
                stacklevel=2,
            )
    def _log_entries(self, chunk: list[Any]) -> None:
        self._client.log_batch(
            self.run_id,
            params=[e for e in chunk if isinstance(e, self._Param)],
            tags=[e for e in chunk if isinstance(e, self._RunTag)],
            synchronous=True,
        )

    def _send_media(self, items: Sequence[Any]) -> None:
        """Queue each image and text (``media.MediaWriter``), one request each.

        Raises:
            ValueError: a tag is too long once escaped; the other values are queued.
        """
        too_long = []
        for item in items:
            if len(media_key(item.tag)) > MAX_MEDIA_KEY:
                too_long.append(item.tag)
                continue
            self._outbox.put(Request(functools.partial(self._write_media, item), "media"))
        if too_long:
            self.undelivered_media += len(too_long)
            raise ValueError(
                f"mlflow: media tag {too_long[0]!r:.80} is longer than "
                f"{MAX_MEDIA_KEY} characters once escaped (MLflow puts it in a file name); "
                f"{len(too_long)} media value(s) of this call were not stored in MLflow (the "
                f"others were). Fix: use media tags of at most {MAX_MEDIA_KEY} characters"
            )

    def _write_media(self, item: Any) -> None:
        assert self._media is not None  # the run exists: its start came first
        self._media.write(item)

    def _report(self, left: Mapping[str, int]) -> None:
        """One ``BackendWarning`` for what never reached MLflow, if anything."""
        refused = self._outbox.refused
        self.undelivered += refused.get("scalars", 0)
        self.undelivered_config += refused.get("config", 0)
        self.undelivered_media += refused.get("media", 0)
        if self.undelivered or self.undelivered_config or self.undelivered_media or left:
            error = self._outbox.last_error or self._outbox.refusal
            if left:
                reason = (f"none taken for close_wait={self.close_wait:g} s, the run stays "
                          f"RUNNING there ({_counts(left)} kept until then)")
            else:
                reason = "refused by the server, or tags longer than MLflow's key limit"
            if error is not None:
                reason += f"; last error: {type(error).__name__}: {error!s:.200}"
            warnings.warn(
                f"mlflow: {self.undelivered} scalar(s), {self.undelivered_media} media value(s) "
                f"and {self.undelivered_config} config key(s) of run {self.run.name!r} were not "
                f"delivered to {self.tracking_uri} (run {self.run_id}): {reason}",
                BackendWarning,
                stacklevel=2,
            )


def _counts(counts: Mapping[str, int]) -> str:
    """``{"scalars": 20, "end": 1}`` -> ``"20 scalars, 1 end"`` (``"nothing"`` when empty)."""
    return ", ".join(f"{count} {kind}" for kind, count in counts.items()) or "nothing"


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
