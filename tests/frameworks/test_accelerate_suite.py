"""accelerate's own custom-tracker tests, run against ``MonitorTracker``.

Restated from accelerate 1.15's ``tests/test_tracking.py``: ``CustomTrackerTestCase``,
``RegisterTrackerClassTest`` (the parts a registered tracker takes part in) and
``TrackerDeferredInitializationTest``, plus ``TensorBoardTrackingTest.test_log_with_tensor``.
Each test names the one it restates; the construction is ``MonitorTracker`` (or
``register()``) and the read-back is every backend's own storage instead of the example
tracker's CSV file. accelerate's ``MyCustomTracker`` writes its config as a CSV row beside the
values; a tracker here stores the config as the run's config and each value at its step.
"""

from __future__ import annotations

import readback
import torch
from accelerate import Accelerator
from accelerate.state import PartialState
from accelerate.tracking import LOGGER_TYPE_TO_CLASS

from core_monitor.integrations import accelerate as monitors_accelerate
from core_monitor.integrations.accelerate import TRACKER_NAME, MonitorTracker

BACKENDS = list(readback.BACKENDS)
CONFIG = {"num_iterations": 12, "learning_rate": 1e-2, "some_boolean": False,
          "some_string": "some_value"}


def tracker(log_dir, name: str) -> MonitorTracker:
    return MonitorTracker(BACKENDS, run_name=name, log_dir=log_dir)


def test_init_trackers(log_dir):
    """``CustomTrackerTestCase.test_init_trackers``: the config reaches the run."""
    monitor_tracker = tracker(log_dir, "init")
    accelerator = Accelerator(log_with=monitor_tracker)
    accelerator.init_trackers("Some name", CONFIG)
    accelerator.log({"total_loss": 0.1}, step=0)  # Trackio stores a config with a row
    accelerator.end_training()
    run = monitor_tracker.monitor.run
    assert run.project == "Some name"
    assert dict(run.config) == CONFIG
    for backend in BACKENDS:
        readback.assert_config(backend, run, CONFIG)


def test_log(log_dir):
    """``CustomTrackerTestCase.test_log``: numbers and a string at step 0."""
    monitor_tracker = tracker(log_dir, "log")
    accelerator = Accelerator(log_with=monitor_tracker)
    accelerator.init_trackers("Some name")
    values = {"total_loss": 0.1, "iteration": 1, "my_text": "some_value"}
    accelerator.log(values, step=0)
    accelerator.end_training()
    run = monitor_tracker.monitor.run
    for backend in BACKENDS:
        readback.assert_rows(backend, run, [("total_loss", 0, 0.1), ("iteration", 0, 1.0)])
        assert readback.texts(backend, run) == [("my_text", 0, "some_value")], backend


def test_init_trackers_none_kwargs(log_dir):
    """``CustomTrackerTestCase.test_init_trackers_none_kwargs``."""
    monitor_tracker = tracker(log_dir, "none-init")
    accelerator = Accelerator(log_with=monitor_tracker)
    accelerator.init_trackers("Some name", init_kwargs=None)
    accelerator.end_training()
    assert monitor_tracker.monitor.closed


def test_log_none_kwargs(log_dir):
    """``CustomTrackerTestCase.test_log_none_kwargs``."""
    monitor_tracker = tracker(log_dir, "none-log")
    accelerator = Accelerator(log_with=monitor_tracker)
    accelerator.init_trackers("Some name")
    accelerator.log({"total_loss": 0.1}, step=0, log_kwargs=None)
    accelerator.end_training()
    for backend in BACKENDS:
        readback.assert_rows(backend, monitor_tracker.monitor.run, [("total_loss", 0, 0.1)])


def test_register_and_use_by_name(log_dir):
    """``RegisterTrackerClassTest.test_register_and_use_by_name``."""
    monitors_accelerate.register()
    assert TRACKER_NAME in LOGGER_TYPE_TO_CLASS
    accelerator = Accelerator(log_with=TRACKER_NAME)
    config = {"num_iterations": 12, "learning_rate": 1e-2}
    accelerator.init_trackers("some_project", config, init_kwargs={TRACKER_NAME: {
        "backends": BACKENDS, "run_name": "registered", "log_dir": log_dir}})
    accelerator.log({"total_loss": 0.1}, step=0)
    registered = accelerator.get_tracker(TRACKER_NAME)
    accelerator.end_training()
    assert isinstance(registered, MonitorTracker)
    run = registered.monitor.run
    assert dict(run.config) == config
    for backend in BACKENDS:
        readback.assert_config(backend, run, config)
        readback.assert_rows(backend, run, [("total_loss", 0, 0.1)])


def test_register_with_a_logging_directory(log_dir):
    """``RegisterTrackerClassTest.test_register_requires_logging_directory``, restated: the
    tracker does not require one (``requires_logging_directory = False``, so
    ``Accelerator(log_with="monitors")`` works without ``project_dir``), and with one it
    writes under the ``Accelerator``'s ``logging_dir`` as accelerate's own trackers do."""
    monitors_accelerate.register()
    Accelerator(log_with=TRACKER_NAME)  # no ValueError
    accelerator = Accelerator(log_with=TRACKER_NAME, project_dir=log_dir)
    accelerator.init_trackers("dir_project", init_kwargs={TRACKER_NAME: {
        "backends": ["tensorboard"]}})
    registered = accelerator.get_tracker(TRACKER_NAME)
    accelerator.log({"total_loss": 0.1}, step=0)
    accelerator.end_training()
    run = registered.monitor.run
    assert (run.project, run.log_dir) == ("dir_project", log_dir)
    readback.assert_rows("tensorboard", run, [("total_loss", 0, 0.1)])


def test_log_with_tensor(log_dir):
    """``TensorBoardTrackingTest.test_log_with_tensor``: a tensor is stored as its number."""
    monitor_tracker = tracker(log_dir, "tensor")
    accelerator = Accelerator(log_with=monitor_tracker)
    accelerator.init_trackers("test_project_with_log")
    accelerator.log({"tensor": torch.tensor(1)}, step=0)
    accelerator.end_training()
    for backend in BACKENDS:
        readback.assert_rows(backend, monitor_tracker.monitor.run, [("tensor", 0, 1.0)])


def test_deferred_init(log_dir):
    """``TrackerDeferredInitializationTest``: making the tracker (which checks the backends and
    options) does not initialise ``PartialState``; the ``Accelerator`` does."""
    PartialState._reset_state()
    monitor_tracker = tracker(log_dir, "deferred")
    assert PartialState._shared_state == {}
    _ = Accelerator(log_with=monitor_tracker)
    assert PartialState._shared_state != {}
