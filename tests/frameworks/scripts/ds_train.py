"""A tiny model trained with DeepSpeed on CPU for 4 optimizer steps, in one of four modes.

    torchrun --nproc_per_node N ds_train.py <log_dir> <out.json> <mode> [<backend>,...]

Modes: ``attach`` (``deepspeed.initialize``, then ``attach(engine)``), ``initialize`` (this
project's drop-in ``initialize``), ``deepspeed`` (``deepspeed.initialize`` alone: DeepSpeed's own
TensorBoard writer, the oracle; no backend of this project), ``section`` (the drop-in
``initialize`` with the backends named by the fourth argument in one ``experiment_monitors``
section, project ``ds``, name ``dsrun``, ``log_dir`` the first argument, except ``csv``, which
comes through the ``csv_monitor`` section; no ``tensorboard``, ``wandb`` or ``trackio`` section).

The DeepSpeed config enables DeepSpeed's standard ``tensorboard`` section (events in
``<log_dir>/dsrun``, DeepSpeed's ``<output_path>/<job_name>``) and, except in ``deepspeed``
mode, its ``wandb`` section (``"enabled": 1``, which DeepSpeed accepts), a ``trackio`` section
(``"enabled": "true"``; DeepSpeed's convention applied to this project's backend) holding the
``log_dir`` of the other backends, an ``experiment_monitors`` section holding a TensorBoard
option DeepSpeed would refuse in its own section, and ``csv_monitor`` (its CSV files, DeepSpeed's
layout, are a second record: the ``csv`` backend's, or DeepSpeed's own). Rank 0 writes
``out.json`` (what the engine reported after each step: ``global_samples``, lr, loss); every rank
writes ``<out>.rank<k>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import deepspeed
import torch


def main() -> None:
    log_dir, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0,
                                                     "warmup_max_lr": 0.05,
                                                     "warmup_num_steps": 4}},
        "tensorboard": {"enabled": True, "output_path": str(log_dir), "job_name": "dsrun"},
        "csv_monitor": {"enabled": True, "output_path": str(log_dir / "csv"),
                        "job_name": "dsrun"},
    }
    if mode == "section":
        del config["tensorboard"]
        # csv comes through DeepSpeed's own csv_monitor section above (its per-tag layout);
        # naming it here as well is refused ("configure it in one place")
        listed = [name for name in sys.argv[4].split(",") if name != "csv"]
        config["experiment_monitors"] = {"backends": listed, "project": "ds",
                                         "name": "dsrun", "log_dir": str(log_dir)}
    elif mode != "deepspeed":
        config.update({
            "trackio": {"enabled": "true", "project": "ds", "log_dir": str(log_dir)},
            "wandb": {"enabled": 1, "project": "ds"},
            "experiment_monitors": {"tensorboard": {"flush_secs": 5}},
        })
    if mode in ("initialize", "section"):
        from core_monitor.integrations.deepspeed import initialize

        engine, _, _, _ = initialize(model=model, model_parameters=model.parameters(),
                                     config=config)
    else:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
    if mode == "attach":
        from core_monitor.integrations.deepspeed import attach

        attach(engine)
    ds_monitor = engine.monitor if mode != "deepspeed" else None
    steps = []
    torch.manual_seed(1)
    for _ in range(4):
        x = torch.randn(2, 4)
        loss = torch.nn.functional.mse_loss(engine(x), x.sum(dim=1, keepdim=True))
        engine.backward(loss)
        engine.step()
        lr = engine.get_lr()[0]
        if ds_monitor is not None:
            ds_monitor.monitor.log({"train/loss": loss.item()}, step=engine.global_samples)
        steps.append({"global_samples": engine.global_samples, "lr": lr, "loss": loss.item()})
    rank = engine.global_rank
    result: dict = {"steps": steps, "rank": rank}
    if ds_monitor is not None:
        ds_monitor.close()
        monitor = ds_monitor.monitor
        run = monitor.run
        result.update({
            "run": {"project": run.project, "name": run.name, "log_dir": str(run.log_dir)},
            "enabled": ds_monitor.enabled, "backends": monitor.backends,
            "failures": dict(monitor.failures), "undelivered": dict(monitor.undelivered),
            "world_size": run.world_size,
        })
    if rank == 0:
        out.write_text(json.dumps(result))
    result["modules"] = sorted(sys.modules)
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        # Every rank ends together and takes its process group down: a rank that exited while
        # another still closed its monitor aborted in gloo's teardown ("terminate called
        # without an active exception", SIGABRT) in one frameworks run here.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
