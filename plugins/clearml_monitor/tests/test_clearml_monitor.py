"""The contract kit against the ``clearml`` backend, and what is ClearML's own: the same values
logged through ``Logger.report_scalar`` directly read back alike from the offline sessions'
files, one task per process, the crash mark."""

from __future__ import annotations

import json
import math
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import clearml_monitor
from clearml_monitor import ClearmlMonitor, read_config, read_rows
from core_monitor import ConfigError, Monitor, RunInfo
from core_monitor.testing import MonitorContract


class TestClearmlContract(MonitorContract):
    """Every check of the kit: steps, values, flush, close, config, media, runs kept apart, ranks.
    The kit's monitors run the backend on a worker thread, one task at a time."""

    backend_class = ClearmlMonitor
    read_rows = staticmethod(clearml_monitor.read_rows)
    read_config = staticmethod(clearml_monitor.read_config)
    read_media = staticmethod(clearml_monitor.read_media)


def test_the_entry_points_name_the_backend_and_its_reader() -> None:
    (found,) = entry_points(group="experiment_monitors", name="clearml")
    assert found.load() is ClearmlMonitor
    (reader,) = entry_points(group="experiment_monitor_readers", name="clearml")
    assert reader.load() is clearml_monitor.reader


def test_tags_as_one_string_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tags=.baseline. \(a str\) must be a list"):
        Monitor(["clearml"], project="p", log_dir=tmp_path, clearml={"tags": "baseline"})


def test_clearmls_own_api_and_ours_read_back_alike(tmp_path: Path) -> None:
    """The same steps, values, tags and hyperparameters through ``Task.init`` +
    ``Logger.report_scalar`` and through the backend: the two sessions' ``metrics.jsonl`` hold
    the same (title, series, iteration, value) and their ``task.json`` the same
    hyperparameters, which is what ClearML's UI shows once the sessions are imported."""
    from clearml import Logger, Task

    points = [(0, 0.5), (10, 0.25), (10, 1 / 3), (3, math.inf), (2**62, math.nan)]
    config = {"lr": 0.0003, "optimizer.name": "adam", "epochs": 3, "amp": True}
    with Monitor(["clearml"], project="p", name="ours", config=config, log_dir=tmp_path,
                 dispatch="thread", clearml={"tags": ["baseline"]}) as monitor:
        for step, value in points:
            monitor.log({"train/loss": value}, step=step)
    # theirs: ClearML's documented calls, in the session folder ClearML picks from the variable
    Logger.set_reporting_nan_value(math.nan)
    Logger.set_reporting_inf_value(math.inf)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLEARML_CACHE_DIR", str(tmp_path / "clearml"))
        for name in ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID"):
            env.setenv(name, "")  # Task.init sets both: back to unset after, or a later
            env.delenv(name)  # process of this test session is taken for this task's child
        task = Task.init(project_name="p", task_name="theirs", tags=["baseline"],
                         auto_connect_frameworks=False, auto_connect_arg_parser=False,
                         auto_resource_monitoring=False, auto_connect_streams=False,
                         reuse_last_task_id=False)
        task.connect(dict(config), name="General")
        for step, value in points:
            task.get_logger().report_scalar("train", "train/loss", value=value, iteration=step)
        task.close()

    def stored(name: str) -> tuple[list[str], dict, list]:
        session = clearml_monitor.find_session(RunInfo(project="p", name=name, log_dir=tmp_path))
        meta = json.loads((session / "task.json").read_text())
        events = [json.loads(line) for line in (session / "metrics.jsonl").open()]
        return (meta["tags"], meta["hyperparams"],
                [(e["metric"], e["variant"], e["iter"], repr(e["value"]))
                 for batch in events for e in batch])

    assert stored("ours") == stored("theirs")
    assert [step for _, _, step, _ in stored("ours")[2]] == [0, 10, 10, 3, 2**62]
    theirs = RunInfo(project="p", name="theirs", log_dir=tmp_path)
    assert repr(read_rows(theirs)) == repr(read_rows(monitor.run))
    assert read_config(theirs) == read_config(monitor.run) == config


def test_a_second_task_open_in_one_process_is_refused_naming_the_fix(tmp_path: Path) -> None:
    with Monitor(["clearml"], project="p", name="first", log_dir=tmp_path,
                 dispatch="thread") as first:
        first.log({"loss": 1.0}, step=1)
        with pytest.raises(ConfigError, match=r"dispatch='process'"):
            ClearmlMonitor(RunInfo(project="p", name="second", log_dir=tmp_path))
    assert read_rows(first.run) == [("loss", 1, 1.0)]


def test_crash_marks_the_task(tmp_path: Path) -> None:
    from clearml.utilities.check_updates import CheckPackageUpdates

    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    backend = ClearmlMonitor(run)
    # Task.init's request to updates.clear.ml is marked as made, so it is never made
    assert CheckPackageUpdates._package_version_checked is True
    backend.monitor_crash("the training process (pid 1) ended without closing the monitor")
    backend.monitor_close()
    assert clearml_monitor.read_crash(run).startswith("the training process (pid 1)")
    # a process started now (a later Monitor's writer) is not taken for a child of this task
    assert "CLEARML_PROC_MASTER_ID" not in os.environ
    assert "TRAINS_PROC_MASTER_ID" not in os.environ
    task = json.loads((clearml_monitor.find_session(run) / "task.json").read_text())
    assert clearml_monitor.CRASH_TAG in task["tags"]


def test_the_clearml_internals_used_are_there() -> None:
    """``monitors list --check`` and the core run this check; the installed ClearML passes."""
    from core_monitor import Capabilities

    assert clearml_monitor._compat.problems() == []
    assert Capabilities.of(ClearmlMonitor).sdk == "clearml"


def test_a_task_json_being_rewritten_or_a_batch_being_appended_is_not_read_half(
    tmp_path: Path,
) -> None:
    """ClearML rewrites ``task.json`` in place (truncate, then write) whenever an open task
    changes, from its own threads too, and appends ``metrics.jsonl`` a batch at a time: the
    reader reads a ``task.json`` that is not JSON again (and passes over one that stays so),
    and leaves out a last line that has no newline yet."""
    with Monitor(["clearml"], project="p", name="r", log_dir=tmp_path, config={"lr": 0.5},
                 dispatch="thread") as monitor:
        monitor.log({"loss": 1.0}, step=1)
    other = tmp_path / "clearml" / "offline" / "other"
    other.mkdir()
    (other / "task.json").write_text("")  # another session's, caught mid-rewrite for good
    session = clearml_monitor.find_session(monitor.run)
    with (session / "metrics.jsonl").open("a") as file:
        file.write('[{"type": "training_stats_scalar", "iter": 2, "variant": "lo')
    assert read_rows(monitor.run) == [("loss", 1, 1.0)]
    assert read_config(monitor.run) == {"lr": 0.5}
    with pytest.raises(LookupError, match=r"1 task.json not JSON, e.g. .*other"):
        read_rows(RunInfo(project="p", name="nope", log_dir=tmp_path))
