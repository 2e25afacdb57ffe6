"""The ``dvclive`` backend: the contract kit, and its files against DVCLive's own for the same
calls."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from core_monitor import Monitor
from core_monitor.testing import MonitorContract
from dvclive_monitor import DvcliveMonitor, read_config, read_rows, run_dir
from dvclive_monitor.reader import read_crash
from dvclive_monitor.storage import status_of


class TestDvcliveContract(MonitorContract):
    """Every check of the kit."""

    backend_class = DvcliveMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_crash = staticmethod(read_crash)


def test_the_entry_points_name_the_backend_and_its_reader():
    (backend,) = entry_points(group="experiment_monitors", name="dvclive")
    assert backend.load() is DvcliveMonitor
    (reader,) = entry_points(group="experiment_monitor_readers", name="dvclive")
    assert reader.value == "dvclive_monitor.reader"


#: (metrics, step) per call: a lower step, a repeated one, NaN and infinities.
CALLS = [({"train/loss": 0.5, "lr": 0.001}, 0), ({"train/loss": 0.25}, 5),
         ({"train/loss": float("nan"), "lr": float("inf")}, 3), ({"train/loss": 0.125}, 3),
         ({"lr": float("-inf")}, 7)]
CONFIG = {"lr": 0.001, "optimizer.name": "adam", "epochs": 3}
LATE = {"batch_size": 32, "lr": 0.002}


def test_files_are_dvclives_own_for_the_same_calls(tmp_path, monkeypatch):
    """DVCLive's API called directly with the same values (``Live.step`` set to each call's
    step, ``log_metric``, ``log_params``) writes byte-identical TSV files and ``params.yaml``
    and the same ``metrics.json``; the ``step`` column holds the caller's steps."""
    from dvc.repo import Repo
    from dvclive import Live

    # Live() looks for the DVC repository around the current folder and, in a Git repository
    # without one (this checkout), runs `dvc init` there: give it a repository of its own.
    Repo.init(str(tmp_path), no_scm=True)
    monkeypatch.chdir(tmp_path)
    theirs = tmp_path / "theirs"
    with Live(dir=str(theirs), save_dvc_exp=False, dvcyaml=None) as live:
        live.log_params(CONFIG)
        for metrics, step in CALLS:
            live.step = step
            for tag, value in metrics.items():
                live.log_metric(tag, value)
        live.log_params(LATE)
    with Monitor(["dvclive"], project="p", name="ours", config=CONFIG,
                 log_dir=tmp_path / "runs") as monitor:
        for metrics, step in CALLS:
            monitor.log(metrics, step=step)
        monitor.log_config(LATE)
    ours = run_dir(monitor.run)

    tsv = sorted(p.relative_to(theirs) for p in theirs.rglob("*.tsv"))
    assert [p.as_posix() for p in tsv] == ["plots/metrics/lr.tsv", "plots/metrics/train/loss.tsv"]
    for name in [*tsv, Path("params.yaml")]:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    assert (theirs / "plots/metrics/train/loss.tsv").read_text().splitlines() == [
        "step\tloss", "0\t0.5", "5\t0.25", "3\tnan", "3\t0.125"]
    summary = json.loads((theirs / "metrics.json").read_text())
    assert json.loads((ours / "metrics.json").read_text()) == summary
    assert summary["step"] == 7

    rows = read_rows(monitor.run)
    want = [(tag, step, value) for metrics, step in CALLS for tag, value in metrics.items()]
    assert sorted(map(repr, rows)) == sorted(map(repr, want))  # repr: nan equals nan
    assert read_config(monitor.run) == {**CONFIG, **LATE}
    assert status_of(run_dir(monitor.run)).read() == "finished"


def test_nothing_is_written_outside_the_run_folder_in_a_git_repository(tmp_path, monkeypatch):
    """``dvclive.Live()`` runs ``dvc init`` in the Git repository around the current folder;
    the backend's ``Live`` does not (``_compat.local_live``)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo)
    with Monitor(["dvclive"], project="p", name="r", log_dir=repo / "runs") as monitor:
        monitor.log({"loss": 1.0}, step=2)
    assert sorted(p.name for p in repo.iterdir()) == [".git", "runs"]
    assert read_rows(monitor.run) == [("loss", 2, 1.0)]


def test_tags_that_are_no_file_name_of_their_own_are_read_back(tmp_path):
    tags = ["a//b", "x/step", "step", "%p", "../up", "ünï/cødé"]
    with Monitor(["dvclive"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({tag: float(i) for i, tag in enumerate(tags)}, step=4)
    assert sorted(read_rows(monitor.run)) == sorted((t, 4, float(i)) for i, t in enumerate(tags))
    folder = run_dir(monitor.run)
    assert all(p.is_relative_to(folder / "plots" / "metrics") for p in folder.rglob("*.tsv"))


def test_a_tag_under_another_keeps_its_rows_and_is_reported_once(tmp_path):
    """DVCLive's summary nests at ``/``: ``a`` then ``a/b`` fails in DVCLive after the row is
    written; the backend keeps going and says so once."""
    with Monitor(["dvclive"], project="p", name="r", log_dir=tmp_path, strict=True) as monitor:
        monitor.log({"a": 1.0}, step=0)
        with pytest.warns(RuntimeWarning, match="'a/b' is stored in its TSV file"):
            monitor.log({"a/b": 2.0}, step=1)
            monitor.flush()
        monitor.log({"a/b": 3.0}, step=2)
    assert sorted(read_rows(monitor.run)) == [("a", 0, 1.0), ("a/b", 1, 2.0), ("a/b", 2, 3.0)]


def test_a_second_run_of_the_same_name_replaces_the_first_as_live_does(tmp_path):
    """``dvclive.Live()`` in a folder holding a run deletes its metrics and params: the same,
    after a warning naming the folder and resume='allow' (the rule for every backend)."""
    with Monitor(["dvclive"], project="p", name="r", log_dir=tmp_path,
                 config={"a": 1}) as first:
        first.log({"loss": 1.0, "old": 2.0}, step=1)
    with pytest.warns(UserWarning, match=r"already in .*resume='allow'"):
        second = Monitor(["dvclive"], project="p", name="r", log_dir=tmp_path, strict=True,
                         dispatch="sync", config={"b": 2})
    with second:
        second.log({"loss": 0.5}, step=0)
    assert read_rows(second.run) == [("loss", 0, 0.5)]
    assert read_config(second.run) == {"b": 2}
