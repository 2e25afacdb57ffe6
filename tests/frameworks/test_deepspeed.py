"""DeepSpeed on CPU: ``deepspeed.initialize`` + ``attach(engine)``; every backend holds the
engine's ``Train/Samples/lr`` events at exactly its ``global_samples``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import readback
from _run import load, run_script

from core_monitor import ConfigError
from core_monitor.integrations.deepspeed import monitor_arguments

BACKENDS = list(readback.BACKENDS)


def deepspeed_csv(log_dir: Path, tag: str) -> list[tuple[str, int, float]]:
    """What DeepSpeed's own csv_monitor wrote for ``tag`` (the section left to DeepSpeed)."""
    path = log_dir / "csv" / "dsrun" / (tag.replace("/", "_") + ".csv")
    with path.open(newline="") as file:
        rows = list(csv.reader(file))
    return [(tag, int(step), float(value)) for step, value in rows[1:]]


def check_run(log_dir: Path, out: Path, world_size: int) -> None:
    result = load(out)
    steps = result["steps"]
    assert [s["global_samples"] for s in steps] == [2 * world_size * (i + 1) for i in range(4)]
    lr_rows = [("Train/Samples/lr", s["global_samples"], s["lr"]) for s in steps]
    assert deepspeed_csv(log_dir, "Train/Samples/lr") == lr_rows  # DeepSpeed's own record
    expected = lr_rows + [("train/loss", s["global_samples"], s["loss"]) for s in steps]
    run = readback.RunInfo(project="ds", name="dsrun", log_dir=Path(result["run"]["log_dir"]))
    assert result["run"]["name"] == "dsrun"  # tensorboard's job_name
    for backend in BACKENDS:
        assert readback.runs(backend, run) == 1, backend
        readback.assert_rows(backend, run, expected)
        if world_size > 1:
            rank1 = readback.RunInfo("ds", "dsrun", log_dir=run.log_dir, rank=1)
            assert readback.runs(backend, rank1) == 0, backend
    # DeepSpeed's own TensorBoard writer (<output_path>/<job_name>) was closed unused.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    own = EventAccumulator(str(log_dir / "dsrun"), size_guidance={"scalars": 0}).Reload()
    assert own.Tags()["scalars"] == []


def test_attach_takes_over_trackio_tensorboard_and_wandb_sections(log_dir, tmp_path):
    out = tmp_path / "out.json"
    run_script("ds_train.py", log_dir, out, nproc=1)
    assert load(out)["enabled"] is True
    check_run(log_dir, out, world_size=1)


def test_torchrun_two_ranks_one_run_per_backend_written_by_rank_0(log_dir, tmp_path):
    out = tmp_path / "out.json"
    run_script("ds_train.py", log_dir, out, nproc=2)
    ranks = [load(Path(f"{out}.rank{k}.json")) for k in (0, 1)]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert [r["enabled"] for r in ranks] == [True, True]  # same on every rank
    assert ranks[0]["backends"] == BACKENDS and ranks[1]["backends"] == []
    check_run(log_dir, out, world_size=2)


def test_sections_map_onto_monitor_arguments():
    config = {
        "train_batch_size": 8,
        "tensorboard": {"enabled": True, "output_path": "runs", "job_name": "j"},
        "wandb": {"enabled": True, "project": "llm", "group": "g", "team": "t"},
        "trackio": {"enabled": True, "project": "llm"},
        "csv_monitor": {"enabled": True},
    }
    assert monitor_arguments(config) == {
        "backends": ["tensorboard", "wandb", "trackio"], "log_dir": "runs", "name": "j",
        "project": "llm", "wandb": {"group": "g", "entity": "t"},
    }
    assert monitor_arguments({"trackio": {"enabled": False}, "csv_monitor": {"enabled": True}}) \
        is None
    assert monitor_arguments({"experiment_monitors": {"backends": ["trackio"], "project": "p",
                                                      "trackio": {"resume": "allow"}}}) == {
        "backends": ["trackio"], "project": "p", "trackio": {"resume": "allow"}}
    assert monitor_arguments({"trackio": {"enabled": True}})["project"] == "deepspeed"


@pytest.mark.parametrize(("config", "words"), [
    ({"trackio": {"enabled": True, "project": "a"}, "wandb": {"enabled": True, "project": "b"}},
     "project="),
    ({"trackio": {"enabled": True}, "experiment_monitors": {"backends": ["trackio"],
                                                            "project": "p"}},
     "configure it in one place"),
    ({"experiment_monitors": {"backends": ["trackio"], "project": "p", "lr": 1}}, "'lr'"),
])
def test_conflicting_sections_are_config_errors(config, words):
    with pytest.raises(ConfigError, match=words):
        monitor_arguments(config)
