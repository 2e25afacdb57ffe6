"""Checking ``MlflowMonitor``'s options: types and ranges, in the training process at
``Monitor()``, before MLflow is imported."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from core_monitor import ConfigError

from .storage import MAX_VALUE_LENGTH, is_valid_key

#: Most metrics the tracking server takes in one ``log_batch`` request.
MAX_BATCH = 1000


def check_options(options: Mapping[str, Any]) -> None:
    """Check ``MlflowMonitor``'s option values, those given, before MLflow is imported: called
    by the core as ``MlflowMonitor.check_options(options)`` in the training process at
    ``Monitor()`` (on every rank, so each rank raises the same error).

    Args:
        options: the user's options for ``mlflow``, only those given; what each may be:
            ``tracking_uri``, ``experiment``, ``run_id``: ``str`` (non-empty) or ``None``;
            ``tags``: ``Mapping[str, Any]`` of run tags or ``None``, keys valid MLflow keys,
            values at most ``MAX_VALUE_LENGTH`` characters once ``str()``-ed;
            ``request_timeout``: seconds, a finite number > 0; ``max_retries``: ``int`` from 0
            to 10; ``batch_size``: ``int`` from 1 to ``MAX_BATCH``; ``flush_secs``: seconds, a
            finite number >= 0; ``retry_max_delay``, ``flush_wait``, ``close_wait``: seconds,
            finite numbers > 0 (``retry_max_delay``) or >= 0.

    Raises:
        ConfigError: an option has a wrong type or value; the message names the option, the
            value and an example of a valid one.
    """
    tracking_uri, experiment, run_id, tags = (
        options.get(key) for key in ("tracking_uri", "experiment", "run_id", "tags"))
    request_timeout = options.get("request_timeout", 5.0)
    max_retries = options.get("max_retries", 0)
    batch_size = options.get("batch_size", MAX_BATCH)
    flush_secs = options.get("flush_secs", 5.0)
    for option, value, example in (
        ("tracking_uri", tracking_uri, "'http://127.0.0.1:5000'"),
        ("experiment", experiment, "'digits'"),
        ("run_id", run_id, "'3f2a...'"),
    ):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(
                f"mlflow: option {option}={value!r} must be a non-empty str or None, "
                f"e.g. {option}={example}"
            )
    if tags is not None:
        if not isinstance(tags, Mapping):
            raise ConfigError(
                f"mlflow: option tags={tags!r:.80} must be a mapping of run tags, "
                "e.g. tags={'team': 'vision'}"
            )
        for key, value in tags.items():
            if not isinstance(key, str) or not is_valid_key(key):
                raise ConfigError(
                    f"mlflow: option tags has key {key!r:.80}, which MLflow refuses; use at "
                    "most 250 letters, digits, '_', '-', '.', ' ', ':' or '/' (no leading '/', "
                    "no '//')"
                )
            if len(str(value)) > MAX_VALUE_LENGTH:
                raise ConfigError(
                    f"mlflow: option tags[{key!r}] is longer than {MAX_VALUE_LENGTH} characters"
                )
    for option, value, low, example in (
        ("request_timeout", request_timeout, 0.0, "request_timeout=5"),
        ("flush_secs", flush_secs, -1.0, "flush_secs=5"),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not value > low
            or (option == "flush_secs" and value < 0)
        ):
            bound = "> 0" if option == "request_timeout" else ">= 0"
            raise ConfigError(
                f"mlflow: option {option}={value!r} must be a number of seconds {bound}, "
                f"e.g. {example}"
            )
    for option, value, positive in (("retry_max_delay", options.get("retry_max_delay", 10.0), True),
                                    ("flush_wait", options.get("flush_wait", 10.0), False),
                                    ("close_wait", options.get("close_wait", 10.0), False)):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < 0 or (positive and value == 0)):
            raise ConfigError(
                f"mlflow: option {option}={value!r} must be a number of seconds "
                f"{'> 0' if positive else '>= 0'}, e.g. {option}=10"
            )
    for option, value, low, high, example in (
        ("max_retries", max_retries, 0, 10, "max_retries=0"),
        ("batch_size", batch_size, 1, MAX_BATCH, "batch_size=1000"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(
                f"mlflow: option {option}={value!r} must be an integer from {low} to {high}, "
                f"e.g. {example}"
            )

