"""Requests to MLflow and what happens when they fail: every request of an ``MlflowMonitor``
runs under ``_compat.request_limits`` (its ``request_timeout`` and ``max_retries``), the first
failure raises ``MlflowDeliveryError`` once and stops all later sending, and whatever did not
arrive is counted (``undelivered``, ``undelivered_config``, ``undelivered_media``) and reported
in one ``BackendWarning`` at close.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from core_monitor import BackendWarning, RunInfo

from . import _compat, output
from .storage import (
    CONFIG_TAG_PREFIX,
    MAX_KEY_LENGTH,
    MAX_MEDIA_KEY,
    escape_key,
    param_value,
)

#: Most params plus tags the tracking server takes in one ``log_batch`` request.
MAX_PARAMS_PER_REQUEST = 100


class MlflowDeliveryError(ConnectionError):
    """MLflow did not take a request of this backend (server down, hung or refusing it).

    The backend stops sending for the rest of the run; see ``MlflowMonitor.undelivered``.
    """


class Delivery:
    """The request side of ``MlflowMonitor`` (a base class; it holds no state of its own).

    Uses the backend's ``_client`` (``mlflow.MlflowClient``), ``run``, ``run_id``,
    ``tracking_uri``, ``request_timeout`` (seconds), ``max_retries``, ``batch_size``, the row
    buffer ``_buffer`` (``mlflow.entities.Metric`` list), ``_params`` (stored key -> value),
    ``_error`` (the first failure) and the three ``undelivered*`` counters.
    """

    run: RunInfo
    run_id: str
    tracking_uri: str
    request_timeout: float
    max_retries: int
    batch_size: int
    undelivered: int
    undelivered_config: int
    undelivered_media: int
    quiet: bool
    _client: Any
    _buffer: list[Any]
    _params: dict[str, str]
    _error: BaseException | None
    _Param: Any
    _RunTag: Any
    _media: Any

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
        """Mark the run FINISHED unless sending already failed (``MlflowDeliveryError`` if it
        fails now)."""
        if self._error is None:
            try:
                with self._limits(), output.hidden(self.quiet):
                    self._client.set_terminated(self.run_id, status="FINISHED")
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
