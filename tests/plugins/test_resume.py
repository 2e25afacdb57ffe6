"""``Monitor(resume=...)`` with every first-party backend: a run killed mid-training continues
as ONE run in each tracker, read back from each tracker's own storage."""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from interpreter import run_python
from trackers import READERS, RESUMABLE

import mlflow_monitor
import tensorboard_monitor
import trackio_monitor
from core_monitor import ConfigError, ConfigWarning, Monitor, NoRunToResume, RunInfo
from mlflow_monitor.reader import client_for
from wandb_monitor._compat import read_records
from wandb_monitor.reader import run_folders

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

TRAIN = """
import json, os, signal, sys
from core_monitor import Monitor

log_dir, first, last, resume, kill = sys.argv[1], *map(int, sys.argv[2:4]), *sys.argv[4:6]
monitor = Monitor(json.loads(sys.argv[6]), project="preempt", name="job", log_dir=log_dir,
                  config={"lr": 0.1}, resume=resume)
print(json.dumps({"resumed": monitor.run.resumed, "last_step": monitor.run.last_step,
                  "last_steps": monitor.last_steps}), flush=True)
for step in range(first, last):
    monitor.log({"loss": 1.0 / (step + 1)}, step=step)
monitor.flush()
if kill == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
monitor.close()
"""


def train(log_dir: Path, first: int, last: int, resume: str, kill: str) -> tuple[int, dict]:
    done = run_python(TRAIN, log_dir, first, last, resume, kill, json.dumps(RESUMABLE),
                      cwd=log_dir.parent,
                      timeout=300, check=False)
    if kill != "kill":
        assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("{"))
    return done.returncode, json.loads(line)


def loss_steps(run: RunInfo) -> dict[str, list[int]]:
    return {name: sorted(s for t, s, _ in read(run) if t == "loss")
            for name, read in READERS.items() if name in RESUMABLE}


def test_a_killed_run_continues_as_one_run_in_every_backend(tmp_path):
    log_dir = tmp_path / "runs"
    code, first = train(log_dir, 0, 50, "allow", "kill")
    assert code == -signal.SIGKILL
    assert first == {"resumed": False, "last_step": None,
                     "last_steps": dict.fromkeys(RESUMABLE)}
    run = RunInfo(project="preempt", name="job", log_dir=log_dir)
    steps = {name: list(range(50)) for name in RESUMABLE}
    assert loss_steps(run) == steps, "flush() before the kill"

    _, second = train(log_dir, 50, 100, "allow", "close")
    assert second == {"resumed": True, "last_step": 49, "last_steps": dict.fromkeys(RESUMABLE, 49)}
    assert loss_steps(run) == {name: list(range(100)) for name in RESUMABLE}
    values = {(s, v) for t, s, v in trackio_monitor.read_rows(run) if t == "loss"}
    assert values == {(s, 1.0 / (s + 1)) for s in range(100)}

    # One run per tracker: Trackio one run id; TensorBoard one folder (two event files);
    # wandb one run id in two offline folders; MLflow one run of that name.
    db = next((log_dir / "trackio").glob("*.db"))
    with sqlite3.connect(db) as conn:
        ids = conn.execute("SELECT DISTINCT run_id FROM metrics").fetchall()
    assert len(ids) == 1
    assert len(list((log_dir / "preempt" / "job").glob("*tfevents*"))) == 2
    folders = run_folders(run)
    ids = {next(r.run.run_id for r in read_records(f) if r.HasField("run")) for f in folders}
    assert len(folders) == 2 and len(ids) == 1
    assert len(list((log_dir / "wandb").glob("offline-run-*"))) == 2
    client = client_for(run)
    experiment = client.get_experiment_by_name("preempt")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_name for r in runs] == ["job"]
    assert runs[0].info.status == "FINISHED"
    assert mlflow_monitor.read_config(run) == {"lr": "0.1"}


def test_must_without_an_earlier_run_names_every_backend_and_writes_nothing(tmp_path):
    log_dir = tmp_path / "runs"
    with pytest.raises(NoRunToResume) as raised:
        Monitor(RESUMABLE, project="p", name="never-ran", log_dir=log_dir, resume="must")
    assert isinstance(raised.value, ConfigError)
    assert sorted(raised.value.missing) == sorted(RESUMABLE)
    message = str(raised.value)
    assert "never-ran" in message and "resume='allow'" in message
    for name in RESUMABLE:
        assert f"{name}:" in message
        assert f"{name}: {name}:" not in message, message  # each backend named once
    assert not log_dir.exists(), sorted(str(p) for p in log_dir.rglob("*"))


def test_must_continues_and_repeated_steps_are_stored_as_given(tmp_path):
    log_dir = tmp_path / "runs"
    with Monitor(["trackio", "tensorboard", "mlflow"], project="p", name="r",
                 log_dir=log_dir) as monitor:
        for step in range(10):
            monitor.log({"loss": float(step)}, step=step)
    # a checkpoint from step 5: steps 6..9 are logged again, then the automatic steps go on
    with Monitor(["trackio", "tensorboard", "mlflow"], project="p", name="r",
                 log_dir=log_dir, resume="must") as monitor:
        assert (monitor.run.resumed, monitor.run.last_step) == (True, 9)
        for step in range(6, 10):
            monitor.log({"loss": 100.0 + step}, step=step)
        assert monitor.log({"loss": 1.0}) == 10
    run = RunInfo(project="p", name="r", log_dir=log_dir)
    for name in ("trackio", "tensorboard", "mlflow"):
        rows = [(s, v) for t, s, v in READERS[name](run) if t == "loss"]
        assert sorted(rows) == sorted([(s, float(s)) for s in range(10)]
                                      + [(s, 100.0 + s) for s in range(6, 10)] + [(10, 1.0)]), name


def test_allow_without_an_earlier_run_starts_it(tmp_path):
    with Monitor(["tensorboard", "trackio"], project="p", name="fresh", log_dir=tmp_path,
                 resume="allow") as monitor:
        assert (monitor.run.resumed, monitor.run.last_step) == (False, None)
        assert monitor.log({"loss": 1.0}) == 0
    assert tensorboard_monitor.read_rows(monitor.run) == [("loss", 0, 1.0)]


def test_a_backend_that_cannot_resume(tmp_path):
    """The jsonl test plugin declares no supports_resume: a warning with allow, an error with
    must (before any backend is constructed)."""
    with pytest.warns(ConfigWarning, match="'jsonl' cannot continue a run"):
        Monitor(["jsonl"], project="p", name="x", log_dir=tmp_path, resume="allow").close()
    with pytest.raises(NoRunToResume, match="jsonl: it cannot resume"):
        Monitor(["jsonl", "tensorboard"], project="p", name="y", log_dir=tmp_path / "y",
                resume="must")
    assert not (tmp_path / "y").exists()


@pytest.mark.parametrize("value", ["yes", True, None, "Allow"])
def test_a_bad_resume_value_is_a_config_error(tmp_path, value):
    with pytest.raises(ConfigError, match=r"resume=.* is not one of 'never', 'allow', 'must'"):
        Monitor(["tensorboard"], project="p", log_dir=tmp_path, resume=value)
    assert not tmp_path.joinpath("p").exists()


def test_must_names_only_the_backends_without_the_run(tmp_path):
    with Monitor(["tensorboard"], project="p", name="half", log_dir=tmp_path) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    with pytest.raises(NoRunToResume) as raised:
        Monitor(["tensorboard", "trackio"], project="p", name="half", log_dir=tmp_path,
                resume="must")
    assert list(raised.value.missing) == ["trackio"]
    assert tensorboard_monitor.read_rows(monitor.run) == [("loss", 0, 1.0)]
    assert not (tmp_path / "trackio").exists()
