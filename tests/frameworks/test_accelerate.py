"""accelerate: a real ``Accelerator`` loop on CPU; every backend holds the caller's steps, and
accelerate's own TensorBoard tracker in the same run is the oracle."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import readback
import torch
from accelerate import Accelerator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from core_monitor import ConfigError
from core_monitor.integrations import accelerate as monitors_accelerate
from core_monitor.integrations.accelerate import MonitorTracker

BACKENDS = list(readback.BACKENDS)
CONFIG = {"lr": 0.05, "batch_size": 8, "optimizer": {"name": "sgd"}, "seed": None}


def train(accelerator: Accelerator, steps: int = 5) -> list[tuple[int, float]]:
    """A 5-step loop on a tiny linear model; logs a tensor loss at steps 0, 10, 20, ..."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    model, optimizer = accelerator.prepare(model, optimizer)
    logged = []
    for i in range(steps):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        step = 10 * i
        accelerator.log({"train/loss": loss.detach(), "lr": CONFIG["lr"]}, step=step)
        logged.append((step, float(loss.detach())))
    return logged


def expected_rows(logged: list[tuple[int, float]]) -> list[tuple[str, int, float]]:
    return [row for step, loss in logged
            for row in (("train/loss", step, loss), ("lr", step, CONFIG["lr"]))]


def check_backends(tracker_monitor, logged) -> None:
    run = tracker_monitor.run
    for backend in BACKENDS:
        assert readback.runs(backend, run) == 1, backend
        readback.assert_rows(backend, run, expected_rows(logged))


def test_log_with_an_instance_takes_project_and_folder_from_the_accelerator(log_dir,
                                                                           tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    tracker = MonitorTracker(BACKENDS, run_name="inst")
    accelerator = Accelerator(log_with=tracker, cpu=True, project_dir=log_dir)
    accelerator.init_trackers("acc", config=CONFIG)
    assert accelerator.get_tracker("monitors", unwrap=True) is tracker.monitor
    logged = train(accelerator)
    accelerator.end_training()
    assert tracker.monitor.closed
    assert [s for s, _ in logged] == [0, 10, 20, 30, 40]
    run = tracker.monitor.run
    assert (run.project, run.log_dir) == ("acc", log_dir)  # init_trackers', project_dir
    assert not (tmp_path / "runs").exists()  # not TensorBoard's default ./runs
    check_backends(tracker.monitor, logged)


def test_log_with_the_registered_name(log_dir):
    monitors_accelerate.register()
    monitors_accelerate.register()  # a second call is harmless (no "overwritten" warning)
    accelerator = Accelerator(log_with="monitors", cpu=True, project_dir=log_dir)
    accelerator.init_trackers("acc-reg", config=CONFIG, init_kwargs={"monitors": {
        "backends": BACKENDS, "run_name": "reg"}})
    tracker = accelerator.get_tracker("monitors")
    logged = train(accelerator)
    accelerator.end_training()
    assert tracker.monitor.run.project == "acc-reg"  # the project given to init_trackers
    assert tracker.monitor.run.log_dir == log_dir
    check_backends(tracker.monitor, logged)


# What users get (writer processes): this framework's one run in the users' default dispatch.
@pytest.mark.process
def test_accelerates_tensorboard_tracker_and_ours_store_the_same_scalars(log_dir):
    """One run with both trackers: accelerate's TensorBoard folder and every backend agree."""
    tracker = MonitorTracker(BACKENDS, run_name="parity")
    accelerator = Accelerator(log_with=["tensorboard", tracker], cpu=True, project_dir=log_dir)
    accelerator.init_trackers("acc-tb")
    logged = train(accelerator)
    accelerator.log({"note": "text", "nested": {"a": 1.5}}, step=50)
    accelerator.end_training()
    theirs = EventAccumulator(str(log_dir / "acc-tb"), size_guidance={"scalars": 0}).Reload()
    scalars = sorted((tag, e.step, e.value) for tag in theirs.Tags()["scalars"]
                     for e in theirs.Scalars(tag))
    assert [(t, s) for t, s, _ in scalars] == sorted(
        (t, s) for t, s, _ in expected_rows(logged))
    for backend in BACKENDS:
        ours = sorted(r for r in readback.rows(backend, tracker.monitor.run) if r[1] < 50)
        assert [(t, s) for t, s, _ in ours] == [(t, s) for t, s, _ in scalars], backend
        for (_, _, value), (_, _, their) in zip(ours, scalars, strict=True):
            assert abs(value - their) <= 1e-6 * max(1.0, abs(their)), backend
        # accelerate's TensorBoard tracker: add_text for str, add_scalars (a run per key) for a
        # dict; ours: Text, and the dict flattened into nested/a
        assert ("nested/a", 50, 1.5) in readback.rows(backend, tracker.monitor.run)
        assert readback.texts(backend, tracker.monitor.run) == [("note", 50, "text")]


@pytest.mark.parametrize("form", ["instance", "registered"])
def test_config_of_init_trackers_is_stored_by_every_backend(log_dir, form):
    if form == "instance":
        tracker = MonitorTracker(BACKENDS, run_name="cfg", log_dir=log_dir)
        accelerator = Accelerator(log_with=tracker, cpu=True)
        accelerator.init_trackers("acc", config=CONFIG)
    else:
        monitors_accelerate.register()
        accelerator = Accelerator(log_with="monitors", cpu=True)
        accelerator.init_trackers("acc", config=CONFIG, init_kwargs={"monitors": {
            "backends": BACKENDS, "run_name": "cfg", "log_dir": log_dir}})
        tracker = accelerator.get_tracker("monitors")
    accelerator.log({"loss": 1.0}, step=0)
    accelerator.end_training()
    assert dict(tracker.monitor.run.config) == {"lr": 0.05, "batch_size": 8,
                                                "optimizer.name": "sgd", "seed": None}
    for backend in BACKENDS:
        readback.assert_config(backend, tracker.monitor.run,
                               {"lr": 0.05, "batch_size": 8, "optimizer.name": "sgd"})


def test_strings_are_text_and_other_values_skipped_with_one_warning_naming_the_key(log_dir):
    tracker = MonitorTracker(["tensorboard"], run_name="str", log_dir=log_dir)
    accelerator = Accelerator(log_with=tracker, cpu=True)
    accelerator.init_trackers("acc")
    with pytest.warns(UserWarning, match="'ids'") as caught:
        accelerator.log({"loss": torch.tensor(0.5), "phase": "warmup", "ids": [1]}, step=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        accelerator.log({"loss": torch.tensor(0.25), "phase": "main", "ids": [2]}, step=4)
    accelerator.end_training()
    assert len([w for w in caught if "ids" in str(w.message)]) == 1
    readback.assert_rows("tensorboard", tracker.monitor.run,
                         [("loss", 3, 0.5), ("loss", 4, 0.25)])
    assert readback.texts("tensorboard", tracker.monitor.run) == [("phase", 3, "warmup"),
                                                                  ("phase", 4, "main")]


def test_init_trackers_after_end_training_starts_a_new_run(log_dir):
    tracker = MonitorTracker(["tensorboard"], run_name="again", log_dir=log_dir)
    accelerator = Accelerator(log_with=tracker, cpu=True)
    accelerator.init_trackers("acc")
    accelerator.log({"loss": 1.0}, step=0)
    accelerator.end_training()
    first = tracker.monitor.run
    with pytest.raises(RuntimeError, match="init_trackers"):
        accelerator.log({"loss": 9.0}, step=1)  # was: log() on the closed Monitor
    with pytest.warns(UserWarning, match="new run 'again-2'"):
        accelerator.init_trackers("acc")
    accelerator.log({"loss": 2.0}, step=0)
    accelerator.end_training()
    readback.assert_rows("tensorboard", first, [("loss", 0, 1.0)])
    assert tracker.monitor.run.name == "again-2"
    readback.assert_rows("tensorboard", tracker.monitor.run, [("loss", 0, 2.0)])


def test_a_project_that_differs_from_init_trackers_is_a_config_error(log_dir):
    tracker = MonitorTracker(["tensorboard"], project="a", run_name="p", log_dir=log_dir)
    accelerator = Accelerator(log_with=tracker, cpu=True)
    with pytest.raises(ConfigError, match=r"project='a'.*init_trackers\('b'\)"):
        accelerator.init_trackers("b")
    same = MonitorTracker(["tensorboard"], project="b", run_name="p", log_dir=log_dir)
    Accelerator(log_with=same, cpu=True).init_trackers("b")  # equal: fine
    assert same.monitor.run.project == "b"
    same.finish()


def test_a_misspelt_option_is_a_config_error_when_the_tracker_is_made():
    with pytest.raises(ConfigError, match="'flush_sec'"):
        MonitorTracker(["tensorboard"], tensorboard={"flush_sec": 1})
    with pytest.raises(ConfigError, match="'logdir'"):
        MonitorTracker(["tensorboard"], logdir="x")


def test_registered_without_backends_is_a_config_error():
    monitors_accelerate.register()
    accelerator = Accelerator(log_with="monitors", cpu=True)
    with pytest.raises(ConfigError, match="'backends'"):
        accelerator.init_trackers("acc")


def test_log_dir_given_to_the_tracker_wins_over_project_dir(log_dir, tmp_path):
    tracker = MonitorTracker(["tensorboard"], run_name="own", log_dir=log_dir)
    accelerator = Accelerator(log_with=tracker, cpu=True, project_dir=tmp_path / "project")
    accelerator.init_trackers("acc")
    accelerator.end_training()
    assert tracker.monitor.run.log_dir == Path(log_dir)
