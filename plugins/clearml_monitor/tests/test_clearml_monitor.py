"""The contract kit against the ``clearml`` backend, and what is ClearML's own: the same values
logged through ``Logger.report_scalar`` directly read back alike from the offline sessions'
files, one task per process, the crash mark."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import zipfile
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from ranks import one_process, two_ranks

import clearml_monitor
from clearml_monitor import ClearmlMonitor, read_config, read_rows
from clearml_monitor.reader import read_crash
from core_monitor import ConfigError, Histogram, Image, Monitor, RunInfo, Text
from core_monitor.testing import MonitorContract


class TestClearmlContract(MonitorContract):
    """Every check of the kit: steps, values, flush, close, config, media, runs kept apart, ranks.
    The kit's monitors run the backend on a worker thread, one task at a time."""

    backend_class = ClearmlMonitor
    read_rows = staticmethod(clearml_monitor.read_rows)
    read_config = staticmethod(clearml_monitor.read_config)
    read_media = staticmethod(clearml_monitor.read_media)
    read_crash = staticmethod(read_crash)


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
        with pytest.raises(ConfigError, match=r"'first'.*dispatch='thread' or 'sync'.*"
                                              r"dispatch='process'\) \(the default\)"):
            ClearmlMonitor(RunInfo(project="p", name="second", log_dir=tmp_path))
    assert read_rows(first.run) == [("loss", 1, 1.0)]


def test_beside_the_users_own_task_a_writer_process_writes_a_task_of_its_own(
    tmp_path: Path, clearml_env: None, request: pytest.FixtureRequest
) -> None:
    """The user's ``Task.init`` first (ClearML's first line; accelerate's and the Trainer's
    ClearML trackers do the same), then a monitor with the default dispatch: the writer
    inherits ``CLEARML_PROC_MASTER_ID`` and must not take the user's task for its own. Both
    tasks hold their own rows, each read back from its own offline session."""
    task = _theirs("theirs")
    task.get_logger().report_scalar("train", "train/theirs", value=0.5, iteration=3)
    request.addfinalizer(task.close)  # closed below; again (nothing) if the test fails first
    assert os.environ["CLEARML_PROC_MASTER_ID"].endswith(":" + task.id)
    with Monitor(["clearml"], project="p", name="ours", log_dir=tmp_path,
                 config={"lr": 0.1}, dispatch="process") as monitor:
        monitor.log({"train/ours": 2.0}, step=7)
        monitor.log({"train/ours": 3.0}, step=8)
    assert monitor.failures == {}
    task.get_logger().report_scalar("train", "train/theirs", value=0.25, iteration=4)
    task.close()
    assert read_rows(monitor.run) == [("train/ours", 7, 2.0), ("train/ours", 8, 3.0)]
    assert read_config(monitor.run) == {"lr": 0.1}
    theirs = RunInfo(project="p", name="theirs", log_dir=tmp_path)
    assert read_rows(theirs) == [("train/theirs", 3, 0.5), ("train/theirs", 4, 0.25)]
    ours_id = json.loads((clearml_monitor.find_session(monitor.run) / "task.json").read_text())
    assert ours_id["id"] != task.id


def test_a_writer_process_leaves_the_task_a_clearml_agent_runs(
    tmp_path: Path, clearml_env: None
) -> None:
    """Under ``clearml-agent`` the training process has ``CLEARML_TASK_ID`` (ClearML then takes
    every process for that remote task); the writer starts a task of its own."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLEARML_TASK_ID", "0123456789abcdef0123456789abcdef")
        env.setenv("CLEARML_PROC_MASTER_ID", "1:0123456789abcdef0123456789abcdef")
        with Monitor(["clearml"], project="p", name="ours", log_dir=tmp_path,
                     dispatch="process") as monitor:
            monitor.log({"loss": 2.0}, step=7)
    assert monitor.failures == {}
    assert read_rows(monitor.run) == [("loss", 7, 2.0)]


def test_a_training_process_started_by_a_process_that_closed_its_task_stores_its_rows(
    tmp_path: Path,
) -> None:
    """A process that ran ``Task.init`` and closed the task (a launcher, a test runner; here
    this test's process) leaves ``CLEARML_PROC_MASTER_ID=<its pid>:`` to the training script
    it starts. ClearML took that script for its subprocess and, with no task to join, made
    ``Task.init`` return a stub: with ``dispatch="thread"`` nothing was stored and nothing
    said (seen as a missing session in the every-backend DeepSpeed test, after an in-process
    ClearML test). The variables are back as they were after close."""
    from interpreter import run_python

    closed = f"{os.getpid()}:"
    done = run_python(f"""
        import json, os
        from core_monitor import Monitor
        with Monitor(["clearml"], project="p", name="child", log_dir={str(tmp_path)!r},
                     dispatch="thread") as monitor:
            monitor.log({{"loss": 2.0}}, step=7)
        print(json.dumps([dict(monitor.failures),
                          [os.environ.get(n) for n in ("CLEARML_PROC_MASTER_ID",
                                                       "TRAINS_PROC_MASTER_ID")]]))
        """, env={"CLEARML_PROC_MASTER_ID": closed, "TRAINS_PROC_MASTER_ID": closed})
    failures, after = json.loads(done.stdout.splitlines()[-1])
    assert failures == {}, done.stderr[-2000:]
    assert read_rows(RunInfo(project="p", name="child", log_dir=tmp_path)) == [("loss", 7, 2.0)]
    assert after == [closed, closed]


def test_the_task_layout_is_the_documented_one(tmp_path: Path) -> None:
    """The layout ``docs/frameworks/accelerate.md`` and ``transformers.md`` set against the
    built-in ClearML trackers': config as typed hyperparameters in the section ``General``;
    plot = the tag up to its last ``/``, series = the whole tag (``eval_loss`` is plot
    ``eval_loss``, not accelerate's plot ``loss`` series ``eval``); a value logged without a
    step is a scalar at the next step, never a ClearML single value."""
    with Monitor(["clearml"], project="p", name="layout", log_dir=tmp_path,
                 config={"lr": 0.1, "opt": {"name": "sgd"}}, dispatch="thread") as monitor:
        monitor.log({"eval_loss": 0.5, "eval/loss": 0.25}, step=3)
        monitor.log({"train_runtime": 12.0})  # no step: the next one, 4
    session = clearml_monitor.find_session(monitor.run)
    events = [e for line in (session / "metrics.jsonl").open() for e in json.loads(line)]
    assert sorted((e["type"], e["metric"], e["variant"], e["iter"]) for e in events) == [
        ("training_stats_scalar", "eval", "eval/loss", 3),
        ("training_stats_scalar", "eval_loss", "eval_loss", 3),
        ("training_stats_scalar", "train_runtime", "train_runtime", 4)]
    hyperparams = json.loads((session / "task.json").read_text())["hyperparams"]
    assert set(hyperparams) == {"General"}
    assert {k: (v["value"], v["type"]) for k, v in hyperparams["General"].items()} == {
        "lr": ("0.1", "float"), "opt.name": ("sgd", "str")}


def test_the_task_detects_no_repository_and_scans_no_requirements(tmp_path: Path) -> None:
    """ClearML's repository detection parses every Python file under the script's folder
    (minutes under a folder holding venvs, and ``Task.close`` waits for it); it is off."""
    with Monitor(["clearml"], project="p", name="r", log_dir=tmp_path,
                 dispatch="thread") as monitor:
        monitor.log({"loss": 1.0}, step=1)
    task = json.loads((clearml_monitor.find_session(monitor.run) / "task.json").read_text())
    script = task.get("script") or {}
    assert not script.get("branch") and not script.get("diff"), script
    requirements = script.get("requirements") or {}
    assert not any(requirements.values()), requirements


def test_every_ranks_task_has_the_jobs_group_tag(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``rank_zero_only=False``, two ranks: each rank's task (``ddp``, ``ddp-rank1``) has the tag
    ``job.group: ddp`` beside the user's tags, in its session's ``task.json`` (what ClearML's UI
    filters the project's tasks by once imported). A ``job.group:`` tag of the user's wins; a
    job of one process gets none."""
    runs = two_ranks("clearml", tmp_path, monkeypatch, clearml={"tags": ["baseline"]})
    with Monitor(["clearml"], project="p", name="own", log_dir=tmp_path, rank_zero_only=False,
                 clearml={"tags": ["job.group: sweep-1"]}) as own:
        pass
    alone = one_process("clearml", tmp_path, monkeypatch)

    def tags(run: RunInfo) -> list[str]:
        task = json.loads((clearml_monitor.find_session(run) / "task.json").read_text())
        return sorted(task.get("tags") or [])  # ClearML keeps a task's tags as a set

    assert [run.ranked_name for run in runs] == ["ddp", "ddp-rank1"]
    assert [tags(run) for run in runs] == [["baseline", "job.group: ddp"]] * 2
    assert (tags(own.run), tags(alone)) == (["job.group: sweep-1"], [])
    assert [clearml_monitor.reader.read_group(run) for run in [*runs, own.run, alone]] == [
        "ddp", "ddp", "sweep-1", None]
    assert [read_rows(run) for run in runs] == [[("loss", 0, 0.0)], [("loss", 0, 1.0)]]


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


def test_the_process_keeps_its_own_signal_handlers(tmp_path: Path) -> None:
    """``Task.init`` replaces the process's SIGTERM handler with ClearML's, which closes the task
    at once: a writer preempted with its job (SIGTERM to every process) could then neither write
    the rest of its pipe nor mark the crash. The handlers in place before are put back."""
    import signal

    def ours(signum: int, frame: Any) -> None:
        raise AssertionError("not called")

    before = signal.signal(signal.SIGTERM, ours)
    try:
        backend = ClearmlMonitor(RunInfo(project="p", name="r", log_dir=tmp_path))
        try:
            assert signal.getsignal(signal.SIGTERM) is ours
        finally:
            backend.monitor_close()
    finally:
        signal.signal(signal.SIGTERM, before)


FORKED_CHILDREN = """
import json, multiprocessing, os, sys, threading
from clearml_monitor import ClearmlMonitor
from core_monitor import RunInfo

def probe(_):
    return [sorted(thread.name for thread in threading.enumerate()), os._exit.__name__]

if __name__ == "__main__":
    backend = ClearmlMonitor(RunInfo(project="p", name="r", log_dir=sys.argv[1]))
    with multiprocessing.get_context("fork").Pool(2) as pool:
        seen = pool.map(probe, range(4))
    backend.monitor_close()
    print(json.dumps(seen))
"""


def test_a_process_forked_from_the_training_process_runs_none_of_clearmls_code(
        tmp_path: Path) -> None:
    """``Task.init``'s fork hooks make every forked child (a DataLoader or ``Pool`` worker) join
    the task: two ClearML threads, ``os._exit`` replaced, and a lock shared by the whole process
    tree, which a child killed by ``Pool.terminate()`` can leave held, so that ``Task.close()``
    in the training process then waits 90 s per attempt (``_compat``). With the backend in the
    training process (``dispatch="thread"`` or ``"sync"``), its forked children run none of
    it."""
    from interpreter import run_python

    done = run_python(FORKED_CHILDREN, tmp_path, cwd=tmp_path, timeout=240)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[["MainThread"], "_exit"]] * 4


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


def _theirs(name: str) -> Any:
    """A task opened with ClearML's documented ``Task.init`` in this process, in the session
    folder ClearML picks from ``CLEARML_CACHE_DIR``; the caller closes it inside the block."""
    from clearml import Task

    return Task.init(project_name="p", task_name=name, auto_connect_frameworks=False,
                     auto_connect_arg_parser=False, auto_resource_monitoring=False,
                     auto_connect_streams=False, reuse_last_task_id=False)


@pytest.fixture
def clearml_env(tmp_path: Path) -> Iterator[None]:
    """ClearML's cache folder under ``tmp_path`` for a task the test opens itself, and both
    names of the variable ``Task.init`` sets back to unset after (a later process of this test
    session would take itself for that task's child)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLEARML_CACHE_DIR", str(tmp_path / "clearml"))
        for name in ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID"):
            env.setenv(name, "")
            env.delenv(name)
        yield


def test_images_and_text_are_what_clearmls_own_report_calls_store(
    tmp_path: Path, clearml_env: None
) -> None:
    """The same PNG through ClearML's ``Logger.report_image(local_path=...)`` (its debug-image
    call for a file) and the same text through ``report_media`` read back alike from the two
    sessions: the same events (type, title, series, iteration) and the same files."""
    import numpy as np

    pixels = np.arange(6 * 5 * 3, dtype=np.uint8).reshape(6, 5, 3)
    with Monitor(["clearml"], project="p", name="ours", log_dir=tmp_path,
                 dispatch="thread") as monitor:
        monitor.log({"val/samples": Image(pixels), "notes": Text("é\n")}, step=7)
    png = next(clearml_monitor.find_session(monitor.run).rglob("*.png"))
    task = _theirs("theirs")
    logger = task.get_logger()
    logger.report_image("val", "val/samples", iteration=7, local_path=str(png))
    logger.report_media("notes", "notes", iteration=7, stream=io.BytesIO("é\n".encode()),
                        file_extension=".txt")
    task.close()

    def stored(name: str) -> list[tuple[Any, ...]]:
        session = clearml_monitor.find_session(RunInfo(project="p", name=name, log_dir=tmp_path))
        return [(e["type"], e["metric"], e["variant"], e["iter"],
                 (session / "data" / e["key"]).read_bytes())
                for line in (session / "metrics.jsonl").open() for e in json.loads(line)]

    assert stored("ours") == stored("theirs")
    assert [entry[:4] for entry in stored("ours")] == [
        ("training_debug_image", "val", "val/samples", 7),
        ("training_debug_image", "notes", "notes", 7)]
    theirs = clearml_monitor.read_media(RunInfo(project="p", name="theirs", log_dir=tmp_path))
    assert [(tag, step) for tag, step, _ in theirs] == [("val/samples", 7), ("notes", 7)]
    assert np.array_equal(theirs[0][2].array, pixels) and theirs[1][2].text == "é\n"


def test_every_sample_is_kept_and_the_sessions_zip_reads_back_alike(tmp_path: Path) -> None:
    """102 images of one tag: ClearML's default history (``sdk.metrics.file_history_size``,
    100) would name the 101st file like the first; every one is kept. The ``.zip`` ClearML
    writes at close (what ``Task.import_offline_session`` uploads), unpacked elsewhere, reads
    back the same."""
    import numpy as np

    images = [np.array([[step, 255 - step]], np.uint8) for step in range(102)]
    with Monitor(["clearml"], project="p", name="r", log_dir=tmp_path,
                 dispatch="thread") as monitor:
        for step, pixels in enumerate(images):
            monitor.log({"grid": Image(pixels, caption=f"step {step} ✓")}, step=step)
        monitor.log({"w": Histogram(edges=[-1.5, 0.1, 0.7], counts=[2.5, 4])}, step=3)
    session = clearml_monitor.find_session(monitor.run)
    media = clearml_monitor.read_media(monitor.run)
    grids = [(step, image) for tag, step, image in media if tag == "grid"]
    assert [step for step, _ in grids] == list(range(102))
    for (step, image), pixels in zip(grids, images, strict=True):
        assert np.array_equal(image.array, pixels[:, :, None]), step
        assert image.caption == f"step {step} ✓"
    [(tag, step, histogram)] = [m for m in media if m[0] == "w"]
    assert (tag, step) == ("w", 3)
    assert histogram.edges.tolist() == [-1.5, 0.1, 0.7]
    assert histogram.counts.tolist() == [2.5, 4.0]

    moved = tmp_path / "moved"
    with zipfile.ZipFile(session.with_suffix(".zip")) as archive:
        archive.extractall(moved / "offline" / session.name)
    shutil.rmtree(session)  # nothing read from the session's own folder any more
    again = clearml_monitor.read_media(monitor.run, cache=moved)
    assert [(t, s) for t, s, _ in again] == [(t, s) for t, s, _ in media]
    assert all(np.array_equal(a.array, b.array) for (_, _, a), (_, _, b)
               in zip(again[:102], media[:102], strict=True))
