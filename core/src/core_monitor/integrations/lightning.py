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
from typing import Any

from lightning.pytorch.loggers import Logger

from ..monitor import Monitor
from ._common import numeric
from ._runs import LazyRun

__all__ = ["MonitorLogger"]


class MonitorLogger(Logger):
    """A Lightning ``Logger`` that logs through one ``core_monitor.Monitor``.

    The ``Monitor`` is created the first time Lightning touches the logger (``experiment``),
    after the strategy set up the process group, on every rank: each validates the options
    alike and, with ``rank_zero_only=True`` (the default), only global rank 0 writes; under DDP
    the other ranks' calls store nothing and import no backend SDK.

    ``name`` and ``version`` follow Lightning's ``WandbLogger``: ``name`` is the project,
    ``version`` the run name. ``save_dir`` is ``None`` (checkpoints go to the ``Trainer``'s
    ``default_root_dir``), since backends choose their own folders under ``log_dir``.

    Args:
        backends: backend names as installed (``monitors list``) or backend classes, or one name.
        project: the project (``str``).
        name: the run name; default ``YYYYmmdd-HHMMSS-host``, decided when the logger is made.
        **monitor_kwargs: other ``Monitor`` keyword arguments (``log_dir``, ``config``,
            ``strict``, ``rank_zero_only``, one options mapping per backend).

    ``finalize`` (called by Lightning at the end of ``fit``/``validate``/``test``) closes the
    run; a later stage logging with the same logger starts a new run ``<name>-2``, with a
    ``UserWarning`` (a finished run cannot be reopened).

    Raises:
        ConfigError, UnknownBackendError, BackendLoadError: at the first use, as ``Monitor``.
    """

    def __init__(self, backends: Sequence[str | type] | str, *, project: str,
                 name: str | None = None, **monitor_kwargs: Any) -> None:
        super().__init__()
        self._runs = LazyRun(backends, project=project, name=name, source="MonitorLogger",
                             **monitor_kwargs)
        self._warned: set[str] = set()

    @property
    def experiment(self) -> Monitor:
        """The ``Monitor`` of the current run (created at first access)."""
        return self._runs.monitor()

    @property
    def monitor(self) -> Monitor | None:
        """The current run's ``Monitor``, open or closed by ``finalize``; ``None`` before the
        first use. Unlike ``experiment``, never starts a run."""
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
        """Store ``metrics`` at Lightning's ``step`` (``None``: the next step).

        Tensors become floats; a value that is not a number is skipped with one warning naming
        its key.
        """
        self.experiment.log(numeric(metrics, self._warned, "MonitorLogger"), step=step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any,
                        **kwargs: Any) -> None:
        """Store hyperparameters (a ``dict`` or ``argparse.Namespace``) in every backend's run
        config (``Monitor.log_config``: flattened with ``.``, JSON-safe). Extra arguments
        (``TensorBoardLogger``'s ``metrics``) are not used."""
        if isinstance(params, Namespace):
            params = vars(params)
        self.experiment.log_config(params)

    def save(self) -> None:
        """Make what was logged readable in every backend (``Monitor.flush``)."""
        monitor = self._runs.started
        if monitor is not None:
            monitor.flush()

    def finalize(self, status: str) -> None:
        """Flush and close the run (Lightning calls it when a stage ends, ``status`` e.g.
        ``"success"``, ``"failed"``)."""
        self._runs.close()
