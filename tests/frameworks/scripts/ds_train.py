"""``deepspeed.initialize`` on a tiny model on CPU, then ``attach(engine)``; 4 optimizer steps.

    torchrun --nproc_per_node N ds_train.py <log_dir> <out.json>

The DeepSpeed config enables ``trackio`` (DeepSpeed's section convention applied to this
project's backend), DeepSpeed's standard ``tensorboard`` and ``wandb`` sections, and
``csv_monitor`` (left to DeepSpeed: its CSV files are a second oracle of the events). Rank 0
writes ``out.json``: what the engine reported after each step (``global_samples``, lr, loss);
every rank writes ``<out>.rank<k>.json`` (its ``sys.modules``, backends, rank).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import deepspeed
import torch

from core_monitor.integrations.deepspeed import attach


def main() -> None:
    log_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0,
                                                     "warmup_max_lr": 0.05,
                                                     "warmup_num_steps": 4}},
        "trackio": {"enabled": True, "project": "ds"},
        "tensorboard": {"enabled": True, "output_path": str(log_dir), "job_name": "dsrun"},
        "wandb": {"enabled": True, "project": "ds"},
        "csv_monitor": {"enabled": True, "output_path": str(log_dir / "csv"),
                        "job_name": "dsrun"},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    ds_monitor = attach(engine)
    steps = []
    for _ in range(4):
        x = torch.randn(2, 4)
        loss = torch.nn.functional.mse_loss(engine(x), x.sum(dim=1, keepdim=True))
        engine.backward(loss)
        engine.step()
        lr = engine.get_lr()[0]
        ds_monitor.monitor.log({"train/loss": loss.item()}, step=engine.global_samples)
        steps.append({"global_samples": engine.global_samples, "lr": lr, "loss": loss.item()})
    ds_monitor.close()
    rank = engine.global_rank
    monitor = ds_monitor.monitor
    if rank == 0:
        run = monitor.run
        out.write_text(json.dumps({
            "run": {"project": run.project, "name": run.name, "log_dir": str(run.log_dir)},
            "steps": steps, "enabled": ds_monitor.enabled,
        }))
    Path(f"{out}.rank{rank}.json").write_text(json.dumps({
        "modules": sorted(sys.modules), "backends": monitor.backends, "rank": monitor.run.rank,
        "world_size": monitor.run.world_size, "enabled": ds_monitor.enabled,
        "steps": steps,
    }))


if __name__ == "__main__":
    main()
