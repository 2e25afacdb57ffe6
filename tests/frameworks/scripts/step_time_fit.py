"""``step_time=True`` under torchrun: rank 1's data loader and rank 0's forward pass are slow on
purpose (``SLOW`` seconds a batch each), so the stored step times must name rank 1 for the
wait for data and rank 0 for the forward pass, although both ranks' whole steps take about
as long (the gradient all-reduce waits for the slower one).

    torchrun --nproc_per_node 2 step_time_fit.py lightning|transformers|accelerate|deepspeed \
        <log_dir> <out.json>

(``accelerate``: a hand-written loop timed with ``StepClock``, logged by ``MonitorTracker``;
``deepspeed``: the same with DeepSpeed's engine, logged by ``engine.monitor``.)

writes, from rank 0, ``{"run": {"project", "name", "log_dir"}, "steps": [logged steps]}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

BACKENDS = ["tensorboard", "csv"]
SLOW = 0.3  # seconds: far above the noise of a busy machine
RANK = int(os.environ.get("RANK", "0"))


def collate(rows: list) -> dict[str, torch.Tensor]:
    """Stack a batch; rank 1's loader is slow."""
    if RANK == 1:
        time.sleep(SLOW)
    return {"x": torch.stack([r[0] for r in rows]), "labels": torch.stack([r[1] for r in rows])}


def dataset(n: int = 64) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=generator)
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


class Net(torch.nn.Module):
    """A tiny regressor whose forward pass is slow on rank 0 (the Trainer's model)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        if RANK == 0 and self.training:
            time.sleep(SLOW)
        out = self.layer(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def lightning(log_dir: Path) -> tuple[object, int]:
    import lightning as L

    from core_monitor.integrations.lightning import MonitorLogger

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Net()

        def training_step(self, batch, batch_idx):
            loss = self.net(batch["x"], batch["labels"])["loss"]
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    logger = MonitorLogger(BACKENDS, project="lit", name="steptime", log_dir=log_dir,
                           default_hp_metric=False, step_time=True)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=4,
                        log_every_n_steps=2, logger=logger, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(log_dir / "root"))
    loader = torch.utils.data.DataLoader(dataset(), batch_size=4, collate_fn=collate)
    trainer.fit(Module(), loader)
    logger.close()
    return logger.monitor, trainer.global_rank


def transformers(log_dir: Path) -> tuple[object, int]:
    from transformers import Trainer, TrainingArguments

    from core_monitor.integrations.transformers import MonitorCallback

    callback = MonitorCallback(BACKENDS, project="hf", name="steptime", log_dir=log_dir,
                               step_time=True)
    args = TrainingArguments(output_dir=str(log_dir / "out"), max_steps=4, logging_steps=2,
                             per_device_train_batch_size=4, learning_rate=0.01,
                             report_to="none", use_cpu=True, ddp_backend="gloo",
                             save_strategy="no", disable_tqdm=True, seed=0)
    trainer = Trainer(model=Net(), args=args, train_dataset=dataset(), data_collator=collate,
                      callbacks=[callback])
    trainer.train()
    callback.close()
    return callback.monitor, trainer.args.process_index


def timed_steps(loader: Any, forward: Callable[[Any], torch.Tensor],
                backward: Callable[[torch.Tensor], None],
                log: Callable[[dict[str, float], int], None]) -> None:
    """Four steps of a hand-written loop timed with ``StepClock`` (``forward(batch)`` -> loss,
    then ``backward(loss)``, which also steps the optimizer); every second step each rank
    collects the cross-rank view (one all_gather) and ``log(values, step)``s it with the
    loss."""
    from core_monitor.integrations.step_time import StepClock

    clock = StepClock("step_time")
    clock.idle()
    for step, batch in enumerate(loader):
        if step == 4:
            break
        clock.start()
        loss = forward(batch)
        clock.backward()
        backward(loss)
        clock.end()
        if step % 2 == 1:
            log({"loss": loss.item(), **clock.collect()}, step)
            clock.idle()


def accelerate(log_dir: Path) -> tuple[object, int]:
    from accelerate import Accelerator

    from core_monitor.integrations.accelerate import MonitorTracker

    tracker = MonitorTracker(BACKENDS, run_name="steptime", log_dir=log_dir)
    accelerator = Accelerator(cpu=True, log_with=tracker, project_dir=str(log_dir))
    accelerator.init_trackers("acc")
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=4, collate_fn=collate)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def backward(loss: torch.Tensor) -> None:
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    timed_steps(loader, lambda batch: model(batch["x"], batch["labels"])["loss"], backward,
                lambda values, step: accelerator.log(values, step=step))
    accelerator.end_training()
    return tracker.monitor, accelerator.process_index


def deepspeed(log_dir: Path) -> tuple[object, int]:
    """DeepSpeed's own loop (``engine.backward``/``engine.step``) timed with ``StepClock``, as
    docs/frameworks/deepspeed.md says; the engine's monitor (an ``experiment_monitors``
    section) logs the cross-rank view from rank 0."""
    from core_monitor.integrations.deepspeed import initialize

    model = Net()
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
              "experiment_monitors": {"backends": BACKENDS, "project": "ds",
                                      "name": "steptime", "log_dir": str(log_dir)}}
    engine, _, _, _ = initialize(model=model, model_parameters=model.parameters(),
                                 config=config)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=4, collate_fn=collate)

    def backward(loss: torch.Tensor) -> None:
        engine.backward(loss)
        engine.step()

    timed_steps(loader, lambda batch: engine(batch["x"], batch["labels"])["loss"], backward,
                lambda values, step: engine.monitor.monitor.log(values, step=step))
    engine.monitor.close()
    return engine.monitor.monitor, engine.global_rank


def main() -> None:
    framework, log_dir, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    monitor, rank = {"lightning": lightning, "transformers": transformers,
                      "accelerate": accelerate, "deepspeed": deepspeed}[framework](log_dir)
    if rank == 0:
        run = monitor.run  # type: ignore[attr-defined]
        out.write_text(json.dumps({"run": {"project": run.project, "name": run.name,
                                           "log_dir": str(run.log_dir)}}))
    if torch.distributed.is_initialized():  # every rank ends together (see ds_train.py)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
