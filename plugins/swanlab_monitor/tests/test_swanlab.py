"""The ``swanlab`` backend: the contract kit (held to its declared one value per tag and step
and largest step), and its run against one written by SwanLab's own API with the same calls."""

from __future__ import annotations

import math
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from ranks import one_process, two_ranks

from core_monitor import Monitor, RunInfo
from core_monitor.testing import MonitorContract
from swanlab_monitor import (
    SwanlabMonitor,
    find_run_dir,
    read_config,
    read_finish,
    read_media,
    read_rows,
)
from swanlab_monitor.reader import read_crash, read_group
from swanlab_monitor.steps import StepSet
from swanlab_monitor.storage import key_of, tag_of


class TestSwanlabContract(MonitorContract):
    """Every check of the kit. SwanLab keeps the first value of a tag at a step, and no step of
    2**48 or above: the backend declares it (``repeated_steps="first"``, ``max_step``), and the
    kit checks that such a point is reported once per tag, never dropped silently."""

    backend_class = SwanlabMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_media = staticmethod(read_media)
    read_crash = staticmethod(read_crash)


def test_the_entry_points_name_the_backend_and_its_reader():
    (backend,) = entry_points(group="experiment_monitors", name="swanlab")
    assert backend.load() is SwanlabMonitor
    (reader,) = entry_points(group="experiment_monitor_readers", name="swanlab")
    assert reader.value == "swanlab_monitor.reader"


#: (metrics, step) per call: a lower step, a repeated one (SwanLab keeps the first), NaN, inf.
CALLS = [({"train/loss": 0.5, "lr": 0.001}, 0), ({"train/loss": 0.25}, 5),
         ({"train/loss": float("nan"), "lr": float("inf")}, 3), ({"lr": 1 / 3}, 7),
         ({"lr": 0.125}, 7)]
CONFIG = {"lr": 0.001, "optimizer.name": "adam", "epochs": 3}
LATE = {"batch_size": 32, "lr": 0.002}


def test_the_run_is_swanlabs_own_for_the_same_calls(tmp_path):
    """SwanLab's API called directly with the same values (``Run.log(row, step=step)``,
    ``Run.config.update``) and ours: the same records (key, step, value) and config, read
    back from each run's record file with SwanLab's own reader; the steps are the caller's."""
    import swanlab

    theirs = RunInfo(project="p", name="theirs", log_dir=tmp_path / "theirs")
    direct = swanlab.init(project="p", name="theirs", config=CONFIG, mode="offline",
                          log_dir=str(tmp_path / "theirs" / "swanlog"),
                          settings=swanlab.Settings(interactive=False))
    for metrics, step in CALLS:
        direct.log(metrics, step=step)
    direct.config.update(LATE)
    direct.finish()

    with Monitor(["swanlab"], project="p", name="ours", config=CONFIG, log_dir=tmp_path / "ours",
                 swanlab={"tags": ["baseline"]}) as monitor:
        for metrics, step in CALLS[:-1]:
            monitor.log(metrics, step=step)
        with pytest.warns(RuntimeWarning, match="tag 'lr' is not stored"):
            monitor.log(CALLS[-1][0], step=CALLS[-1][1])
            monitor.log_config(LATE)
            monitor.close()

    ours = read_rows(monitor.run)
    assert repr(ours) == repr(read_rows(theirs))  # repr: nan equals nan
    assert repr(ours) == repr([("train/loss", 0, 0.5), ("lr", 0, 0.001), ("train/loss", 5, 0.25),
                               ("train/loss", 3, math.nan), ("lr", 3, math.inf),
                               ("lr", 7, 1 / 3)])
    assert read_config(monitor.run) == read_config(theirs) == {**CONFIG, **LATE}
    assert read_finish(monitor.run) == read_finish(theirs) == ("RUN_STATE_FINISHED", "")
    assert find_run_dir(monitor.run).parent == tmp_path / "ours" / "swanlog"
    assert not swanlab.has_run()


def test_the_run_never_becomes_the_users_current_run(tmp_path):
    """A run the user started stays ``swanlab.get_run()`` across the backend's start and
    finish, and theirs and ours each hold only their own points."""
    import swanlab

    users = swanlab.init(project="p", name="users", mode="offline",
                         log_dir=str(tmp_path / "users" / "swanlog"),
                         settings=swanlab.Settings(interactive=False))
    try:
        with Monitor(["swanlab"], project="p", name="ours", log_dir=tmp_path / "ours") as ours:
            assert swanlab.get_run() is users
            ours.log({"loss": 1.0}, step=1)
            swanlab.log({"loss": 2.0}, step=1)
        assert swanlab.get_run() is users
    finally:
        users.finish()
    assert read_rows(ours.run) == [("loss", 1, 1.0)]
    assert read_rows(RunInfo(project="p", name="users", log_dir=tmp_path / "users")) == [
        ("loss", 1, 2.0)]


def test_nothing_is_written_outside_log_dir(tmp_path, monkeypatch, isolated_env):
    """Offline, with ``log_dir`` given: the current folder and SwanLab's own folder
    (``SWANLAB_ROOT``, ``~/.swanlab`` by default) stay empty."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with Monitor(["swanlab"], project="p", name="r", log_dir=tmp_path / "runs") as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert list(cwd.iterdir()) == []
    assert list(Path(isolated_env["SWANLAB_ROOT"]).iterdir()) == []
    assert read_rows(monitor.run) == [("loss", 0, 1.0)]


def test_tags_swanlab_would_change_are_read_back(tmp_path):
    tags = ["/lead", "trail/", ".dot", "end.", " space", "%p", "tab\there", "x" * 300]
    with Monitor(["swanlab"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({tag: float(i) for i, tag in enumerate(tags)}, step=2)
    assert sorted(read_rows(monitor.run)) == sorted((t, 2, float(i)) for i, t in enumerate(tags))
    assert all(tag_of(key_of(tag)) == tag for tag in [*tags, "plain/tag", "ünï"])


def test_a_crash_finishes_the_run_crashed_with_the_reason(tmp_path):
    backend = SwanlabMonitor(RunInfo(project="p", name="r", log_dir=tmp_path), quiet=True)
    backend.monitor_write([])
    backend.monitor_crash("the training process (pid 1) ended without closing the monitor")
    backend.monitor_close()
    assert read_finish(RunInfo(project="p", name="r", log_dir=tmp_path)) == (
        "RUN_STATE_CRASHED", "the training process (pid 1) ended without closing the monitor")


def test_every_ranks_run_is_in_the_jobs_group(tmp_path, monkeypatch):
    """``rank_zero_only=False``, two ranks: each rank's run (``ddp``, ``ddp-rank1``) is in the
    SwanLab group ``ddp`` (``RunInfo.group``), read back from each run's start record. A group
    of the user's wins: the ``group`` option, or SwanLab's own ``SWANLAB_GROUP``; a job of one
    process has none."""
    runs = two_ranks("swanlab", tmp_path, monkeypatch)
    assert [run.ranked_name for run in runs] == ["ddp", "ddp-rank1"]
    assert [read_group(run) for run in runs] == ["ddp", "ddp"]
    assert [read_rows(run) for run in runs] == [[("loss", 0, 0.0)], [("loss", 0, 1.0)]]

    with Monitor(["swanlab"], project="p", name="own", log_dir=tmp_path, rank_zero_only=False,
                 swanlab={"group": "sweep-1"}) as own:
        pass
    monkeypatch.setenv("SWANLAB_GROUP", "from-env")
    with Monitor(["swanlab"], project="p", name="env", log_dir=tmp_path,
                 rank_zero_only=False) as env:
        pass
    monkeypatch.delenv("SWANLAB_GROUP")
    alone = one_process("swanlab", tmp_path, monkeypatch)
    assert (own.run.group, env.run.group, alone.group) == ("own", "env", None)
    assert (read_group(own.run), read_group(env.run), read_group(alone)) == (
        "sweep-1", "from-env", None)


def test_step_set_keeps_ranges_and_refuses_a_step_it_holds():
    steps = StepSet()
    assert [steps.add(s) for s in (0, 1, 2, 5, 3, 4, 2, 9)] == [True] * 6 + [False, True]
    assert len(steps) == 2  # [0, 5] and [9, 9]


@pytest.fixture
def without_dashboard():
    import importlib.util

    if importlib.util.find_spec("swanboard") is not None:
        pytest.skip("swanlab[dashboard] is installed: local mode works here")


def test_local_mode_without_the_dashboard_is_refused_at_monitor(tmp_path, without_dashboard):
    """SwanLab itself starts such a run and fails only when it finishes (at close)."""
    from core_monitor import ConfigError

    with pytest.raises(ConfigError, match=r"mode='local' needs SwanLab's dashboard package.*"
                                          r"pip install \"swanlab\[dashboard\]\""):
        Monitor(["swanlab"], project="p", name="r", log_dir=tmp_path, swanlab={"mode": "local"})
    assert not (tmp_path / "swanlog").exists()


def test_monitors_list_check_names_the_dashboard_under_swanlab_mode_local(tmp_path,
                                                                          without_dashboard):
    import os
    import subprocess
    import sys

    monitors = Path(sys.executable).parent / "monitors"
    done = subprocess.run([str(monitors), "list", "--check"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "SWANLAB_MODE": "local",
                                             "EXPERIMENT_MONITORS_DISABLE": "aim,clearml,comet,"
                                             "dvclive,mlflow,trackio,tensorboard,wandb"},
                          timeout=300)
    row = next(line for line in done.stdout.splitlines() if line.startswith("swanlab"))
    assert 'SWANLAB_MODE=local needs SwanLab\'s dashboard package' in row
    assert 'pip install "swanlab[dashboard]"' in row


def test_a_record_file_with_no_header_yet_reads_as_no_records(tmp_path):
    """SwanLab's writer creates ``run-<id>.swanlab`` before it writes the header: reading a
    run being started found a 0-byte file and SwanLab's reader failed an ``assert``."""
    from swanlab_monitor import _compat

    empty = tmp_path / "run-x.swanlab"
    empty.write_bytes(b"")
    assert list(_compat.read_records(empty)) == []
