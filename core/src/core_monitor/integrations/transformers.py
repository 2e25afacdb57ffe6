"""Hugging Face Trainer: ``Trainer(..., callbacks=[MonitorCallback([...], project=...)])``.

::

    from core_monitor.integrations.transformers import MonitorCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[MonitorCallback(["trackio"],
                      project="digits")])            # TrainingArguments(report_to="none")

Every entry of each ``on_log`` (what ``trainer.state.log_history`` records) is stored at
``state.global_step`` under the tag the Trainer's own TensorBoard, wandb and Trackio callbacks
use (``loss`` -> ``train/loss``, ``eval_loss`` -> ``eval/loss``: ``transformers``'
``rewrite_logs``); the training arguments and the model's config become the run's config.
Importing this module imports ``transformers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback
from transformers.integrations import rewrite_logs as trainer_tags

from ..errors import ConfigError
from ..monitor import Monitor
from ._common import loggable
from ._runs import LazyRun
from .step_time import StepClock, step_time_prefix

__all__ = ["MonitorCallback"]


class MonitorCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` that logs the Trainer's logs through ``Monitor``.

    * ``on_train_begin``: starts the run (the ``Monitor``, on every process: each validates the
      options alike; only rank 0 writes with the default ``rank_zero_only=True``) and stores its
      config: the model's config, ``args.to_sanitized_dict()`` over it and
      ``model/num_parameters``, as the Trainer's wandb and Trackio callbacks store them.
    * ``on_log``: on the world process zero only, stores ``logs`` at ``state.global_step``, the
      ``step`` the Trainer records in ``state.log_history``, under the Trainer's own tag names
      (``rewrite_logs``: ``train/loss``, ``train/learning_rate``, ``eval/loss``,
      ``test/...``). Numbers become scalars and strings ``Text``, as ``TensorBoardCallback``
      writes them (``add_scalar``/``add_text``); other values are skipped with one warning per
      key.
    * ``on_predict``: ``trainer.predict()``'s metrics (``test/loss``, ...) at
      ``state.global_step``, as the wandb and Trackio callbacks log them.
    * ``on_train_end``: flushes every backend (all of it readable) and keeps the run open, so a
      later ``evaluate()``, ``predict()`` or a second ``train()`` writes into the same run, as
      with the Trainer's own callbacks (a second ``train()`` without a checkpoint starts again
      at step 0: those steps are stored again, as given). The run is closed by ``close()``, at
      interpreter exit, or when another integration object starts a run in this process while
      this one waits (see ``core_monitor.integrations._runs``).

    Every argument has a default, so the class itself may be passed (``callbacks=
    [MonitorCallback]``, as the Trainer accepts its own callbacks): the backends then come from
    ``EXPERIMENT_MONITORS`` and the project from ``args.project``.

    Args:
        backends: backend names as installed (``monitors list``) or backend classes, or one name;
            ``None``: those in ``EXPERIMENT_MONITORS`` (as ``report_to`` names trackers).
        project: the project (``str``); default ``args.project`` (``TrainingArguments``'
            ``project``, ``"huggingface"`` unless set), as the Trainer's Trackio callback.
        name: the run name; default ``args.run_name`` when set, else ``YYYYmmdd-HHMMSS-host``.
        rewrite_logs: store the Trainer's own callbacks' tag names (default); ``False`` stores
            the keys of ``log_history`` as they are (``loss``, ``eval_loss``).
        step_time: ``True`` (tags under ``step_time/``) or a tag prefix: every process times
            its optimizer steps (``core_monitor.integrations.step_time``): ``data``, from
            the end of the previous step (or of the logging, evaluation or saving after it)
            to ``on_step_begin``, the wait for the step's batches; ``forward``, from
            ``on_step_begin`` to the end of the model's last forward pass in the step (a
            forward hook on the model during ``train()``); ``step``, from ``on_step_begin``
            to ``on_step_end``; in seconds, each a mean per step since the previous
            ``on_log``. At each ``on_log`` after training steps (every process gets it) one
            ``all_gather`` gives process zero each tag's ``/mean``, ``/median``, ``/min``,
            ``/max``, ``/min_rank``, ``/max_rank``, stored with the logs (``train/step_time/
            ...`` with ``rewrite_logs``). Default ``False``.
        **monitor_kwargs: other ``Monitor`` keyword arguments (``log_dir``, ``config``,
            ``strict``, ``rank_zero_only``, one options mapping per backend).

    Raises:
        ConfigError: ``rewrite_logs`` is not a ``bool``, ``step_time`` neither a ``bool`` nor
            a non-empty ``str``; in ``on_train_begin``, as ``Monitor``
            raises it (e.g. no backend named and ``EXPERIMENT_MONITORS`` unset);
            ``UnknownBackendError``, ``BackendLoadError`` likewise.
    """

    def __init__(self, backends: Sequence[str | type] | str | None = None, *,
                 project: str | None = None, name: str | None = None,
                 rewrite_logs: bool = True, step_time: bool | str = False,
                 **monitor_kwargs: Any) -> None:
        if not isinstance(rewrite_logs, bool):
            raise ConfigError(f"MonitorCallback: rewrite_logs={rewrite_logs!r} must be True or "
                              "False")
        self._backends = backends
        self._project = project
        self._name = name
        self._rewrite = rewrite_logs
        timed = step_time_prefix(step_time, "MonitorCallback")
        self._clock = None if timed is None else StepClock(timed)
        self._forward_hook: Any = None
        self._monitor_kwargs = monitor_kwargs
        self._runs: LazyRun | None = None
        self._warned: set[str] = set()

    @property
    def monitor(self) -> Monitor | None:
        """The run's ``Monitor``, open or closed; ``None`` before ``train()``."""
        return None if self._runs is None else self._runs.last

    def _run(self, args: Any) -> LazyRun:
        if self._runs is None:
            name = self._name
            if name is None and isinstance(getattr(args, "run_name", None), str) and args.run_name:
                name = args.run_name
            project = self._project or getattr(args, "project", None) or "huggingface"
            self._runs = LazyRun(self._backends, project=project, name=name,
                                 source="MonitorCallback", **self._monitor_kwargs)
        return self._runs

    def _log(self, args: Any, state: Any, metrics: Mapping[str, Any] | None,
             model: Any, times: Mapping[str, float] | None = None) -> None:
        if not state.is_world_process_zero or not metrics:
            return
        monitor = self._runs.started if self._runs is not None else None
        if monitor is None:  # evaluate() or predict() before any train(): start the run
            monitor = self._start(args, model)
        values = dict(metrics)
        if times:
            values.update(times)
        values = trainer_tags(values) if self._rewrite else values
        monitor.log(loggable(values, self._warned, "MonitorCallback"), step=state.global_step)

    def _start(self, args: Any, model: Any, resume: bool = False) -> Monitor:
        """The open run (started now if needed) with the config of ``args`` and ``model``."""
        config: dict[str, Any] = {}
        model_config = getattr(model, "config", None)
        if model_config is not None:
            config.update(model_config if isinstance(model_config, Mapping)
                          else model_config.to_dict())
        config.update(args.to_sanitized_dict())
        num_parameters = getattr(model, "num_parameters", None)
        if callable(num_parameters):
            config["model/num_parameters"] = num_parameters()
        runs = self._run(args)
        monitor = runs.monitor(resume=resume)
        runs.log_config(config)
        return monitor

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        """Start the run (or go on with the open one) and store its config. Training resumed
        from a checkpoint (``trainer.train(resume_from_checkpoint=...)``: ``state.global_step``
        restored above 0) reattaches to the run of this name (``Monitor(resume="allow")``)."""
        self._start(args, model, resume=getattr(state, "global_step", 0) > 0)
        clock = self._clock
        if clock is not None and self._forward_hook is None and model is not None:
            self._forward_hook = model.register_forward_hook(
                lambda module, inputs, output: clock.backward())

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """``step_time``: the wait for the epoch's first batch starts here."""
        if self._clock is not None:
            self._clock.idle()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """``step_time``: a step starts (its batches are fetched)."""
        if self._clock is not None:
            self._clock.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """``step_time``: the step ended (optimizer step done)."""
        if self._clock is not None:
            self._clock.end()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """``step_time``: evaluation is not a wait for data."""
        if self._clock is not None:
            self._clock.idle()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """``step_time``: a checkpoint is not a wait for data."""
        if self._clock is not None:
            self._clock.idle()

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
               model: Any = None, **kwargs: Any) -> None:
        """Store ``logs`` at ``state.global_step`` (process zero; see the class docstring);
        with ``step_time``, after training steps, a collective on every process first."""
        clock = self._clock
        times = clock.collect() if clock is not None else None
        self._log(args, state, logs, model, times)
        if clock is not None:
            clock.idle()  # this call's own time is not a wait for data

    def on_predict(self, args: Any, state: Any, control: Any,
                   metrics: Mapping[str, Any] | None = None, model: Any = None,
                   **kwargs: Any) -> None:
        """Store ``trainer.predict()``'s metrics at ``state.global_step`` (process zero)."""
        self._log(args, state, metrics, model)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Flush every backend and keep the run open for what the Trainer does next."""
        if self._clock is not None:
            self._clock.reset()
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        if self._runs is not None:
            self._runs.pause()

    def close(self) -> None:
        """Close the run: every backend writes what it holds and finishes it. Logging again
        afterwards starts a new run ``<name>-2``, with a warning."""
        if self._runs is not None:
            self._runs.close()
