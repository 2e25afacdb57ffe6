"""``step_time=True`` of the Lightning and Hugging Face Trainer integrations, and ``StepClock``
in an accelerate loop and a DeepSpeed loop, under torchrun (gloo, 2 ranks): the stored
cross-rank step times name the rank made slow on purpose, read back from TensorBoard's and the
CSV backend's own storage."""

from __future__ import annotations

from pathlib import Path

import pytest
import readback
from _run import load, run_script

BACKENDS = ["tensorboard", "csv"]
VIEW = ("mean", "median", "min", "max", "min_rank", "max_rank")


@pytest.mark.parametrize(("framework", "project", "prefix"), [
    ("lightning", "lit", "step_time"),
    ("transformers", "hf", "train/step_time"),  # under the Trainer's own "train/" (rewrite_logs)
    ("accelerate", "acc", "step_time"),  # a hand-written loop timed with StepClock
    ("deepspeed", "ds", "step_time"),  # DeepSpeed's engine loop timed with StepClock
])
def test_step_time_names_the_rank_slow_in_data_and_the_rank_slow_in_forward(
        framework, project, prefix, log_dir, tmp_path):
    """Rank 1 waits 0.3 s for each batch, rank 0 spends 0.3 s more in each forward pass: the
    ``data`` view names rank 1, the ``forward`` view rank 0, at both logged steps."""
    out = tmp_path / "out.json"
    run_script("step_time_fit.py", framework, log_dir, out, nproc=2)
    run = readback.RunInfo(project=project, name="steptime",
                           log_dir=Path(load(out)["run"]["log_dir"]))
    for backend in BACKENDS:
        stored = {(tag, step): value for tag, step, value in readback.rows(backend, run)
                  if tag.startswith(prefix + "/")}
        steps = sorted({step for _, step in stored})
        assert len(steps) == 2, (backend, steps)  # max_steps=4, logged every 2 steps
        for step in steps:
            for part in ("data", "forward", "step"):
                for name in VIEW:
                    assert (f"{prefix}/{part}/{name}", step) in stored, (backend, part, name)
            assert stored[(f"{prefix}/data/max_rank", step)] == 1.0, (backend, stored)
            assert stored[(f"{prefix}/data/min_rank", step)] == 0.0, (backend, stored)
            assert stored[(f"{prefix}/forward/max_rank", step)] == 0.0, (backend, stored)
            assert stored[(f"{prefix}/forward/min_rank", step)] == 1.0, (backend, stored)
            assert stored[(f"{prefix}/data/max", step)] > 0.25, (backend, stored)
