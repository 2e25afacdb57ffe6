"""Sweeps: a new logger or callback per trial, the old one dropped without ``close()``.

A hyperparameter sweep in one process (a loop, Optuna's ``study.optimize``) makes a
``MonitorLogger`` or ``MonitorCallback`` per trial and drops it. With writer processes (the
default dispatch, asked for explicitly here), an open run is a set of processes: after every
trial at most one finished trial's run is open and at most one set of writer processes lives,
whether the dropped object was garbage-collected (``gc.collect()`` after the even trials) or
may still be alive in a reference cycle (no ``gc.collect()`` after the odd ones); at the end
(what exit does) every trial's run is closed and holds exactly what that trial logged, in
every backend it wrote to.

Starting a writer process costs about a second for TensorBoard and several for Trackio and
wandb, so every trial writes to TensorBoard, and the first two (one collected, one not) and
the last to every backend of ``readback.BACKENDS``; Lightning runs 20 trials, the Trainer 8
(each builds a model and an ``Accelerator``).
"""

from __future__ import annotations

import gc

import psutil
import readback
import torch
from lightning.pytorch import LightningModule, Trainer
from test_transformers import make_trainer, numeric_history

from core_monitor import shutdown
from core_monitor.integrations.lightning import MonitorLogger
from core_monitor.integrations.transformers import MonitorCallback

BACKENDS = list(readback.BACKENDS)
TRIALS = 20
#: The Trainer builds a model and its Accelerator per trial (seconds each on a loaded CI box).
TRAINER_TRIALS = 8


def writer_processes() -> int:
    """Writer processes that are children of this process (``core_monitor.dispatch``)."""
    count = 0
    for child in psutil.Process().children():
        try:
            if "core_monitor.dispatch.writer" in " ".join(child.cmdline()):
                count += 1
        except psutil.NoSuchProcess:  # exited meanwhile
            pass
    return count


def backends(trial: int, trials: int = TRIALS) -> list[str]:
    return BACKENDS if trial in (0, 1, trials - 1) else ["tensorboard"]


def check_after_trial(monitors: list, trial: int) -> None:
    if trial % 2 == 0:
        gc.collect()
    assert sum(not m.closed for m in monitors) <= 1, [m for m in monitors if not m.closed]
    assert all(m.closed for m in monitors[:-2])  # every trial but the last two, whatever gc did
    assert writer_processes() <= len(BACKENDS)


def check_every_run(monitors: list, expected: list, trials: int = TRIALS) -> None:
    shutdown.close_all()  # what interpreter exit does for the last trial's run
    assert all(m.closed for m in monitors)
    assert writer_processes() == 0
    for trial, (monitor, rows) in enumerate(zip(monitors, expected, strict=True)):
        for backend in backends(trial, trials):
            assert readback.runs(backend, monitor.run) == 1, (backend, monitor.run.name)
            readback.assert_rows(backend, monitor.run, rows)


class Trial(LightningModule):
    """Logs ``loss = trial + step / 10`` at every step: each trial's rows are its own."""

    def __init__(self, trial: int) -> None:
        super().__init__()
        self.trial = trial
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        self.log("loss", self.trial + self.global_step / 10)
        return self.layer(batch).sum()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(4, 2), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_sweep_keeps_one_finished_run_and_one_set_of_writers(log_dir, tmp_path):
    monitors, expected = [], []
    for trial in range(TRIALS):
        logger = MonitorLogger(backends(trial), project="sweep", name=f"trial-{trial}",
                               log_dir=log_dir, dispatch="process", default_hp_metric=False)
        trainer = Trainer(logger=logger, max_steps=3, log_every_n_steps=1,
                          default_root_dir=tmp_path, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Trial(trial))
        monitors.append(logger.monitor)
        # self.log stores float32; Lightning adds the epoch at every logged step
        expected.append([row for step in range(3) for row in (
            ("loss", step, torch.tensor(trial + step / 10).item()), ("epoch", step, 0.0))])
        del logger, trainer  # dropped without close() or finalize() of our own
        check_after_trial(monitors, trial)
    check_every_run(monitors, expected)


def test_trainer_sweep_keeps_one_finished_run_and_one_set_of_writers(log_dir, tmp_path):
    monitors, expected = [], []
    for trial in range(TRAINER_TRIALS):
        callback = MonitorCallback(backends(trial, TRAINER_TRIALS), project="sweep",
                                   name=f"trial-{trial}", log_dir=log_dir, dispatch="process")
        trainer = make_trainer(tmp_path, [callback], max_steps=2, logging_steps=1,
                               learning_rate=1e-3 * (trial + 1))
        trainer.train()
        monitors.append(callback.monitor)
        expected.append(numeric_history(trainer.state.log_history))
        del callback, trainer
        check_after_trial(monitors, trial)
    check_every_run(monitors, expected, TRAINER_TRIALS)


def test_a_collected_deepspeed_monitor_is_closed_when_the_next_engine_attaches(tmp_path):
    """A sweep of DeepSpeed engines: ``attach`` needs only ``engine.monitor`` and the config,
    so a plain object stands in for the engine (a real one is ``test_deepspeed.py``'s, in a
    process of its own); the first engine's run is closed when the second attaches."""
    from types import SimpleNamespace

    from core_monitor.integrations.deepspeed import attach

    def config(job: str) -> dict:
        return {"tensorboard": {"enabled": True, "output_path": str(tmp_path), "job_name": job},
                "experiment_monitors": {"dispatch": "process"}}

    engine = SimpleNamespace(monitor=None)
    first = attach(engine, config=config("a")).monitor
    first.write_events([("Train/Samples/loss", 1.0, 8)])
    del engine
    gc.collect()
    assert not first.closed  # the collector closes nothing by itself
    second = attach(SimpleNamespace(monitor=None), config=config("b")).monitor
    assert first.closed and not second.closed
    assert writer_processes() == 1
    second.close()
    from tensorboard_monitor import read_rows

    assert read_rows(first.run, run_dir=tmp_path / "a") == [("Train/Samples/loss", 8, 1.0)]


def test_a_collected_accelerate_tracker_is_closed_when_the_next_run_starts(log_dir):
    """accelerate: a trial's ``Accelerator`` dropped without ``end_training()``."""
    from accelerate import Accelerator

    from core_monitor.integrations.accelerate import MonitorTracker

    monitors = []
    for trial in range(2):
        tracker = MonitorTracker(["tensorboard"], run_name=f"trial-{trial}", dispatch="process")
        accelerator = Accelerator(log_with=tracker, project_dir=str(log_dir))
        accelerator.init_trackers("sweep")
        accelerator.log({"loss": float(trial)}, step=0)
        monitors.append(tracker.monitor)
        del accelerator, tracker
        gc.collect()
    assert monitors[0].closed and not monitors[1].closed
    assert writer_processes() == 1
    monitors[1].close()
    for trial, monitor in enumerate(monitors):
        readback.assert_rows("tensorboard", monitor.run, [("loss", 0, float(trial))])
