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

from argparse import Namespace
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

from lightning.pytorch.loggers import Logger

from ..errors import ConfigError
from ..monitor import Monitor
from ._common import loggable
from ._runs import LazyRun

__all__ = ["DEFAULT_PROJECT", "MonitorLogger"]

#: The project when none is given: the name Lightning's built-in loggers default to.
DEFAULT_PROJECT = "lightning_logs"


def _fitting_from_checkpoint() -> bool:
    """Whether a Lightning ``Trainer`` up the call stack runs from a checkpoint: Lightning hands
    a logger no trainer, and reads ``experiment`` from inside its own calls (the setup hook of
    ``Trainer._run(model, ckpt_path=...)``, before the checkpoint is restored and
    ``trainer.ckpt_path`` set), so the ``ckpt_path`` of the ``Trainer`` method running is
    read, else ``trainer.ckpt_path``."""
    import sys

    trainer_class = getattr(sys.modules.get("lightning.pytorch"), "Trainer", None)
    if trainer_class is None:
        return False
    found = None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(64):
        if frame is None:
            break
        local = frame.f_locals
        for key in ("self", "trainer"):
            if isinstance(local.get(key), trainer_class):
                if key == "self" and "ckpt_path" in local:
                    return local["ckpt_path"] is not None
                found = found or local[key]
        frame = frame.f_back
    return found is not None and getattr(found, "ckpt_path", None) is not None


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
    run open; it is closed by ``close()``, at interpreter exit, or when another logger of this
    project starts a run in this process while this one waits between stages (see
    ``core_monitor.integrations._runs``).

    ``name`` and ``version`` follow Lightning's ``WandbLogger``: ``name`` is the project,
    ``version`` the run name (so checkpoints go to ``<default_root_dir>/<project>/<run
    name>/checkpoints``). ``save_dir`` is ``None``, since backends choose their own folders
    under ``log_dir``.

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
        **monitor_kwargs: other ``Monitor`` keyword arguments (``log_dir``, ``config``,
            ``strict``, ``rank_zero_only``, one options mapping per backend).

    Raises:
        ConfigError: ``prefix`` is not a ``str``; at the first use, as ``Monitor`` raises it;
            ``UnknownBackendError``, ``BackendLoadError`` likewise.
    """

    #: What joins ``prefix`` and a metric key (Lightning's ``Logger.LOGGER_JOIN_CHAR``).
    LOGGER_JOIN_CHAR = "-"

    def __init__(self, backends: Sequence[str | type] | str | None = None, *,
                 project: str = DEFAULT_PROJECT, name: str | None = None, prefix: str = "",
                 **monitor_kwargs: Any) -> None:
        super().__init__()
        if not isinstance(prefix, str):
            raise ConfigError(f"MonitorLogger: prefix={prefix!r} must be a str, e.g. 'fold1'")
        self._prefix = prefix
        self._runs = LazyRun(backends, project=project, name=name, source="MonitorLogger",
                             **monitor_kwargs)
        self._warned: set[str] = set()

    @property
    def experiment(self) -> Monitor:
        """The ``Monitor`` of the run (created at first access; on every rank, where ranks
        other than 0 write nothing: no ``DummyExperiment``). A run started while the
        ``Trainer`` fits from a checkpoint (``fit(ckpt_path=...)``) reattaches to the run of
        this name (``Monitor(resume="allow")``) instead of starting ``<name>-2``."""
        runs = self._runs
        started = runs.started
        return started if started is not None else runs.monitor(resume=_fitting_from_checkpoint())

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
        its key.
        """
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{k}": v for k, v in metrics.items()}
        self.experiment.log(loggable(metrics, self._warned, "MonitorLogger", text=False),
                            step=step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any,
                        **kwargs: Any) -> None:
        """Store hyperparameters (a ``dict`` or ``argparse.Namespace``) in every backend's run
        config (flattened with ``.``, JSON-safe): into the open run, or kept for the run that
        starts at the first metric. Extra arguments (``TensorBoardLogger``'s ``metrics``) are
        not used."""
        if isinstance(params, Namespace):
            params = vars(params)
        self._runs.log_config(params)

    def save(self) -> None:
        """Make what was logged readable in every backend (``Monitor.flush``)."""
        monitor = self._runs.started
        if monitor is not None:
            monitor.flush()

    def finalize(self, status: str) -> None:
        """A stage ended (``status`` e.g. ``"success"``, ``"failed"``): flush every backend and
        keep the run open for the next stage (see the class docstring)."""
        self._runs.pause()

    def close(self) -> None:
        """Close the run: every backend writes what it holds and finishes it. Logging again
        afterwards starts a new run ``<name>-2``, with a warning."""
        self._runs.close()
