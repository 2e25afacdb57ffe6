"""accelerate's own tests of its Comet, ClearML, DVCLive, SwanLab and Aim trackers, restated
against ``MonitorTracker`` with the built-in tracker as the oracle.

Restated from accelerate's ``tests/test_tracking.py``: ``CometMLTest``, ``ClearMLTest``
(``test_init_trackers``, ``test_log``), ``DVCLiveTrackingTest``, ``SwanLabTrackingTest`` (skipped
upstream; its config and scalar checks) and ``TrackerDeferredInitializationTest`` for the five.
Each test runs accelerate's built-in tracker and ``MonitorTracker([<backend>])`` on the same
``init_trackers``/``log`` calls, reads the built-in tracker's storage as accelerate's test
reads it (the SDK's own files and readers) and ours through the plugin's reader, and asserts
they hold the same config and the same (tag, step, value); every difference is one the
framework page (``docs/frameworks/accelerate.md``) names, asserted as named there.

Everything offline (``tests/sdk_env.py``): Comet ``online=False`` into a folder under
``tmp_path``, ClearML's offline mode with its cache under ``tmp_path``, DVCLive without DVC
Studio in a ``tmp_path`` that is no Git repository (``Live()`` runs ``dvc init`` inside one),
SwanLab ``mode="offline"``, Aim's repository under ``tmp_path``.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from accelerate import Accelerator
from accelerate.state import PartialState
from accelerate.tracking import (
    AimTracker,
    ClearMLTracker,
    CometMLTracker,
    DVCLiveTracker,
    SwanLabTracker,
)

from core_monitor import BackendWarning
from core_monitor.integrations.accelerate import MonitorTracker

#: accelerate's ``test_init_trackers`` config and ``test_log`` values.
CONFIG = {"num_iterations": 12, "learning_rate": 1e-2, "some_boolean": False,
          "some_string": "some_value"}
VALUES = {"total_loss": 0.1, "iteration": 1, "my_text": "some_value"}
NUMBERS = [("iteration", 0, 1.0), ("total_loss", 0, 0.1)]


def ours(log_dir: Path, backend: str, name: str = "ours") -> MonitorTracker:
    return MonitorTracker([backend], run_name=name, log_dir=log_dir)


def plugin_rows(backend: str, tracker: MonitorTracker) -> list[tuple[str, int, float]]:
    import readback

    return sorted(readback.rows(backend, tracker.monitor.run))


def plugin_config(backend: str, tracker: MonitorTracker) -> dict[str, Any]:
    import readback

    return readback.config(backend, tracker.monitor.run)


# --- Comet ----------------------------------------------------------------------------------

def comet_messages(folder: Path) -> list[dict[str, Any]]:
    """The payloads of the one offline archive in ``folder`` (``CometMLTest``'s reading)."""
    (archive,) = folder.glob("*.zip")
    with zipfile.ZipFile(archive) as opened:
        lines = opened.read("messages.json").decode("utf-8").splitlines()
    return [json.loads(line)["payload"] for line in lines if line.strip()]


def comet_beside_ours(tmp_path, log_dir, *, ours_first: bool):
    """accelerate's ``CometMLTracker`` (offline, under ``tmp_path``) and ours (comet), started in
    the order asked, given ``CONFIG`` and ``VALUES`` at step 0, ended; (our tracker, the
    messages of Comet's archive)."""
    from comet_ml import ExperimentConfig

    builtin_dir = tmp_path / "comet-builtin"
    builtin = CometMLTracker("test_project", online=False,
                             experiment_config=ExperimentConfig(
                                 offline_directory=str(builtin_dir)))
    monitor_tracker = ours(log_dir, "comet")
    trackers = [monitor_tracker, builtin] if ours_first else [builtin, monitor_tracker]
    accelerator = Accelerator(log_with=trackers)
    accelerator.init_trackers("test_project", CONFIG)
    accelerator.log(VALUES, step=0)
    accelerator.end_training()
    return monitor_tracker, comet_messages(builtin_dir)


def test_comet_config_and_log_as_comet_ml_tracker(tmp_path, log_dir, work_dir):
    """``CometMLTest.test_init_trackers`` and ``test_log`` with both trackers in one run (one
    process: the suite's thread dispatch):
    the same parameters and metrics at the same steps; the string (``log_other`` there) is a
    text sample here, and Comet's ``curr_step`` parameter is not logged (documented)."""
    monitor_tracker, theirs = comet_beside_ours(tmp_path, log_dir, ours_first=False)
    params = {p["param"]["paramName"]: p["param"]["paramValue"] for p in theirs
              if "param" in p and p["param"].get("source") == "manual"}  # not the command line
    metrics = sorted((p["metric"]["metricName"], p["metric"]["step"],
                      float(p["metric"]["metricValue"])) for p in theirs if "metric" in p
                     and not p["metric"]["metricName"].startswith("sys.")
                     and p["metric"]["metricName"] != "process duration")
    others = {p["key"]: p["value"] for p in theirs if "key" in p and "value" in p}
    assert params == {**CONFIG, "curr_step": 0}
    assert metrics == NUMBERS
    assert others["my_text"] == "some_value"

    import readback

    import comet_monitor

    assert plugin_config("comet", monitor_tracker) == CONFIG  # no curr_step
    assert plugin_rows("comet", monitor_tracker) == NUMBERS
    run = monitor_tracker.monitor.run
    assert readback.texts("comet", run) == [("my_text", 0, "some_value")]
    assert "my_text" not in comet_monitor.read_others(run)


def test_comet_started_before_comet_ml_tracker_in_one_process(tmp_path, log_dir, work_dir):
    """Ours started first, then ``CometMLTracker``'s, in one process (the suite's thread
    dispatch; the test above starts them the other way round): each archive holds its metrics.
    comet_ml ends the process's current experiment whenever a new one starts; the plugin's
    experiment leaves the current one alone and never becomes it
    (``comet_monitor._compat.beside_current_experiment``)."""
    monitor_tracker, theirs = comet_beside_ours(tmp_path, log_dir, ours_first=True)
    assert sorted((p["metric"]["metricName"], p["metric"]["step"],
                   float(p["metric"]["metricValue"])) for p in theirs if "metric" in p
                  and p["metric"]["metricName"] in VALUES) == NUMBERS
    assert plugin_rows("comet", monitor_tracker) == NUMBERS
    assert plugin_config("comet", monitor_tracker) == CONFIG


# --- ClearML --------------------------------------------------------------------------------

def clearml_session(task_id: str) -> Path:
    from clearml.config import get_offline_dir

    return Path(get_offline_dir(task_id=task_id))


def clearml_metrics(session: Path) -> list[dict[str, Any]]:
    """``ClearMLTest._get_metrics``: every event of the session's ``metrics.jsonl``."""
    events: list[dict[str, Any]] = []
    for line in (session / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        events.extend(json.loads(line))
    return events


#: ``Task.init`` arguments for the built-in tracker: no repository detection (its thread reads
#: the Git checkout around the test, e.g. this one with ``.nox/``, and ``close()`` waits for it:
#: minutes) and no machine monitoring (its ``:monitor:machine`` scalars). What the tracker
#: stores of the calls is unchanged.
QUIET_TASK = {"auto_connect_frameworks": {"detect_repository": False},
              "auto_resource_monitoring": False}


def run_clearml_builtin(tmp_path: Path, monkeypatch, calls) -> Path:
    """The built-in tracker alone (ClearML's offline mode, its cache under ``tmp_path``):
    its offline session folder. ``calls(accelerator)`` makes the ``init_trackers``/``log``
    calls."""
    from clearml import Task

    monkeypatch.setenv("CLEARML_CACHE_DIR", str(tmp_path / "clearml-builtin"))
    Task.set_offline(True)
    accelerator = Accelerator(log_with=ClearMLTracker(**QUIET_TASK))
    calls(accelerator)
    session = clearml_session(accelerator.get_tracker("clearml", unwrap=True).id)
    accelerator.end_training()
    monkeypatch.delenv("CLEARML_CACHE_DIR")
    return session


def run_ours(log_dir: Path, backend: str, calls) -> MonitorTracker:
    monitor_tracker = ours(log_dir, backend)
    accelerator = Accelerator(log_with=monitor_tracker)
    calls(accelerator)
    accelerator.end_training()
    return monitor_tracker


# ClearML allows one task per process and the suite runs ours in this process (thread
# dispatch; beside a task, writer processes are the clearml plugin's tests' concern): the two
# trackers run one after the other on the same calls.
def test_clearml_config_as_clearml_tracker(tmp_path, log_dir, work_dir, monkeypatch,
                                          clearml_task_here):
    """``ClearMLTest.test_init_trackers``: the same config; the built-in tracker's is the
    configuration object ``General`` (``connect_configuration``), ours the hyperparameter
    section ``General`` with each value's type (documented)."""
    from clearml.utilities.config import text_to_config_dict

    def calls(accelerator):
        accelerator.init_trackers("test_project_with_config", CONFIG)

    session = run_clearml_builtin(tmp_path, monkeypatch, calls)
    task = json.loads((session / "task.json").read_text(encoding="utf-8"))
    assert text_to_config_dict(task["configuration"]["General"]["value"]) == CONFIG
    assert not task.get("hyperparams", {}).get("General")

    monitor_tracker = run_ours(log_dir, "clearml", calls)
    assert plugin_config("clearml", monitor_tracker) == CONFIG
    import clearml_monitor

    ours_task = json.loads((clearml_monitor.find_session(monitor_tracker.monitor.run)
                            / "task.json").read_text(encoding="utf-8"))
    assert "General" not in (ours_task.get("configuration") or {})


def test_clearml_log_as_clearml_tracker(tmp_path, log_dir, work_dir, monkeypatch,
                                       clearml_task_here):
    """``ClearMLTest.test_log``: values with a step are scalars at that iteration in both;
    the built-in tracker titles them by the ``eval_``/``test_``/``train_`` prefix (series
    ``eval``/``test``/``train``) and stores values logged without a step as single values
    (``Summary``), where ours keeps the tag whole as the series and stores them at the next
    step (documented)."""
    with_iteration = {"should_be_under_train": 1, "eval_value": 2, "test_value": 3.1,
                      "train_value": 4.1}
    single_values = {"single_value_1": 1.1, "single_value_2": 2.2}

    def calls(accelerator):
        accelerator.init_trackers("test_project_with_log")
        accelerator.log(with_iteration, step=1)
        accelerator.log(single_values)

    session = run_clearml_builtin(tmp_path, monkeypatch, calls)
    theirs = clearml_metrics(session)
    assert sorted((e["metric"], e["variant"], e["iter"], e["value"]) for e in theirs
                  if e["metric"] != "Summary") == sorted([
                      ("should_be_under_train", "train", 1, 1), ("value", "eval", 1, 2),
                      ("value", "test", 1, 3.1), ("value", "train", 1, 4.1)])
    assert {e["variant"]: e["value"] for e in theirs if e["metric"] == "Summary"} == (
        single_values)

    monitor_tracker = run_ours(log_dir, "clearml", calls)
    assert plugin_rows("clearml", monitor_tracker) == sorted(
        [(tag, 1, float(v)) for tag, v in with_iteration.items()]
        + [(tag, 2, v) for tag, v in single_values.items()])
    import clearml_monitor

    ours_events = clearml_metrics(clearml_monitor.find_session(monitor_tracker.monitor.run))
    assert {(e["metric"], e["variant"]) for e in ours_events} == {
        (tag, tag) for tag in [*with_iteration, *single_values]}


# --- DVCLive --------------------------------------------------------------------------------

def test_dvclive_config_and_steps_as_dvclive_tracker(tmp_path, log_dir, dvc_work_dir):
    """``DVCLiveTrackingTest.test_init_trackers`` and ``test_log`` with both trackers in one
    run: the same ``params.yaml``; ``log()`` twice without a step then at step 3 stores steps
    0, 1, 3 in both. A string is a metric of DVCLive's own (its TSV holds the text), where the
    plugin stores numbers only and skips it with one warning (documented)."""
    from dvclive.plots.metric import Metric
    from dvclive.serialize import load_yaml
    from dvclive.utils import parse_metrics

    builtin = DVCLiveTracker(dir=str(tmp_path / "dvclive-builtin"), save_dvc_exp=False,
                             dvcyaml=None)
    monitor_tracker = ours(log_dir, "dvclive")
    accelerator = Accelerator(log_with=[builtin, monitor_tracker])
    accelerator.init_trackers("test_project", CONFIG)
    with pytest.warns(BackendWarning, match="dvclive.*does not store text"):
        accelerator.log(VALUES)
    accelerator.log(VALUES)
    accelerator.log(VALUES, step=3)
    accelerator.end_training()

    live = builtin.live
    assert load_yaml(live.params_file) == CONFIG
    logs, latest = parse_metrics(live)
    assert latest.pop("step") == 3
    assert latest == VALUES
    scalars = Path(live.plots_dir) / Metric.subfolder
    for key in VALUES:
        assert [int(row["step"]) for row in logs[str(scalars / f"{key}.tsv")]] == [0, 1, 3]

    assert plugin_config("dvclive", monitor_tracker) == CONFIG
    numbers = {k: float(v) for k, v in VALUES.items() if not isinstance(v, str)}
    assert plugin_rows("dvclive", monitor_tracker) == sorted(
        (tag, step, value) for tag, value in numbers.items() for step in (0, 1, 3))


# --- SwanLab --------------------------------------------------------------------------------

def swanlab_scalars(run_dir: Path) -> list[tuple[str, int, float]]:
    """The scalars of a SwanLab run folder, read with SwanLab's own record reader."""
    from swanlab_monitor import _compat

    (file,) = run_dir.glob("run-*.swanlab")
    return sorted((r.scalar.key, int(r.scalar.step), float(r.scalar.value.number))
                  for r in _compat.read_records(file) if r.HasField("scalar"))


# SwanLab keeps one current run per process: each tracker in a process of its own.
@pytest.mark.process
def test_swanlab_config_and_log_as_swanlab_tracker(tmp_path, log_dir, work_dir):
    """``SwanLabTrackingTest.test_swanlab``'s config and scalar checks with both trackers in
    one run: the same config (the built-in tracker adds ``FRAMEWORK: 🤗Accelerate`` and
    ``allow_val_change: True``) and the
    same scalars at the same steps; a string, which SwanLab refuses as a scalar (an error line,
    value dropped), is a text sample here (documented)."""
    import yaml

    builtin = SwanLabTracker("test_project", logdir=str(tmp_path / "swanlab-builtin"),
                             mode="offline")
    monitor_tracker = ours(log_dir, "swanlab")
    accelerator = Accelerator(log_with=[builtin, monitor_tracker])
    accelerator.init_trackers("test_project", CONFIG)
    accelerator.log(VALUES, step=0)
    accelerator.end_training()

    (run_dir,) = (tmp_path / "swanlab-builtin").glob("run-*")
    stored = yaml.safe_load((run_dir / "files" / "config.yaml").read_text(encoding="utf-8"))
    # accelerate calls swanlab.config.update(values, allow_val_change=True), a keyword
    # SwanLab's config does not take: it is stored as one more key
    assert {k: v["value"] for k, v in stored.items()} == {
        **CONFIG, "FRAMEWORK": "🤗Accelerate", "allow_val_change": True}
    assert swanlab_scalars(run_dir) == NUMBERS

    import readback

    assert plugin_config("swanlab", monitor_tracker) == CONFIG
    assert plugin_rows("swanlab", monitor_tracker) == NUMBERS
    assert readback.texts("swanlab", monitor_tracker.monitor.run) == [
        ("my_text", 0, "some_value")]


# --- Aim ------------------------------------------------------------------------------------

def test_aim_config_and_log_as_aim_tracker(tmp_path, log_dir, work_dir):
    """The Aim tracker (accelerate tests only its deferred start) beside ours in one run:
    the same ``hparams`` and the same scalars at the same steps. ``AimTracker`` raises on a
    string (Aim's ``track`` takes numbers and Aim objects), so numbers only; logged without a
    step, Aim counts each metric's own steps where ours takes the run's next step
    (documented)."""
    from aim import Repo

    from aim_monitor import _compat

    repo = tmp_path / "aim-builtin"
    builtin = AimTracker("builtin", logging_dir=str(repo))
    monitor_tracker = ours(log_dir, "aim")
    accelerator = Accelerator(log_with=[builtin, monitor_tracker])
    accelerator.init_trackers("test_project", CONFIG)
    numbers = {k: v for k, v in VALUES.items() if not isinstance(v, str)}
    accelerator.log(numbers, step=0)
    accelerator.log({"total_loss": 0.2}, step=3)
    accelerator.log({"single": 1.1})
    run_hash = builtin.writer.hash
    accelerator.end_training()

    _compat.index_runs(str(repo), [run_hash])
    opened = Repo(str(repo))
    try:
        aim_run = opened.get_run(run_hash)
        assert aim_run["hparams"] == CONFIG
        theirs = []
        for metric in aim_run.metrics():
            steps, (values, _, _) = metric.data.items_list()
            if not metric.name.startswith("__system__"):  # Aim's own resource tracking
                theirs += [(metric.name, int(s), float(v))
                           for s, v in zip(steps, values, strict=True)]
        theirs.sort()
    finally:
        opened.close()
    expected = [*NUMBERS, ("total_loss", 3, 0.2)]
    assert theirs == sorted([*expected, ("single", 0, 1.1)])
    assert plugin_config("aim", monitor_tracker) == CONFIG
    assert plugin_rows("aim", monitor_tracker) == sorted([*expected, ("single", 4, 1.1)])


# --- TrackerDeferredInitializationTest ------------------------------------------------------

@pytest.mark.parametrize("backend", ["comet", "clearml", "dvclive", "swanlab", "aim"])
def test_deferred_init(log_dir, backend):
    """``TrackerDeferredInitializationTest.test_<tracker>_deferred_init``: making the tracker
    does not initialise ``PartialState`` (nor start the SDK); the ``Accelerator`` does."""
    PartialState._reset_state()
    monitor_tracker = ours(log_dir, backend)
    assert PartialState._shared_state == {}
    _ = Accelerator(log_with=monitor_tracker)
    assert PartialState._shared_state != {}
    assert monitor_tracker.monitor is None
