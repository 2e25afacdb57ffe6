"""Every monitor section DeepSpeed knows (``tensorboard``, ``wandb``, ``csv_monitor``, ``comet``)
taken over by this project's backends, with DeepSpeed's own defaults and paths.

DeepSpeed's own monitor tests (``tests/unit/monitor/test_monitor.py`` in DeepSpeed's
repository) restated against the integration, each naming the test it restates, with DeepSpeed's
own parsed config (``get_monitor_config``) as the oracle; DeepSpeed's ``csvMonitor`` and ours fed
the same events; a real pipeline-engine run with every section enabled.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import readback
from _run import load, run_script
from deepspeed.monitor.config import DeepSpeedMonitorConfig, get_monitor_config

from core_monitor import ConfigError, RunInfo
from core_monitor.integrations.deepspeed import monitor_arguments

COMET_SKIP = "comet-monitor (the comet backend) is not installed: DeepSpeed keeps its comet section"


def parsed(config: dict) -> DeepSpeedMonitorConfig:
    """The config as DeepSpeed reads it (it refuses what it would refuse at initialize)."""
    return get_monitor_config(config)


# TestTensorBoard ---------------------------------------------------------------------------

def test_tensorboard_section():
    """Restates ``TestTensorBoard.test_tensorboard``: output_path and job_name as DeepSpeed
    reads them place the event files at ``<output_path>/<job_name>``."""
    config = {"train_batch_size": 2, "tensorboard": {
        "enabled": True, "output_path": "test_output/ds_logs/", "job_name": "test"}}
    theirs = parsed(config).tensorboard
    assert (theirs.enabled, theirs.output_path, theirs.job_name) == (
        True, "test_output/ds_logs/", "test")
    arguments = monitor_arguments(config)
    assert arguments["backends"] == ["tensorboard"]
    assert arguments["tensorboard"] == {
        "run_dir": os.path.join(theirs.output_path, theirs.job_name)}
    assert arguments["name"] == theirs.job_name


def test_empty_tensorboard_section():
    """Restates ``TestTensorBoard.test_empty_tensorboard``: an empty section is DeepSpeed's
    defaults, disabled; enabled alone, DeepSpeed's default folder ``./DeepSpeedJobName``."""
    defaults = DeepSpeedMonitorConfig().tensorboard
    assert parsed({"tensorboard": {}}).tensorboard == defaults
    assert monitor_arguments({"train_batch_size": 2, "tensorboard": {}}) is None
    arguments = monitor_arguments({"tensorboard": {"enabled": True}})
    assert arguments["tensorboard"] == {
        "run_dir": os.path.join(defaults.output_path, defaults.job_name)}
    assert "name" not in arguments  # no job_name given: no run name taken from the default


# TestWandB ---------------------------------------------------------------------------------

def test_wandb_section():
    """Restates ``TestWandB.test_wandb``: group, team and project as DeepSpeed reads them (a
    disabled section takes nothing over; enabled, team is the wandb entity)."""
    section = {"group": "my_group", "team": "my_team", "project": "my_project"}
    theirs = parsed({"wandb": {"enabled": False, **section}}).wandb
    assert monitor_arguments({"train_batch_size": 2, "wandb": {"enabled": False, **section}}) \
        is None
    arguments = monitor_arguments({"wandb": {"enabled": True, **section}})
    assert arguments["project"] == theirs.project
    assert arguments["wandb"] == {"group": theirs.group, "entity": theirs.team}


def test_empty_wandb_section():
    """Restates ``TestWandB.test_empty_wandb``: DeepSpeed's defaults (project ``deepspeed``,
    no group, no team)."""
    defaults = DeepSpeedMonitorConfig().wandb
    assert parsed({"wandb": {}}).wandb == defaults
    arguments = monitor_arguments({"wandb": {"enabled": True}})
    assert arguments["project"] == defaults.project == "deepspeed"
    assert "wandb" not in arguments  # no group, no team: nothing to pass on
    assert defaults.group is None and defaults.team is None


# TestCSVMonitor ----------------------------------------------------------------------------

def test_csv_monitor_section():
    """Restates ``TestCSVMonitor.test_csv_monitor``: the ``csv`` backend in DeepSpeed's layout,
    in DeepSpeed's folder ``<output_path>/<job_name>``."""
    config = {"train_batch_size": 2, "csv_monitor": {
        "enabled": True, "output_path": "test_output/ds_logs/", "job_name": "test"}}
    theirs = parsed(config).csv_monitor
    arguments = monitor_arguments(config)
    assert arguments["backends"] == ["csv"]
    assert arguments["csv"] == {"layout": "deepspeed",
                                "run_dir": os.path.join(theirs.output_path, theirs.job_name)}
    assert arguments["name"] == theirs.job_name


def test_empty_csv_monitor_section():
    """Restates ``TestCSVMonitor.test_empty_csv_monitor``: DeepSpeed's defaults."""
    defaults = DeepSpeedMonitorConfig().csv_monitor
    assert parsed({"csv_monitor": {}}).csv_monitor == defaults
    assert monitor_arguments({"csv_monitor": {}}) is None
    arguments = monitor_arguments({"csv_monitor": {"enabled": True}})
    assert arguments["csv"]["run_dir"] == os.path.join(defaults.output_path, defaults.job_name)
    assert "name" not in arguments


def test_csv_monitor_and_a_csv_section_are_one_backend():
    with pytest.raises(ConfigError, match="'csv' and 'csv_monitor' both enable backend 'csv'"):
        monitor_arguments({"csv": {"enabled": True}, "csv_monitor": {"enabled": True}})


# TestCometMonitor --------------------------------------------------------------------------

COMET = {"enabled": True, "samples_log_interval": 42, "workspace": "some-workspace",
         "project": "some-project", "api_key": "some-api-key",
         "experiment_name": "some-experiment-name", "experiment_key": "some-experiment-key",
         "mode": "get_or_create", "online": True}


def test_comet_section():
    """Restates ``TestCometMonitor.test_comet_monitor``: what DeepSpeed's ``CometMonitor``
    passes to ``comet_ml.start`` reaches the comet backend's options of the same names; the
    experiment name is the run's name; ``mode`` the run's resume."""
    pytest.importorskip("comet_monitor", reason=COMET_SKIP)
    theirs = parsed({"train_batch_size": 2, "comet": COMET}).comet
    arguments = monitor_arguments({"train_batch_size": 2, "comet": COMET})
    assert arguments["backends"] == ["comet"]
    started = {key: getattr(theirs, key) for key in (
        "api_key", "project", "workspace", "experiment_key", "online")}  # comet_ml.start's
    assert arguments["comet"] == started
    assert arguments["name"] == theirs.experiment_name
    assert arguments["resume"] == "allow"  # get_or_create: continue the experiment if any
    assert theirs.samples_log_interval == 42  # read (and checked) but not applied: see docs


def test_empty_comet_section():
    """Restates ``TestCometMonitor.test_empty_comet``: DeepSpeed's defaults; enabled alone, online
    (what ``CometConfig`` documents as the default), no name, no resume."""
    pytest.importorskip("comet_monitor", reason=COMET_SKIP)
    defaults = DeepSpeedMonitorConfig().comet
    assert parsed({"comet": {}}).comet == defaults
    assert monitor_arguments({"comet": {}}) is None
    assert monitor_arguments({"comet": {"enabled": True}}) == {
        "backends": ["comet"], "project": "deepspeed",
        "comet": {"online": True, "comet_project": True}}


@pytest.mark.parametrize(("section", "words"), [
    ({"mode": "sometimes"}, r"\"mode\": 'sometimes'"),
    ({"samples_log_interval": "often"}, "samples_log_interval"),
    ({"flush": True}, "CometConfig does not know"),
])
def test_a_comet_key_deepspeed_would_refuse_is_a_config_error(section, words):
    pytest.importorskip("comet_monitor", reason=COMET_SKIP)
    with pytest.raises(ConfigError, match=words):
        monitor_arguments({"comet": {"enabled": True, **section}})


def test_without_comet_monitor_deepspeed_keeps_its_comet_section():
    if _installed("comet_monitor"):
        pytest.skip("comet-monitor is installed: the comet section is taken over")
    assert monitor_arguments({"comet": {"enabled": True}}) is None


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# The CSV monitor's files, side by side -----------------------------------------------------

def test_deepspeeds_csv_monitor_and_ours_write_the_same_files(tmp_path):
    """DeepSpeed's own ``csvMonitor`` and a ``csv_monitor`` section taken over here, fed the
    same ``write_events`` lists in one process: the same files, byte for byte."""
    calls = [
        [["Train/Samples/lr", 0.0125, 2], ["Train/Samples/loss_scale", 32768.0, 2]],
        [["Train/Samples/train_loss", 1.2345678901234567, 2]],
        [["Train/Samples/lr", 0.025, 4], ["Train/Samples/train_loss", 0.5, 4],
         ["Train/Samples/elapsed_time_ms_forward", 1e-20, 4], ["Eval acc", 0.75, 4]],
        [["Train/Samples/train_loss", math.inf, 6], ["Train/Samples/lr", -0.0, 6]],
    ]
    events = tmp_path / "events.json"
    events.write_text(json.dumps(calls), encoding="utf-8")
    run_script("ds_csv_side_by_side.py", tmp_path, events, nproc=1)
    theirs, ours = tmp_path / "theirs" / "job", tmp_path / "ours" / "job"
    names = sorted(p.name for p in theirs.iterdir())
    assert names == ["Eval_acc.csv", "Train_Samples_elapsed_time_ms_forward.csv",
                     "Train_Samples_loss_scale.csv", "Train_Samples_lr.csv",
                     "Train_Samples_train_loss.csv"]
    for name in names:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    # besides them, ours only: the run's status and the file -> tag map for reading back
    assert sorted(p.name for p in ours.iterdir()) == sorted(
        [*names, "deepspeed_config.csv", "status", "tags.json"])
    assert (theirs / "Train_Samples_lr.csv").read_bytes() == (
        b"step,lr\r\n2,0.0125\r\n4,0.025\r\n6,-0.0\r\n")


# A real run with every section -------------------------------------------------------------

#: The project Comet's own configuration names in the real run: its comet section names none,
#: so DeepSpeed's writer (``comet_ml.start(project=None)``) would use this one, not ``ds``.
COMET_PROJECT = "from-comet-config"

@pytest.fixture(scope="module")
def every_section(tmp_path_factory) -> tuple[Path, dict]:
    """One pipeline-engine run with all of DeepSpeed's sections plus ``trackio`` (``comet`` when
    comet-monitor is installed), in a folder of its own (DeepSpeed's own wandb run, Comet
    archive and files would land in ``WANDB_DIR``, ``COMET_OFFLINE_DIRECTORY`` and the working
    folder)."""
    root = tmp_path_factory.mktemp("every_section")
    log_dir, work, wandb_dir, comet_dir = (root / name for name in (
        "logs", "work", "wandb_dir", "comet_dir"))
    for folder in (log_dir, work, wandb_dir, comet_dir):
        folder.mkdir()
    comet = ["comet"] if _installed("comet_monitor") else []
    out = root / "out.json"
    run_script("ds_monitors.py", log_dir, out, *comet, nproc=1, cwd=work,
               env={"WANDB_DIR": str(wandb_dir), "COMET_OFFLINE_DIRECTORY": str(comet_dir),
                    "COMET_PROJECT_NAME": COMET_PROJECT})
    return root, load(out)


def _expected(result: dict) -> list[tuple[str, int, float]]:
    steps = result["steps"]
    assert [s["global_samples"] for s in steps] == [2, 4, 6]
    return sorted([("Train/Samples/lr", s["global_samples"], s["lr"]) for s in steps]
                  + [("Train/Samples/train_loss", s["global_samples"], s["loss"])
                     for s in steps])


def _train(rows) -> list[tuple[str, int, float]]:
    return sorted(r for r in rows if r[0] in ("Train/Samples/lr", "Train/Samples/train_loss"))


def test_initialize_every_section_reaches_its_backend_at_global_samples(every_section):
    from csv_monitor import read_config_in, read_rows_in
    from tensorboard_monitor import read_config as tb_config
    from tensorboard_monitor import read_rows as tb_rows

    root, result = every_section
    log_dir = root / "logs"
    expected = _expected(result)
    assert result["run"] == {"project": "ds", "name": "dsrun", "log_dir": str(log_dir)}
    assert set(result["backends"]) >= {"tensorboard", "csv", "wandb", "trackio"}
    run = RunInfo(project="ds", name="dsrun", log_dir=log_dir)
    for backend in ("trackio", "wandb"):
        readback.assert_rows(backend, run, expected)  # exactly these: nothing else logged
        readback.assert_config(backend, run, result["update_config"])
    tb_folder = log_dir / "tensorboard" / "dsrun"  # DeepSpeed's <output_path>/<job_name>
    stored = _train(tb_rows(run, run_dir=tb_folder))
    assert [(t, s) for t, s, _ in stored] == [(t, s) for t, s, _ in expected]
    assert all(math.isclose(a[2], b[2], rel_tol=1e-6) for a, b in zip(stored, expected,
                                                                       strict=True))
    assert tb_config(run, run_dir=tb_folder).items() >= result["update_config"].items()
    csv_folder = log_dir / "csv" / "dsrun"
    assert _train(read_rows_in(csv_folder)) == expected
    assert read_config_in(csv_folder).items() >= result["update_config"].items()


def test_initialize_every_section_deepspeed_opens_no_writer_of_its_own(every_section):
    root, result = every_section
    assert result["deepspeed_writers"] == []  # no TensorBoard/wandb/csv/Comet writer object
    assert result["left_to_deepspeed"] is False
    assert len(list((root / "logs" / "tensorboard" / "dsrun").glob("events.*"))) == 1  # ours
    assert not list((root / "wandb_dir").rglob("*.wandb")), "DeepSpeed opened its wandb run"
    assert not list((root / "work").iterdir()), "DeepSpeed wrote in the working folder"
    assert not list((root / "comet_dir").iterdir()), "DeepSpeed wrote its own Comet archive"


def test_initialize_every_section_comet(every_section):
    """The comet part: DeepSpeed's comet section as an offline Comet experiment named after
    ``experiment_name``, in the project Comet's configuration names (the section names none,
    and DeepSpeed's writer leaves it to Comet), every event at ``global_samples``
    (``samples_log_interval`` is not applied), ``update_config`` as Comet parameters."""
    comet_monitor = pytest.importorskip("comet_monitor", reason=COMET_SKIP)
    root, result = every_section
    assert "comet" in result["backends"]
    run = RunInfo(project="ds", name="dsrun", log_dir=root / "logs")
    assert _train(comet_monitor.read_rows(run)) == _expected(result)
    (archive,) = comet_monitor.read_archives(run)
    assert archive.experiment["project_name"] == COMET_PROJECT
    assert comet_monitor.read_config(run).items() >= result["update_config"].items()
