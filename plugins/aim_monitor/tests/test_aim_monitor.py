"""The contract kit against the ``aim`` backend, and what is Aim's own: the same values logged
through ``aim.Run`` directly read back alike through ``aim.Repo``, segments, resume, crash."""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from ranks import one_process, two_ranks

import aim_monitor
from aim_monitor import AimMonitor, read_config, read_rows
from core_monitor import ConfigError, Monitor, RunInfo
from core_monitor.testing import MonitorContract


@pytest.fixture(scope="session")
def empty_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty Aim repository, made once: Aim sets up a new repository's SQLite database by
    running Alembic in a subprocess (seconds on a busy machine), so each test copies this one
    instead (a repository is its ``.aim`` folder)."""
    from aim import Repo

    path = tmp_path_factory.mktemp("aim-template")
    Repo(str(path), init=True).close()
    return path


@pytest.fixture
def repo(empty_repo: Path, tmp_path: Path) -> Iterator[str]:
    """``<tmp_path>/aim``, the repository of ``log_dir=tmp_path``, already initialised."""
    shutil.copytree(empty_repo, tmp_path / "aim")
    yield str(tmp_path / "aim")


class TestAimContract(MonitorContract):
    """Every check of the kit: steps, values, flush, close, config, media, resume, ranks; in an
    initialised repository the ``repo`` option names (the kit's ``log_dir`` stays empty)."""

    backend_class = AimMonitor

    @pytest.fixture
    def backend_options(self, repo: str) -> dict[str, str]:
        return {"repo": repo}

    @pytest.fixture
    def read_rows(self, repo: str):
        return functools.partial(aim_monitor.read_rows, repo=repo)

    @pytest.fixture
    def read_config(self, repo: str):
        return functools.partial(aim_monitor.read_config, repo=repo)

    @pytest.fixture
    def read_media(self, repo: str):
        return functools.partial(aim_monitor.read_media, repo=repo)

    @pytest.fixture
    def read_crash(self, repo: str):
        return functools.partial(aim_monitor.read_crash, repo=repo)


def test_the_entry_points_name_the_backend_and_its_reader() -> None:
    (found,) = entry_points(group="experiment_monitors", name="aim")
    assert found.load() is AimMonitor
    (reader,) = entry_points(group="experiment_monitor_readers", name="aim")
    assert reader.load() is aim_monitor.reader


def test_tags_as_one_string_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tags=.baseline. \(a str\) must be a list"):
        Monitor(["aim"], project="p", log_dir=tmp_path, aim={"tags": "baseline"})


def test_aims_own_api_and_ours_read_back_alike(tmp_path: Path, repo: str) -> None:
    """The same steps, values, name, tags and hparams through ``aim.Run`` and through the
    backend, read back through ``aim.Repo``: what Aim's UI shows is the same for both."""
    from aim import Repo, Run

    points = [(0, 0.5), (10, 0.25), (20, math.inf), (2**40, math.nan)]
    config = {"lr": 0.0003, "optimizer.name": "adam", "layers": [64, 64]}
    theirs = Run(repo=repo, experiment="p", system_tracking_interval=None,
                 log_system_params=False, capture_terminal_logs=False)
    theirs.name = "theirs"
    theirs.add_tag("baseline")
    theirs["hparams"] = config
    for step, value in points:
        theirs.track(value, name="train/loss", step=step)
    theirs.close()
    with Monitor(["aim"], project="p", name="ours", config=config, log_dir=tmp_path,
                 aim={"tags": ["baseline"]}) as monitor:
        for step, value in points:
            monitor.log({"train/loss": value}, step=step)

    with aim_monitor.find_run(monitor.run):  # which indexes the repository, as `aim up` does
        pass
    seen = {}
    for found in Repo(repo).iter_runs():
        (metric,) = list(found.metrics())
        steps, (values, _, _) = metric.data.items_list()
        seen[found.name] = (found.experiment, found.props.tags, found["hparams"],
                            metric.name, metric.context.to_dict(), list(steps),
                            [repr(v) for v in values])
    assert seen["ours"] == seen["theirs"]
    assert seen["ours"][5] == [0, 10, 20, 2**40]
    assert repr(read_rows(RunInfo(project="p", name="theirs", log_dir=tmp_path))) == repr(
        read_rows(monitor.run))


@pytest.mark.parametrize("dispatch", ["process", "thread"])
def test_a_closed_run_is_seen_finished_by_aims_own_api(tmp_path: Path, repo: str,
                                                        dispatch: str) -> None:
    """Aim's SDK leaves a closed run out of ``aim.Repo`` until ``aim up`` or ``aim storage
    reindex`` indexes it; the backend indexes its run at close, so nothing else is needed."""
    from aim import Repo

    with Monitor(["aim"], project="p", name="seen", log_dir=tmp_path,
                 dispatch=dispatch) as monitor:
        monitor.log({"loss": 1.0}, step=3)
    found = [(run.name, run.experiment, run.end_time is not None)
             for run in Repo(repo).iter_runs()]
    assert found == [("seen", "p", True)]


def _curves(repo: str) -> list[tuple[str, int, list[int]]]:
    """``(tag, segment, steps)`` of every curve of the repository's one run, as Aim reads it."""
    from aim import Repo

    (found,) = Repo(repo).iter_runs()
    return sorted((m.name, m.context.to_dict().get("segment", 0), list(m.data.items_list()[0]))
                  for m in found.metrics())


def test_a_step_logged_again_is_a_second_segment_in_aim(tmp_path: Path, repo: str) -> None:
    """Aim keeps one value per step of a sequence: the repeat goes to context segment 1, and
    the next step back to segment 0, the first whose last step is below it."""
    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({"loss": 1.0}, step=5)
        monitor.log({"loss": 2.0}, step=5)
        monitor.log({"loss": 3.0}, step=6)
    assert read_rows(monitor.run) == [("loss", 5, 1.0), ("loss", 5, 2.0), ("loss", 6, 3.0)]
    assert _curves(repo) == [("loss", 0, [5, 6]), ("loss", 1, [5])]


def test_a_tag_repeated_at_every_validation_is_two_curves_not_one_per_repeat(
        tmp_path: Path, repo: str) -> None:
    """Lightning logs ``epoch`` with the training rows and again with each validation's, at
    the same step: 25 validations made 26 curves of ``epoch``; now two, every point kept and
    read back in the order logged."""
    logged = []
    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path) as monitor:
        for step in range(0, 250, 10):
            for value in (step / 100, step / 100 + 0.5):  # train row, then validation row
                monitor.log({"epoch": value}, step=step)
                logged.append(("epoch", step, value))
    assert read_rows(monitor.run) == logged
    assert [(tag, segment) for tag, segment, _ in _curves(repo)] == [("epoch", 0), ("epoch", 1)]


def test_a_restart_from_a_checkpoint_continues_the_first_curve(tmp_path: Path,
                                                               repo: str) -> None:
    """Steps 0..9, then 5..14 (resumed from the checkpoint of step 4): the first curve goes on
    at 10..14, the replayed 5..9 are a second one; read back in the order logged."""
    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path) as monitor:
        for step in [*range(10), *range(5, 15)]:
            monitor.log({"loss": float(step)}, step=step)
    assert [step for _, step, _ in read_rows(monitor.run)] == [*range(10), *range(5, 15)]
    assert _curves(repo) == [("loss", 0, list(range(15))), ("loss", 1, list(range(5, 10)))]


def test_resume_continues_the_run_after_its_segments(tmp_path: Path, repo: str) -> None:
    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path) as first:
        first.log({"loss": 1.0}, step=3)
        first.log({"loss": 2.0}, step=1)  # segment 1
    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path, resume="must",
                 config={"late": 1}) as second:
        assert (second.run.resumed, second.run.last_step) == (True, 3)
        second.log({"loss": 3.0}, step=2)  # after 1 in segment 1
        second.log({"loss": 4.0}, step=2)  # segment 2
    assert read_rows(second.run) == [("loss", 3, 1.0), ("loss", 1, 2.0), ("loss", 2, 3.0),
                                     ("loss", 2, 4.0)]
    assert read_config(second.run) == {"late": 1}


def test_every_ranks_run_is_found_by_the_jobs_group(tmp_path: Path, repo: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``rank_zero_only=False``, two ranks: both runs (``ddp``, ``ddp-rank1``) hold the job's
    group as the run param ``job.group``, so Aim's own query ``run.job.group == "ddp"`` (what
    its explorers group by) finds the two and not a run of one process, which holds none."""
    from aim import Repo
    from aim.sdk.types import QueryReportMode

    runs = two_ranks("aim", tmp_path, monkeypatch)
    alone = one_process("aim", tmp_path, monkeypatch)
    assert [aim_monitor.reader.read_group(run) for run in [*runs, alone]] == ["ddp", "ddp", None]
    found = Repo(repo).query_runs('run.job.group == "ddp"',
                                  report_mode=QueryReportMode.DISABLED)
    assert sorted(view.run.name for view in found.iter_runs()) == ["ddp", "ddp-rank1"]
    assert [read_rows(run) for run in runs] == [[("loss", 0, 0.0)], [("loss", 0, 1.0)]]


def test_crash_marks_the_run(tmp_path: Path, repo: str) -> None:
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    backend = AimMonitor(run)
    backend.monitor_crash("the training process (pid 1) ended without closing the monitor")
    backend.monitor_close()
    assert aim_monitor.read_crash(run).startswith("the training process (pid 1)")
    with aim_monitor.find_run(run) as found:
        assert aim_monitor.CRASH_TAG in found.props.tags


def _inotify_instances() -> int:
    found = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own fd)
            found += "inotify" in str(fd.readlink())
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
def test_reading_runs_back_holds_no_inotify_instance(tmp_path: Path, repo: str) -> None:
    """Aim's index manager watches the repository (one inotify instance per manager, 128 per
    user by default): a process that reads many runs back ran out of them."""
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    backend = AimMonitor(run)
    backend.monitor_close()
    read_rows(run)
    before = _inotify_instances()
    for _ in range(5):
        read_rows(run)
    assert _inotify_instances() == before


def test_the_aim_internals_used_are_there() -> None:
    """``monitors list --check`` and the core run this check; the installed Aim passes it."""
    from core_monitor import Capabilities

    assert aim_monitor._compat.problems() == []
    assert Capabilities.of(AimMonitor).sdk == "aim"


HOLD_THE_INDEX = """
import sys, time
from aim.sdk.repo import Repo
repo = Repo(sys.argv[1])
index = repo._get_index_container("meta", timeout=0)  # open for writing: RocksDB LOCK
print("held", flush=True)
time.sleep(float(sys.argv[2]))
open(sys.argv[1] + "/released", "w").close()
index.close()
time.sleep(60)
"""


def _hold_the_index(repo: str, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_INDEX, repo, str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_read_waits_while_another_process_indexes(tmp_path: Path, repo: str) -> None:
    """The index is one RocksDB database one process at a time opens for writing, and Aim
    opens it with no wait: a read while the writer indexed its closed run failed at once
    (``RocksIOError: While lock file``). A read now waits for the other process."""
    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({"loss": 1.0}, step=7)
    holder = _hold_the_index(repo, 1.5)
    try:
        assert read_rows(monitor.run) == [("loss", 7, 1.0)]
        assert Path(repo, "released").exists()  # the read ended after the holder let go
    finally:
        holder.kill()
        holder.wait()


def test_a_read_past_the_index_wait_raises(tmp_path: Path, repo: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import aimrocks.errors

    with Monitor(["aim"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({"loss": 1.0}, step=7)
    monkeypatch.setattr(aim_monitor._compat, "INDEX_LOCK_WAIT", 0.3)
    holder = _hold_the_index(repo, 60)
    try:
        with pytest.raises(aimrocks.errors.RocksIOError, match="lock file"):
            read_rows(monitor.run)
    finally:
        holder.kill()
        holder.wait()
