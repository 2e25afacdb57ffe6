"""accelerate: a real ``Accelerator`` loop on CPU; every backend holds the caller's steps."""

from __future__ import annotations

import warnings

import pytest
import readback
import torch
from accelerate import Accelerator

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


def test_log_with_an_instance_stores_the_callers_steps_in_every_backend(log_dir):
    tracker = MonitorTracker(BACKENDS, project="acc", run_name="inst", log_dir=log_dir)
    accelerator = Accelerator(log_with=tracker, cpu=True)
    accelerator.init_trackers("acc", config=CONFIG)
    assert accelerator.get_tracker("monitors", unwrap=True) is tracker.monitor
    logged = train(accelerator)
    accelerator.end_training()
    assert tracker.monitor.closed
    assert [s for s, _ in logged] == [0, 10, 20, 30, 40]
    check_backends(tracker.monitor, logged)


def test_log_with_the_registered_name(log_dir):
    monitors_accelerate.register()
    monitors_accelerate.register()  # a second call is harmless (no "overwritten" warning)
    accelerator = Accelerator(log_with="monitors", cpu=True)
    accelerator.init_trackers("acc-reg", config=CONFIG, init_kwargs={"monitors": {
        "backends": BACKENDS, "run_name": "reg", "log_dir": log_dir}})
    tracker = accelerator.get_tracker("monitors")
    logged = train(accelerator)
    accelerator.end_training()
    assert tracker.monitor.run.project == "acc-reg"  # the project given to init_trackers
    check_backends(tracker.monitor, logged)


@pytest.mark.parametrize("form", ["instance", "registered"])
def test_config_of_init_trackers_is_stored_by_every_backend(log_dir, form):
    if form == "instance":
        tracker = MonitorTracker(BACKENDS, project="acc", run_name="cfg", log_dir=log_dir)
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


def test_string_values_are_skipped_with_one_warning_naming_the_key(log_dir):
    tracker = MonitorTracker(["tensorboard"], project="acc", run_name="str", log_dir=log_dir)
    accelerator = Accelerator(log_with=tracker, cpu=True)
    accelerator.init_trackers("acc")
    with pytest.warns(UserWarning, match="'phase'") as caught:
        accelerator.log({"loss": torch.tensor(0.5), "phase": "warmup"}, step=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        accelerator.log({"loss": torch.tensor(0.25), "phase": "main"}, step=4)
    accelerator.end_training()
    assert len([w for w in caught if "phase" in str(w.message)]) == 1
    readback.assert_rows("tensorboard", tracker.monitor.run,
                         [("loss", 3, 0.5), ("loss", 4, 0.25)])


def test_instance_without_a_project_is_a_config_error_at_init_trackers():
    accelerator = Accelerator(log_with=MonitorTracker(["tensorboard"]), cpu=True)
    with pytest.raises(ConfigError, match="project="):
        accelerator.init_trackers("acc")


def test_registered_without_backends_is_a_config_error():
    monitors_accelerate.register()
    accelerator = Accelerator(log_with="monitors", cpu=True)
    with pytest.raises(ConfigError, match="'backends'"):
        accelerator.init_trackers("acc")
