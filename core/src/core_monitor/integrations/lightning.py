"""PyTorch Lightning: ``Trainer(logger=MonitorLogger([...], project=...))`` reaches every backend.

::

    from core_monitor.integrations.lightning import MonitorLogger
    trainer = L.Trainer(logger=MonitorLogger(["trackio", "wandb"], project="digits"))

Every ``self.log(...)`` of the ``LightningModule`` is stored at Lightning's own step
(``trainer.global_step``, the step Lightning's ``CSVLogger`` writes in ``metrics.csv``);
``self.save_hyperparameters()`` reaches every backend's run config. Importing this module
imports Lightning (``lightning.pytorch``).
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from ..errors import ConfigError
from ..monitor import URL, Monitor, crash_reason
from ._common import loggable
from ._runs import LazyRun
from .step_time import StepClock, step_time_prefix

__all__ = ["DEFAULT_PROJECT", "MonitorLogger"]

#: The project when none is given: the name Lightning's built-in loggers default to.
DEFAULT_PROJECT = "lightning_logs"
#: The backends that write a remote ``save_dir`` (an fsspec URL) through their ``run_dir``.
REMOTE_BACKENDS = ("csv", "tensorboard")


def _running_trainer() -> tuple[Any, bool]:
    """The Lightning ``Trainer`` up the call stack (``None``: none) and whether the ``Trainer``
    method running fits from a checkpoint. Lightning hands a logger no trainer, and reads
    ``experiment`` and ``save_dir`` from inside its own calls (the setup hook of
    ``Trainer._run(model, ckpt_path=...)``, before the checkpoint is restored and
    ``trainer.ckpt_path`` set; ``Trainer.log_dir``; ``ModelCheckpoint``'s folder), so the
    ``ckpt_path`` of the ``Trainer`` method running is read, else ``trainer.ckpt_path``."""
    trainer_class = getattr(sys.modules.get("lightning.pytorch"), "Trainer", None)
    if trainer_class is None:
        return None, False
    found = None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(64):
        if frame is None:
            break
        local = frame.f_locals
        for key in ("self", "trainer"):
            if isinstance(local.get(key), trainer_class):
                if key == "self" and "ckpt_path" in local:
                    return local[key], local["ckpt_path"] is not None
                found = found or local[key]
        frame = frame.f_back
    return found, found is not None and getattr(found, "ckpt_path", None) is not None


def _tensorboard_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``TensorBoardLogger``'s rule for arrays and tensors of more than one dimension (its
    ``_sanitize_params``): ``str(value)``, at any depth of nested dicts. Others are left to
    ``core_monitor.hyperparameters.sanitize_config`` (0-d: a number, 1-d: a list)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            value = _tensorboard_params(value)
        else:
            ndim = getattr(value, "ndim", None)
            if isinstance(ndim, int) and ndim > 1:
                value = str(value)
        out[key] = value
    return out


class _StepTimer(Callback):
    """Feeds a ``StepClock`` from Lightning's batch hooks: a step is one training batch
    (``on_train_batch_start`` to ``on_train_batch_end``), its backward pass starts at
    ``on_before_backward``; validation ends and epoch starts are not waits for data."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.clock.idle()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        self.clock.start()

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self.clock.backward()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.clock.end()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.clock.idle()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.clock.reset()


def _remote(folder: str | os.PathLike[str] | None) -> str | None:
    """``folder`` when it is a URL (fsspec's ``protocol://path``), else ``None``."""
    if folder is None:
        return None
    text = os.fspath(folder)
    return text if URL.match(text) else None


class MonitorLogger(Logger):
    """A Lightning ``Logger`` that logs through one ``core_monitor.Monitor``.

    The ``Monitor`` is created the first time Lightning touches the logger (``experiment``,
    which the ``Trainer`` reads in its ``setup`` on every rank, after the strategy set up the
    process group): each rank validates the options alike and, with ``rank_zero_only=True``
    (the default), only global rank 0 writes; under DDP the other ranks' calls store nothing
    and import no backend SDK.

    One run per logger, as with Lightning's built-in loggers: ``fit()`` then ``test()`` (or
    ``validate()``, a second ``fit()``) write into the same run. ``finalize``, which Lightning
    calls when a stage ends, flushes every backend (what was logged is readable) and keeps the
    run open; it is closed by ``close()``, at interpreter exit, or when another integration
    object starts a run in this process while this one waits between stages or after this
    logger was garbage-collected (see ``core_monitor.integrations._runs``): a sweep making a
    logger per trial keeps at most one finished trial's run, and its writer processes, open.

    ``name`` and ``version`` follow Lightning's ``WandbLogger``: ``name`` is the project,
    ``version`` the run name. ``save_dir`` (so ``trainer.log_dir``) is the folder the local
    backends write under, ``Monitor``'s ``log_dir``: the one given, else the ``Trainer``'s
    ``default_root_dir`` (where Lightning puts its default ``TensorBoardLogger``), so
    TensorBoard's run is ``<save_dir>/<project>/<run name>`` and checkpoints go to
    ``<save_dir>/<project>/<run name>/checkpoints``, beside it.

    ``log_hyperparams(params, metrics)`` does what ``TensorBoardLogger``'s does: ``params``
    become the run config (arrays and tensors of more than one dimension as ``str(value)``, as
    ``TensorBoardLogger`` stores them); ``metrics`` (a number alone is ``{"hp_metric": it}``)
    are stored as scalars at ``step`` (``None``: step 0) in every backend, which TensorBoard's
    HParams tab shows beside the hyperparameters; with ``default_hp_metric=True`` and no
    ``metrics``, ``hp_metric = -1`` at step 0, once per logger (``TensorBoardLogger`` writes it
    again at every stage, into the same run).

    Pickling (``strategy="ddp_spawn"``, a pickled ``Trainer``) keeps the names, options and
    hyperparameters and drops the ``Monitor``, as the built-in loggers drop their experiment:
    hyperparameters given before ``fit`` start no run in the main process, so the spawned rank
    0 writes the one run, with them.

    Args:
        backends: backend names as installed (``monitors list``) or backend classes, or one name;
            ``None``: those in ``EXPERIMENT_MONITORS``.
        project: the project (``str``); default ``"lightning_logs"``, Lightning's default name.
        name: the run name; default ``YYYYmmdd-HHMMSS-host``, decided when the logger is made
            (a second logger made in the same second gets ``.2``).
        prefix: put before every metric key, joined with ``"-"``, as every built-in logger's
            ``prefix`` (``prefix="fold1"``: ``fold1-train_loss``); default none.
        save_dir: Lightning's name for ``log_dir`` (``str`` or path; give one of them); default:
            the ``Trainer``'s ``default_root_dir``. An fsspec URL (``s3://bucket/runs``,
            ``memory://runs``), as ``CSVLogger`` and ``TensorBoardLogger`` take one: the csv
            and tensorboard backends write ``<save_dir>/<project>/<run name>`` there through
            fsspec (install ``fsspec``, e.g. ``csv-monitor[remote]``, and the filesystem's
            package, e.g. s3fs); any other backend is a ``ConfigError`` naming it.
        default_hp_metric: write ``hp_metric = -1`` at step 0 at the first ``log_hyperparams``
            without ``metrics`` (``TensorBoardLogger``'s ``default_hp_metric``, default
            ``True``).
        step_time: ``True`` (tags under ``step_time/``) or a tag prefix: every rank times its
            training batches (``core_monitor.integrations.step_time``: the wait for the batch
            ``data``, the batch's start to ``on_before_backward`` ``forward``, the whole batch
            ``step``, in seconds, each a mean per batch since the previous logging call), and
            at each of Lightning's logging calls (every rank makes them) one ``all_gather``
            gives rank 0 each tag's ``/mean``, ``/median``, ``/min``, ``/max``,
            ``/min_rank``, ``/max_rank``, stored with the logged metrics. Default ``False``.
        **monitor_kwargs: other ``Monitor`` keyword arguments (``log_dir``, ``config``,
            ``strict``, ``rank_zero_only``, ``dispatch``, one options mapping per backend).

    Raises:
        ConfigError: ``prefix`` is not a ``str``, ``default_hp_metric`` not a ``bool``,
            ``step_time`` neither a ``bool`` nor a non-empty ``str``, or
            ``save_dir`` and ``log_dir`` both given and different; at the first use, as
            ``Monitor`` raises it; ``UnknownBackendError``, ``BackendLoadError`` likewise.
    """

    #: What joins ``prefix`` and a metric key (Lightning's ``Logger.LOGGER_JOIN_CHAR``).
    LOGGER_JOIN_CHAR = "-"

    def __init__(self, backends: Sequence[str | type] | str | None = None, *,
                 project: str = DEFAULT_PROJECT, name: str | None = None, prefix: str = "",
                 save_dir: str | os.PathLike[str] | None = None, default_hp_metric: bool = True,
                 step_time: bool | str = False, **monitor_kwargs: Any) -> None:
        super().__init__()
        if not isinstance(prefix, str):
            raise ConfigError(f"MonitorLogger: prefix={prefix!r} must be a str, e.g. 'fold1'")
        if not isinstance(default_hp_metric, bool):
            raise ConfigError(f"MonitorLogger: default_hp_metric={default_hp_metric!r} must be "
                              "True or False")
        log_dir = monitor_kwargs.get("log_dir")
        if save_dir is not None and log_dir is not None and Path(save_dir) != Path(log_dir):
            raise ConfigError(f"MonitorLogger: save_dir={str(save_dir)!r} and log_dir="
                              f"{str(log_dir)!r} name the same folder (Lightning's and "
                              "Monitor's name for it): give one of them")
        #: ``save_dir`` given as a URL (``s3://...``, ``memory://...``): only csv writes there.
        self._remote_dir = _remote(save_dir if save_dir is not None else log_dir)
        if self._remote_dir is not None:
            monitor_kwargs.pop("log_dir", None)
        elif save_dir is not None:
            monitor_kwargs["log_dir"] = save_dir
        self._prefix = prefix
        timed = step_time_prefix(step_time, "MonitorLogger")
        self._timer = None if timed is None else _StepTimer(StepClock(timed))
        self._default_hp_metric = default_hp_metric
        #: Metrics of ``log_hyperparams`` given before the run started: ``(metrics, step)``.
        self._hp_metrics: list[tuple[Mapping[str, Any], int]] = []
        self._hp_metric_written = False
        self._runs = LazyRun(backends, project=project, name=name, source="MonitorLogger",
                             **monitor_kwargs)
        self._warned: set[str] = set()
        if self._remote_dir is not None:
            self._write_remotely(backends, self._remote_dir)

    def _write_remotely(self, backends: Sequence[str | type] | str | None, url: str) -> None:
        """Send the run to ``<url>/<project>/<run name>`` (``CSVLogger``'s and
        ``TensorBoardLogger``'s folder under a remote ``save_dir``) through the ``run_dir`` of
        the csv and tensorboard backends; any other backend cannot write to a URL:
        ``ConfigError`` naming it."""
        names = [backends] if isinstance(backends, str) else list(backends or [])
        if not names:
            raise ConfigError(f"MonitorLogger: save_dir={url!r} is a URL; name the backends, "
                              "e.g. MonitorLogger(['csv'], save_dir=...): only csv and "
                              "tensorboard write to a URL (through fsspec, as Lightning's "
                              "CSVLogger and TensorBoardLogger)")
        for backend in names:
            label = backend if isinstance(backend, str) else getattr(backend, "__name__", "?")
            if backend not in REMOTE_BACKENDS:
                raise ConfigError(
                    f"MonitorLogger: backend {label!r} cannot write to save_dir={url!r} (a "
                    "URL): only csv and tensorboard write to a remote folder (through fsspec, "
                    "as Lightning's CSVLogger and TensorBoardLogger); give a local save_dir, "
                    f"or leave {label!r} out and log it with a second MonitorLogger that has a "
                    "local save_dir")
        kwargs = self._runs.monitor_kwargs
        for backend in map(str, names):
            options = dict(kwargs.get(backend) or {})
            options.setdefault("run_dir",
                               f"{url.rstrip('/')}/{self._runs.project}/{self._runs.name}")
            kwargs[backend] = options

    @property
    def experiment(self) -> Monitor:
        """The ``Monitor`` of the run (created at first access; on every rank, where ranks
        other than 0 write nothing: no ``DummyExperiment``). A run started while the
        ``Trainer`` fits from a checkpoint (``fit(ckpt_path=...)``) reattaches to the run of
        this name (``Monitor(resume="allow")``) instead of starting ``<name>-2``."""
        runs = self._runs
        started = runs.started
        if started is not None:
            return started
        trainer, resume = _running_trainer()
        self._attach_timer(trainer)
        if runs.monitor_kwargs.get("log_dir") is None and trainer is not None:
            runs.monitor_kwargs["log_dir"] = trainer.default_root_dir
        monitor = runs.monitor(resume=resume)
        pending, self._hp_metrics = self._hp_metrics, []
        for metrics, step in pending:
            self._log_hp_metrics(monitor, metrics, step)
        return monitor

    def _attach_timer(self, trainer: Any) -> None:
        """With ``step_time``: the batch timer among the ``Trainer``'s callbacks (Lightning
        hands a logger no hooks of its own). Done where Lightning first reads the logger, in
        the ``Trainer``'s setup, on every rank, before the first batch."""
        timer = self._timer
        callbacks = getattr(trainer, "callbacks", None)
        if timer is not None and isinstance(callbacks, list) and timer not in callbacks:
            callbacks.append(timer)

    @property
    def save_dir(self) -> str | None:
        """The folder the local backends write under (``trainer.log_dir``): ``save_dir`` or
        ``log_dir`` as given, else the ``default_root_dir`` of the ``Trainer`` running (also
        before the run starts), else ``None`` outside a ``Trainer``."""
        if self._remote_dir is not None:
            return self._remote_dir
        log_dir = self._runs.monitor_kwargs.get("log_dir")
        if log_dir is None:
            trainer, _ = _running_trainer()
            log_dir = None if trainer is None else trainer.default_root_dir
        return None if log_dir is None else os.fspath(log_dir)

    @property
    def monitor(self) -> Monitor | None:
        """The run's ``Monitor``, open or closed; ``None`` before the first use. Unlike
        ``experiment``, never starts a run."""
        return self._runs.last

    @property
    def name(self) -> str:
        """The project (as ``WandbLogger.name``)."""
        return self._runs.project

    @property
    def version(self) -> str:
        """The run name (as ``WandbLogger.version`` is the run's id)."""
        return self._runs.name

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Store ``metrics`` at Lightning's ``step`` (``None``: the next step), each key after
        ``prefix``.

        Tensors become floats; a value that is not a number is skipped with one warning naming
        its key. With ``step_time``, a collective: Lightning calls it on every rank, and after
        training batches the ranks' step times join the metrics (rank 0 stores them).
        """
        timer = self._timer
        if timer is None:
            self._write(metrics, step)
            return
        if self._runs.started is None:
            self._attach_timer(_running_trainer()[0])
        times = timer.clock.collect()  # on every rank: the ranks' view of their step times
        self._write({**metrics, **times}, step)
        timer.clock.idle()  # this call's own time is not a wait for data

    def _write(self, metrics: Mapping[str, Any], step: int | None) -> None:
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{k}": v for k, v in metrics.items()}
        self.experiment.log(loggable(metrics, self._warned, "MonitorLogger", text=False),
                            step=step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None,
                        metrics: Mapping[str, Any] | float | None = None,
                        step: int | None = None) -> None:
        """Store hyperparameters (a ``dict`` or ``argparse.Namespace``; ``None``, the default
        of ``CSVLogger.log_hyperparams``: none) in every backend's run config (flattened with
        ``.``, JSON-safe; see the class docstring for tensors): into the open run, or kept for
        the run that starts at the first metric.

        ``metrics`` as ``TensorBoardLogger`` takes them: a mapping, or one number meaning
        ``{"hp_metric": number}``; stored as scalars at ``step`` (``None``: 0, where
        ``TensorBoardLogger`` stores them). Without ``metrics`` and with
        ``default_hp_metric=True``, ``hp_metric = -1`` at step 0, once per logger; before the
        run started it is kept and written when the run starts (so a ``ddp_spawn`` main
        process that only logs hyperparameters still starts no run)."""
        if isinstance(params, Namespace):
            params = vars(params)
        if params:
            self._runs.log_config(_tensorboard_params(params))
        step = 0 if step is None else step
        if metrics is not None:  # metrics given: stored now, as log_metrics (starts the run)
            if not isinstance(metrics, Mapping):
                metrics = {"hp_metric": metrics}
            self._log_hp_metrics(self.experiment, metrics, step)
            return
        if not self._default_hp_metric or self._hp_metric_written:
            return
        self._hp_metric_written = True
        monitor = self._runs.started
        if monitor is None:  # kept for the run that starts next (see the class docstring)
            self._hp_metrics.append(({"hp_metric": -1}, step))
        else:
            self._log_hp_metrics(monitor, {"hp_metric": -1}, step)

    def _log_hp_metrics(self, monitor: Monitor, metrics: Mapping[str, Any], step: int) -> None:
        """Store ``log_hyperparams``' metrics where the run writes (``TensorBoardLogger``'s
        ``log_hyperparams`` is rank-zero-only: on a rank that writes nothing they are not
        checked either, so that rank's next step stays where rank 0's is)."""
        if monitor.backends:
            self._write(metrics, step)

    def save(self) -> None:
        """Make what was logged readable in every backend (``Monitor.flush``)."""
        monitor = self._runs.started
        if monitor is not None:
            monitor.flush()

    def finalize(self, status: str) -> None:
        """A stage ended (``status`` e.g. ``"success"``, ``"failed"``): flush every backend and
        keep the run open for the next stage (see the class docstring). ``"failed"`` (Lightning
        passes it when fit, validate, test or predict raised, Ctrl-C included) ends the run as
        crashed instead, the exception named (``Monitor.close(crash=...)``), as
        ``MLFlowLogger`` sets its run ``FAILED``; a later stage starts ``<name>-2``."""
        runs = self._runs
        if runs.last is None and (runs.config or self._hp_metrics):
            # hyperparameters given, no run yet: start it here (in the default_root_dir)
            self.experiment  # noqa: B018
        if status == "failed":
            error = sys.exc_info()[1]  # Lightning calls finalize inside its ``except`` block
            runs.close(crash=crash_reason(error) if error is not None else
                       "Lightning ended the stage with status 'failed'")
            return
        runs.pause()

    def close(self) -> None:
        """Close the run: every backend writes what it holds and finishes it. Logging again
        afterwards starts a new run ``<name>-2``, with a warning."""
        self._runs.close()
