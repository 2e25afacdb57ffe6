"""DeepSpeed's pipeline engine on CPU (one stage, 3 batches) through this project's drop-in
``initialize``, with every monitor section DeepSpeed knows enabled, plus ``trackio``.

    torchrun --nproc_per_node 1 ds_monitors.py <log_dir> <out.json> [comet]

The pipeline engine is the one that logs ``Train/Samples/train_loss`` (besides
``Train/Samples/lr``), at ``global_samples``. Sections: ``tensorboard`` and ``csv_monitor``
(``<log_dir>/<section>/dsrun``), ``wandb`` (project ``ds``), ``trackio`` (project ``ds``,
``log_dir``), and with ``comet`` DeepSpeed's ``comet`` section (offline, experiment ``dsrun``).
After training, ``engine.monitor.update_config`` gets DeepSpeed's ZeRO stage and data-parallel
size. ``out.json``: what the engine reported after each batch, the run, the backends, and the
DeepSpeed writer objects alive at the end (none expected).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import deepspeed
import torch
from deepspeed.monitor.comet import CometMonitor
from deepspeed.monitor.csv_monitor import csvMonitor
from deepspeed.monitor.tensorboard import TensorBoardMonitor
from deepspeed.monitor.wandb import WandbMonitor
from deepspeed.pipe import PipelineModule

from core_monitor.integrations.deepspeed import initialize


def main() -> None:
    log_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    deepspeed.init_distributed(dist_backend="gloo")  # a PipelineModule needs it first
    torch.manual_seed(0)
    model = PipelineModule(layers=[torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)],
                           num_stages=1, loss_fn=torch.nn.MSELoss())
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1000,
        "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0,
                                                     "warmup_max_lr": 0.05,
                                                     "warmup_num_steps": 3}},
        "tensorboard": {"enabled": True, "output_path": str(log_dir / "tensorboard"),
                        "job_name": "dsrun"},
        "csv_monitor": {"enabled": True, "output_path": str(log_dir / "csv"),
                        "job_name": "dsrun"},
        "wandb": {"enabled": True, "project": "ds"},
        "trackio": {"enabled": True, "project": "ds", "log_dir": str(log_dir)},
    }
    if "comet" in sys.argv[3:]:
        config["comet"] = {"enabled": True, "online": False, "experiment_name": "dsrun"}
    engine, _, _, _ = initialize(model=model, model_parameters=model.parameters(),
                                 config=config)

    def batches():
        torch.manual_seed(1)
        while True:
            x = torch.randn(2, 4)
            yield x, x.sum(dim=1, keepdim=True)

    data = batches()
    steps = []
    for _ in range(3):
        loss = engine.train_batch(data)
        steps.append({"global_samples": engine.global_samples, "lr": engine.get_lr()[0],
                      "loss": loss.item()})
    update = {"zero_stage": engine.zero_optimization_stage(),
              "data_parallel_world_size": engine.dp_world_size}
    engine.monitor.update_config(update)
    engine.monitor.close()
    gc.collect()
    writers = (TensorBoardMonitor, WandbMonitor, csvMonitor, CometMonitor)
    run = engine.monitor.monitor.run
    out.write_text(json.dumps({
        "steps": steps, "update_config": update, "backends": engine.monitor.monitor.backends,
        "run": {"project": run.project, "name": run.name, "log_dir": str(run.log_dir)},
        "left_to_deepspeed": engine.monitor.deepspeed_monitor is not None,
        "deepspeed_writers": sorted(type(o).__name__ for o in gc.get_objects()
                                    if isinstance(o, writers)),
    }))


if __name__ == "__main__":
    main()
