"""Hugging Face Trainer: ``Trainer(..., callbacks=[MonitorCallback([...], project=...)])``.

::

    from core_monitor.integrations.transformers import MonitorCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[MonitorCallback(["trackio"],
                      project="digits")])            # TrainingArguments(report_to="none")

Every numeric entry of each ``on_log`` (the entries ``trainer.state.log_history`` records) is
stored at ``state.global_step``; ``args.to_sanitized_dict()`` becomes the run's config.
Importing this module imports ``transformers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback

from ..monitor import Monitor
from ._common import loggable
from ._runs import LazyRun

__all__ = ["MonitorCallback"]


class MonitorCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` that logs the Trainer's logs through ``Monitor``.

    * ``on_train_begin``: starts the run (the ``Monitor``, on every process: each validates the
      options alike; only rank 0 writes with the default ``rank_zero_only=True``) and stores
      ``args.to_sanitized_dict()`` as its config (``Monitor.log_config``).
    * ``on_log``: on the world process zero only (``state.is_world_process_zero``), stores the
      numeric entries of ``logs`` at ``state.global_step``, the ``step`` the Trainer records in
      ``state.log_history``. Non-numeric entries are skipped with one warning per key.
    * ``on_train_end``: flushes and closes the run.

    A second ``trainer.train()``: when the first ended normally (its run is closed), it starts a
    NEW run ``<name>-2`` and warns (a finished run cannot be reopened; steps restart at the
    resumed ``global_step``). When the first raised before ``on_train_end`` (e.g. resumed with
    ``resume_from_checkpoint``), the open run goes on: same run, config merged.

    Args:
        backends: backend names as installed (``monitors list``) or backend classes, or one name.
        project: the project (``str``).
        name: the run name; default ``args.run_name`` when set, else ``YYYYmmdd-HHMMSS-host``.
        **monitor_kwargs: other ``Monitor`` keyword arguments (``log_dir``, ``config``,
            ``strict``, ``rank_zero_only``, one options mapping per backend).

    Raises:
        ConfigError, UnknownBackendError, BackendLoadError: in ``on_train_begin``, as
            ``Monitor``.
    """

    def __init__(self, backends: Sequence[str | type] | str, *, project: str,
                 name: str | None = None, **monitor_kwargs: Any) -> None:
        self._backends = backends
        self._project = project
        self._name = name
        self._monitor_kwargs = monitor_kwargs
        self._runs: LazyRun | None = None
        self._warned: set[str] = set()

    @property
    def monitor(self) -> Monitor | None:
        """The current (or last, closed) run's ``Monitor``; ``None`` before ``train()``."""
        return None if self._runs is None else self._runs.last

    def _monitor(self, args: Any) -> Monitor:
        if self._runs is None:
            name = self._name
            if name is None and isinstance(getattr(args, "run_name", None), str) and args.run_name:
                name = args.run_name
            self._runs = LazyRun(self._backends, project=self._project, name=name,
                                 source="MonitorCallback", **self._monitor_kwargs)
        return self._runs.monitor()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the run (or go on with an open one) and store the training arguments."""
        self._monitor(args).log_config(args.to_sanitized_dict())

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
               **kwargs: Any) -> None:
        """Store the numeric entries of ``logs`` at ``state.global_step`` (process zero)."""
        if not state.is_world_process_zero or not logs:
            return
        self._monitor(args).log(loggable(logs, self._warned, "MonitorCallback", text=False),
                                step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Flush and close the run."""
        if self._runs is not None:
            self._runs.close()
