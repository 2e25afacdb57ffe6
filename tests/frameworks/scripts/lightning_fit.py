"""A 2-epoch Lightning fit of a tiny model on CPU, logging through ``MonitorLogger`` next to
Lightning's own ``CSVLogger`` (the oracle). Importable (``fit``) and runnable under torchrun:

    torchrun --nproc_per_node 2 lightning_fit.py <log_dir> <out.json>

writes, from global rank 0, ``{"run": {...}, "csv": <metrics.csv>, "hparams": <hparams.yaml>}``
to ``out.json`` and, from every rank, ``<out>.rank<k>.modules.json`` (its ``sys.modules``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from core_monitor.integrations.lightning import MonitorLogger

BACKENDS = ["trackio", "tensorboard", "wandb"]


class TinyRegressor(L.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8, optimizer: dict | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def data(n: int, seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(x, y), batch_size=8)


def fit(log_dir: Path, *, devices: int = 1, name: str = "fit", backends: list[str] | None = None,
        test: bool = False) -> tuple[MonitorLogger, CSVLogger, L.Trainer]:
    """Fit for 2 epochs (6 train batches, 2 val batches per epoch on one device); with
    ``test``, then ``trainer.test`` on 2 batches."""
    torch.manual_seed(0)
    # CSVLogger, the oracle, writes no hp_metric: test_lightning_hparams.py covers it
    monitor_logger = MonitorLogger(backends or BACKENDS, project="lit", name=name,
                                   log_dir=log_dir, default_hp_metric=False)
    csv_logger = CSVLogger(str(log_dir / "csv"), name="oracle")
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
        max_epochs=2, logger=[csv_logger, monitor_logger], log_every_n_steps=1,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(log_dir / "root"),
    )
    model = TinyRegressor(lr=0.05, hidden=8, optimizer={"name": "sgd", "momentum": 0.0})
    trainer.fit(model, data(48, 1), data(16, 2))
    if test:
        trainer.test(model, data(16, 3))
    return monitor_logger, csv_logger, trainer


def main() -> None:
    log_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    monitor_logger, csv_logger, trainer = fit(log_dir, devices=int(os.environ["WORLD_SIZE"]),
                                              name="ddp")
    rank = trainer.global_rank
    if rank == 0:
        run = monitor_logger.monitor.run
        out.write_text(json.dumps({
            "run": {"project": run.project, "name": run.name, "log_dir": str(run.log_dir)},
            "backends": monitor_logger.monitor.backends,
            "csv": str(Path(csv_logger.log_dir) / "metrics.csv"),
        }))
    monitors = monitor_logger.monitor
    Path(f"{out}.rank{rank}.json").write_text(json.dumps({
        "modules": sorted(sys.modules), "backends": monitors.backends,
        "rank": monitors.run.rank, "world_size": monitors.run.world_size,
    }))


if __name__ == "__main__":
    main()
