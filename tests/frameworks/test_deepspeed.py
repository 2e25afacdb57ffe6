"""DeepSpeed on CPU: ``initialize`` (the drop-in) or ``deepspeed.initialize`` + ``attach``;
every backend holds the engine's ``Train/Samples/*`` events at exactly its ``global_samples``,
and DeepSpeed's own TensorBoard folder from the same seeded run is the oracle."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
import readback
from _run import load, run_script
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from core_monitor import ConfigError
from core_monitor.integrations.deepspeed import monitor_arguments

BACKENDS = list(readback.BACKENDS)


def deepspeed_csv(log_dir: Path, tag: str) -> list[tuple[str, int, float]]:
    """What the ``csv_monitor`` section's files hold for ``tag``, read as DeepSpeed's layout
    (written by the ``csv`` backend, which takes the section over, or by DeepSpeed's own
    ``csvMonitor`` in ``deepspeed`` mode)."""
    path = log_dir / "csv" / "dsrun" / (tag.replace("/", "_") + ".csv")
    with path.open(newline="") as file:
        rows = list(csv.reader(file))
    return [(tag, int(step), float(value)) for step, value in rows[1:]]


def event_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("events.out.tfevents.*"))


def scalars(folder: Path) -> list[tuple[str, int, float]]:
    """Every scalar of the event files directly in ``folder``, as TensorBoard reads them."""
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return sorted((tag, e.step, e.value) for tag in accumulator.Tags()["scalars"]
                  for e in accumulator.Scalars(tag))


def check_run(log_dir: Path, out: Path, world_size: int) -> None:
    result = load(out)
    steps = result["steps"]
    assert [s["global_samples"] for s in steps] == [2 * world_size * (i + 1) for i in range(4)]
    lr_rows = [("Train/Samples/lr", s["global_samples"], s["lr"]) for s in steps]
    assert deepspeed_csv(log_dir, "Train/Samples/lr") == lr_rows  # the csv_monitor section
    mine = [("train/loss", s["global_samples"], s["loss"]) for s in steps]
    run = readback.RunInfo(project="ds", name="dsrun", log_dir=Path(result["run"]["log_dir"]))
    assert result["run"]["name"] == "dsrun"  # tensorboard's job_name
    assert Path(result["run"]["log_dir"]) == log_dir  # the trackio section's log_dir
    for backend in ("trackio", "wandb"):
        assert readback.runs(backend, run) == 1, backend
        stored = readback.rows(backend, run)
        assert sorted(r for r in stored if r[0] in ("Train/Samples/lr", "train/loss")) == sorted(
            lr_rows + mine), backend
        if world_size > 1:
            rank1 = readback.RunInfo("ds", "dsrun", log_dir=run.log_dir, rank=1)
            assert readback.runs(backend, rank1) == 0, backend
    # TensorBoard: where DeepSpeed writes, <output_path>/<job_name>, not <log_dir>/<project>/..
    assert not (log_dir / "ds").exists()
    ours = [r for r in scalars(log_dir / "dsrun") if r[0] in ("Train/Samples/lr", "train/loss")]
    assert [(t, s) for t, s, _ in ours] == sorted((t, s) for t, s, _ in lr_rows + mine)
    assert not (log_dir / "dsrun" / "rank1").exists()


def test_attach_takes_over_trackio_tensorboard_and_wandb_sections(log_dir, tmp_path):
    out = tmp_path / "out.json"
    run_script("ds_train.py", log_dir, out, "attach", nproc=1)
    assert load(out)["enabled"] is True
    check_run(log_dir, out, world_size=1)
    # attach closes the writer DeepSpeed opened: its event file stays, without scalars
    assert len(event_files(log_dir / "dsrun")) == 2


# What users get (writer processes): this framework's one run in the users' default dispatch.
@pytest.mark.process
def test_initialize_under_torchrun_two_ranks_one_run_per_backend_by_rank_0(log_dir, tmp_path):
    out = tmp_path / "out.json"
    run_script("ds_train.py", log_dir, out, "initialize", nproc=2)
    ranks = [load(Path(f"{out}.rank{k}.json")) for k in (0, 1)]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert [r["enabled"] for r in ranks] == [True, True]  # same on every rank
    assert ranks[0]["backends"] == ["tensorboard", "csv", "trackio", "wandb"]
    assert ranks[1]["backends"] == []
    check_run(log_dir, out, world_size=2)
    # initialize: DeepSpeed opened no writer of its own for the sections taken over
    assert len(event_files(log_dir / "dsrun")) == 1  # ours only
    wandb_dir = Path(os.environ["WANDB_DIR"])  # where DeepSpeed's own wandb run would go
    assert not list(wandb_dir.rglob("*.wandb")), "DeepSpeed opened its wandb run"


def test_deepspeeds_own_tensorboard_folder_and_ours_hold_the_same_events(log_dir, tmp_path):
    """The same seeded run twice: DeepSpeed's own writer, then this project's backend, each
    writing DeepSpeed's ``<output_path>/<job_name>``: same tags, steps and values."""
    theirs_dir, ours_dir = log_dir / "deepspeed", log_dir / "monitors"
    run_script("ds_train.py", theirs_dir, tmp_path / "theirs.json", "deepspeed", nproc=1)
    run_script("ds_train.py", ours_dir, tmp_path / "ours.json", "initialize", nproc=1)
    theirs = scalars(theirs_dir / "dsrun")
    assert [(t, s) for t, s, _ in theirs] == [("Train/Samples/lr", 2 * (i + 1)) for i in range(4)]
    ours = [r for r in scalars(ours_dir / "dsrun") if r[0].startswith("Train/")]
    assert ours == theirs
    assert load(tmp_path / "theirs.json")["steps"] == load(tmp_path / "ours.json")["steps"]


def test_sections_map_onto_monitor_arguments():
    config = {
        "train_batch_size": 8,
        "tensorboard": {"enabled": True, "output_path": "runs", "job_name": "j"},
        "wandb": {"enabled": True, "project": "llm", "group": "g", "team": "t"},
        "trackio": {"enabled": True, "project": "llm"},
        "csv_monitor": {"enabled": True},
    }
    assert monitor_arguments(config) == {
        "backends": ["tensorboard", "wandb", "trackio", "csv"], "name": "j", "project": "llm",
        "tensorboard": {"run_dir": os.path.join("runs", "j")},
        "wandb": {"group": "g", "entity": "t"},  # the wandb plugin's from_deepspeed
        "csv": {"layout": "deepspeed", "run_dir": "DeepSpeedJobName"},  # DeepSpeed's default
    }
    assert monitor_arguments({"trackio": {"enabled": False}, "csv_monitor": {"enabled": False}}) \
        is None
    assert monitor_arguments({"experiment_monitors": {"backends": ["trackio"], "project": "p",
                                                      "trackio": {"resume": "allow"}}}) == {
        "backends": ["trackio"], "project": "p", "trackio": {"resume": "allow"}}
    assert monitor_arguments({"trackio": {"enabled": True}})["project"] == "deepspeed"


def test_deepspeeds_tensorboard_defaults_are_its_own():
    """DeepSpeed's defaults: output_path "" and job_name "DeepSpeedJobName" (./DeepSpeedJobName);
    no job_name given, no run name taken from it."""
    arguments = monitor_arguments({"tensorboard": {"enabled": True}})
    assert arguments["tensorboard"] == {"run_dir": "DeepSpeedJobName"}
    assert "name" not in arguments


@pytest.mark.parametrize(("value", "enabled"), [
    (True, True), ("true", True), (1, True), ("yes", True), ("on", True),
    (False, False), ("false", False), (0, False), ("no", False),
])
def test_enabled_is_read_as_deepspeed_reads_it(value, enabled):
    from deepspeed.monitor.config import get_monitor_config

    assert get_monitor_config({"tensorboard": {"enabled": value}}).tensorboard.enabled is enabled
    arguments = monitor_arguments({"tensorboard": {"enabled": value},
                                   "trackio": {"enabled": value}})
    assert (arguments["backends"] if arguments else []) == (
        ["tensorboard", "trackio"] if enabled else [])


def test_an_enabled_value_deepspeed_refuses_is_a_config_error_naming_the_section():
    with pytest.raises(ConfigError, match=r"'trackio'.*'maybe'"):
        monitor_arguments({"trackio": {"enabled": "maybe"}})


def test_backend_options_go_in_the_experiment_monitors_section():
    """DeepSpeed refuses keys of its own tensorboard/wandb sections it does not know; the
    experiment_monitors section carries them, merged with what DeepSpeed's section says."""
    from deepspeed.monitor.config import get_monitor_config

    with pytest.raises(Exception, match="Extra inputs are not permitted"):
        get_monitor_config({"tensorboard": {"enabled": True, "flush_secs": 5}})
    config = {"tensorboard": {"enabled": True, "output_path": "o", "job_name": "j"},
              "experiment_monitors": {"tensorboard": {"flush_secs": 5}}}
    get_monitor_config(config)  # DeepSpeed takes this config
    assert monitor_arguments(config)["tensorboard"] == {"run_dir": os.path.join("o", "j"),
                                                        "flush_secs": 5}
    with pytest.raises(ConfigError, match="run_dir"):
        monitor_arguments({**config, "experiment_monitors": {"tensorboard": {"run_dir": "x"}}})


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
