"""Lightning's own generic logger tests, run against ``MonitorLogger``.

Restated from Lightning 2.6's ``tests/tests_pytorch/loggers/test_all.py`` and
``test_logger.py``: each test names the one it restates; the bodies are Lightning's, with only
the construction (``MonitorLogger`` with real backends) and the read-back (each backend's own
storage instead of mocks) changed. Not restated: the ``DummyLogger``/``DummyExperiment`` tests
(they test Lightning's own stand-ins) and ``test_scan_checkpoints`` (a checkpoint utility that
no logger is part of). Where a test asserts a built-in-only convention, docs/frameworks/lightning.md
says which and why (here: ranks other than 0 get a ``Monitor`` that writes nothing, not
a ``DummyExperiment``).
"""

from __future__ import annotations

import pickle
from argparse import Namespace
from copy import deepcopy
from typing import Any

import numpy as np
import pytest
import readback
import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel
from lightning.pytorch.tuner.tuning import Tuner
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from core_monitor.integrations.lightning import MonitorLogger

BACKENDS = list(readback.BACKENDS)


def make_logger(log_dir, name: str, cls: type = MonitorLogger, **kwargs: Any) -> MonitorLogger:
    """The construction every test shares: the three local backends under ``log_dir``."""
    return cls(BACKENDS, project="suite", name=name, log_dir=log_dir, **kwargs)


def stored(logger: MonitorLogger) -> dict[str, list[tuple[str, int, float]]]:
    """Close the run and read it back from every backend (one run each)."""
    logger.close()
    run = logger.monitor.run
    out = {}
    for backend in BACKENDS:
        assert readback.runs(backend, run) == 1, backend
        out[backend] = sorted(readback.rows(backend, run))
    return out


def assert_stored(logger: MonitorLogger, expected: list[tuple[str, int, float]]) -> None:
    logger.close()
    for backend in BACKENDS:
        assert readback.runs(backend, logger.monitor.run) == 1, backend
        readback.assert_rows(backend, logger.monitor.run, expected)


# --- test_all.py ---------------------------------------------------------------------------

def test_loggers_fit_test_all(log_dir, tmp_path, monkeypatch):
    """``test_loggers_fit_test_all``: fit then test with one logger; the history Lightning
    passes it, and every backend holds that history in ONE run (test_loss included)."""
    monkeypatch.chdir(tmp_path)

    class CustomModel(BoringModel):
        def training_step(self, batch, batch_idx):
            loss = self.step(batch)
            self.log("train_some_val", loss)
            return {"loss": loss}

        def on_validation_epoch_end(self):
            self.log_dict({"early_stop_on": torch.tensor(1), "val_loss": torch.tensor(0.5)})

        def on_test_epoch_end(self):
            self.log("test_loss", torch.tensor(2))

    class StoreHistoryLogger(MonitorLogger):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.history = []

        def log_metrics(self, metrics, step):
            super().log_metrics(metrics, step)
            self.history.append((step, dict(metrics)))

    logger = make_logger(log_dir, "fit-test", cls=StoreHistoryLogger)
    model = CustomModel()
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, logger=logger,
                      limit_train_batches=1, limit_val_batches=1, log_every_n_steps=1,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model)
    trainer.test()

    log_metric_names = [(s, sorted(m.keys())) for s, m in logger.history]
    assert log_metric_names == [
        (0, ["epoch", "train_some_val"]),
        (0, ["early_stop_on", "epoch", "val_loss"]),
        (1, ["epoch", "test_loss"]),
    ]
    assert logger.version == "fit-test"  # fit and test: one run
    assert_stored(logger, [(tag, step, float(value)) for step, metrics in logger.history
                           for tag, value in metrics.items()])


def test_loggers_pickle_all(log_dir):
    """``test_loggers_pickle_all``: a logger that has logged, and a Trainer holding it, pickle;
    the copy logs into the same run."""
    logger = make_logger(log_dir, "pickle")
    _ = logger.experiment
    logger.log_metrics({"a": 1})
    logger.save()
    pickle.dumps(logger)

    trainer = Trainer(max_epochs=1, logger=logger)
    pkl_bytes = pickle.dumps(trainer)

    trainer2 = pickle.loads(pkl_bytes)
    trainer2.logger.log_metrics({"acc": 1.0})

    assert trainer2.logger.name == logger.name
    assert trainer2.logger.save_dir == logger.save_dir
    assert trainer2.logger.version == logger.version
    assert_stored(logger, [("a", 0, 1.0), ("acc", 1, 1.0)])


@pytest.mark.parametrize("tuner_method", ["lr_find", "scale_batch_size"])
def test_logger_reset_correctly(log_dir, tmp_path, tuner_method):
    """``test_logger_reset_correctly``: the tuners do not alter the logger reference."""

    class CustomModel(BoringModel):
        def __init__(self, lr=0.1, batch_size=1):
            super().__init__()
            self.save_hyperparameters()

    model = CustomModel()
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1,
                      logger=make_logger(log_dir, f"tuner-{tuner_method}"),
                      enable_progress_bar=False, enable_model_summary=False)
    tuner = Tuner(trainer)

    logger1 = trainer.logger
    getattr(tuner, tuner_method)(model)
    logger2 = trainer.logger
    logger3 = model.logger

    assert logger1 == logger2, "Finder altered the logger of trainer"
    assert logger2 == logger3, "Finder altered the logger of model"


class LazyInitExperimentCheck(Callback):
    """Restated read-back: the run has started by ``setup`` (Lightning's check is for an
    ``_experiment`` attribute)."""

    def setup(self, trainer, pl_module, stage=None):
        if trainer.global_rank > 0:
            return
        assert trainer.logger.monitor is not None and not trainer.logger.monitor.closed


class RankZeroLoggerCheck(Callback):
    """Restated read-back: rank 0's ``experiment`` writes to every backend, the other ranks'
    writes nowhere (Lightning's built-ins return a ``DummyExperiment`` there)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        backends = trainer.logger.experiment.backends
        if trainer.is_global_zero:
            assert backends == BACKENDS
            trainer.logger.experiment.log({"x": 1.0})  # read back from every backend
        else:
            assert backends == []
            assert pl_module.logger.experiment.log({"x": 1.0}) == 0  # checked, not written


def test_logger_initialization(log_dir, tmp_path):
    """``test_logger_initialization``: ``ddp_spawn`` on 2 CPU processes; the logger is pickled
    into them, starts its run lazily there, and only rank 0 writes. One line added to
    Lightning's body: hyperparameters logged in the main process before ``fit`` (which once made
    the logger unpicklable); they reach the one run, which the main process never starts."""
    logger = make_logger(log_dir, "spawn")
    logger.log_hyperparams({"batch": 8, "note": "main process"})  # added
    pickle.dumps(logger)  # was: TypeError: cannot pickle 'mappingproxy' object
    trainer = Trainer(logger=logger, default_root_dir=tmp_path, strategy="ddp_spawn",
                      accelerator="cpu", devices=2, max_steps=1,
                      callbacks=[LazyInitExperimentCheck(), RankZeroLoggerCheck()],
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(BoringModel())
    assert logger.monitor is None  # the main process started no run
    run = readback.RunInfo("suite", "spawn", log_dir=log_dir)
    for backend in BACKENDS:
        assert readback.runs(backend, run) == 1, backend
        # rank 0's only; hp_metric (default_hp_metric, as TensorBoardLogger) took step 0 of
        # the run, so x, logged without a step, is at the next one
        readback.assert_rows(backend, run, [("hp_metric", 0, -1.0), ("x", 1, 1.0)])
        readback.assert_config(backend, run, {"batch": 8, "note": "main process"})


def test_logger_with_prefix_all(log_dir):
    """``test_logger_with_prefix_all``: ``prefix`` goes before each key, joined with ``-``."""
    logger = make_logger(log_dir, "prefix", prefix="tmp")
    logger.log_metrics({"test": 1.0}, step=0)
    assert_stored(logger, [("tmp-test", 0, 1.0)])


def test_logger_default_name(monkeypatch):
    """``test_logger_default_name``: the default name is ``lightning_logs``."""
    monkeypatch.setenv("EXPERIMENT_MONITORS", "tensorboard")
    logger = MonitorLogger()
    assert logger.name == "lightning_logs"


# --- test_logger.py ------------------------------------------------------------------------

class CustomLogger(MonitorLogger):
    """Lightning's ``CustomLogger`` records what the Trainer called; restated as a subclass of
    ``MonitorLogger`` recording the same, while the backends store the metrics."""

    def __init__(self, log_dir, name: str) -> None:
        super().__init__(BACKENDS, project="suite", name=name, log_dir=log_dir)
        self.hparams_logged = None
        self.after_save_checkpoint_called = False
        self.finalized_status = None

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs):
        self.hparams_logged = params
        super().log_hyperparams(params, *args, **kwargs)

    @rank_zero_only
    def finalize(self, status):
        self.finalized_status = status
        super().finalize(status)

    def after_save_checkpoint(self, checkpoint_callback):
        self.after_save_checkpoint_called = True


class TrainLossModel(BoringModel):
    def training_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("train_loss", loss)
        return {"loss": loss}


def test_custom_logger(log_dir, tmp_path):
    """``test_custom_logger``: a fit logs metrics, saves a checkpoint, finalizes "success"."""
    logger = CustomLogger(log_dir, "custom")
    trainer = Trainer(max_steps=2, log_every_n_steps=1, logger=logger, default_root_dir=tmp_path,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(TrainLossModel())
    assert trainer.state.finished, f"Training failed with {trainer.state}"
    for rows in stored(logger).values():
        assert [(t, s) for t, s, _ in rows if t == "train_loss"] == [("train_loss", 0),
                                                                      ("train_loss", 1)]
    assert logger.after_save_checkpoint_called
    assert logger.finalized_status == "success"
    # the checkpoint is in this run's own folder: <save_dir>/<project>/<run name>/, beside the
    # TensorBoard run, as with TensorBoardLogger (save_dir is the logger's log_dir)
    assert list((log_dir / "suite" / "custom" / "checkpoints").glob("*.ckpt"))


def test_multiple_loggers(log_dir, tmp_path):
    """``test_multiple_loggers``: two loggers in one Trainer, each its own run."""
    logger1 = CustomLogger(log_dir, "multi-1")
    logger2 = CustomLogger(log_dir, "multi-2")
    trainer = Trainer(max_steps=2, log_every_n_steps=1, logger=[logger1, logger2],
                      default_root_dir=tmp_path, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(TrainLossModel())
    assert trainer.state.finished, f"Training failed with {trainer.state}"
    for logger in (logger1, logger2):
        assert logger.hparams_logged is None
        rows = stored(logger)
        assert all([t for t, _, _ in r] == ["epoch", "epoch", "train_loss", "train_loss"]
                   for r in rows.values()), rows
        assert logger.finalized_status == "success"
        for backend in BACKENDS:
            assert readback.config(backend, logger.monitor.run) == {}


def test_multiple_loggers_pickle(log_dir):
    """``test_multiple_loggers_pickle``: a Trainer with two loggers pickles; the copies log."""
    logger1 = CustomLogger(log_dir, "mpickle-1")
    logger2 = CustomLogger(log_dir, "mpickle-2")
    trainer = Trainer(logger=[logger1, logger2])
    trainer2 = pickle.loads(pickle.dumps(trainer))
    for logger in trainer2.loggers:
        logger.log_metrics({"acc": 1.0}, 0)
    for logger in (logger1, logger2):
        assert_stored(logger, [("acc", 0, 1.0)])


def test_adding_step_key(log_dir, tmp_path):
    """``test_adding_step_key``: a ``step`` key in ``log_dict`` becomes the step logged."""

    class CustomStepLogger(MonitorLogger):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.logged_step = 0

        def log_metrics(self, metrics, step):
            if "val_acc" in metrics:
                assert step == self.logged_step
            super().log_metrics(metrics, step)

    class CustomModel(BoringModel):
        def on_train_epoch_end(self):
            self.logger.logged_step += 1
            self.log_dict({"step": self.logger.logged_step,
                           "train_acc": self.logger.logged_step / 10})

        def on_validation_epoch_end(self):
            self.logger.logged_step += 1
            self.log_dict({"step": self.logger.logged_step,
                           "val_acc": self.logger.logged_step / 10})

    logger = make_logger(log_dir, "step-key", cls=CustomStepLogger)
    trainer = Trainer(max_epochs=3, logger=logger, default_root_dir=tmp_path,
                      limit_train_batches=0.1, limit_val_batches=0.1, num_sanity_val_steps=0,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(CustomModel())
    for rows in stored(logger).values():
        accs = [(t, s) for t, s, _ in rows if t.endswith("_acc")]
        assert sorted(accs) == sorted([("val_acc", 1), ("train_acc", 2), ("val_acc", 3),
                                       ("train_acc", 4), ("val_acc", 5), ("train_acc", 6)])


def test_np_sanitization(log_dir):
    """``test_np_sanitization``: numpy hyperparameters are stored as Lightning's
    ``_sanitize_params`` makes them."""
    logger = make_logger(log_dir, "np")
    np_params = {
        "np.bool_": np.bool_(1), "np.byte": np.byte(2), "np.intc": np.intc(3),
        "np.int_": np.int_(4), "np.longlong": np.longlong(5), "np.single": np.single(6.0),
        "np.double": np.double(8.9), "np.csingle": np.csingle(7 + 2j),
        "np.cdouble": np.cdouble(9 + 4j),
    }
    sanitized_params = {
        "np.bool_": True, "np.byte": 2, "np.intc": 3, "np.int_": 4, "np.longlong": 5,
        "np.single": 6.0, "np.double": 8.9, "np.csingle": "(7+2j)", "np.cdouble": "(9+4j)",
    }
    logger.log_hyperparams(Namespace(**np_params))
    logger.log_metrics({"x": 0.0}, step=0)
    logger.close()
    assert dict(logger.monitor.run.config) == sanitized_params
    for backend in BACKENDS:
        readback.assert_config(backend, logger.monitor.run, sanitized_params)


@pytest.mark.parametrize("logger", [True, False])
def test_log_hyperparams_being_called(log_dir, tmp_path, logger):
    """``test_log_hyperparams_being_called``: ``save_hyperparameters(logger=False)`` keeps them
    out of the run."""

    class TestModel(BoringModel):
        def __init__(self, param_one, param_two):
            super().__init__()
            self.save_hyperparameters(logger=logger)

    monitor_logger = make_logger(log_dir, f"hp-{logger}")
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=0.1,
                      limit_val_batches=0.1, num_sanity_val_steps=0, logger=monitor_logger,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(TestModel("pytorch", "lightning"))
    monitor_logger.log_metrics({"done": 1.0}, step=0)  # Trackio stores a config with a row
    monitor_logger.close()
    expected = {"param_one": "pytorch", "param_two": "lightning"} if logger else {}
    for backend in BACKENDS:
        assert readback.config(backend, monitor_logger.monitor.run) == expected, backend


def test_log_hyperparams_key_collision(log_dir, tmp_path):
    """``test_log_hyperparams_key_collision``: equal keys of module and datamodule merge,
    different values raise Lightning's error, as with the built-in loggers."""

    class TestModel(BoringModel):
        def __init__(self, hparams: dict[str, Any]) -> None:
            super().__init__()
            self.save_hyperparameters(hparams)

    class TestDataModule(BoringDataModule):
        def __init__(self, hparams: dict[str, Any]) -> None:
            super().__init__()
            self.save_hyperparameters(hparams)

    class _Test: ...

    def trainer(name: str) -> Trainer:
        return Trainer(default_root_dir=tmp_path, logger=make_logger(log_dir, name),
                       max_epochs=1, limit_train_batches=0.1, limit_val_batches=0.1,
                       num_sanity_val_steps=0, enable_checkpointing=False,
                       enable_progress_bar=False, enable_model_summary=False)

    same_params = {1: 1, "2": 2, "three": 3.0, "test": _Test(), "4": torch.tensor(4)}
    first = trainer("collide")
    first.fit(TestModel(same_params))
    first.fit(TestModel(same_params))  # the same hyperparameters again: no warning
    first.logger.log_metrics({"done": 1.0}, step=0)  # Trackio stores a config with a row

    diff_params = deepcopy(same_params)
    diff_params.update({1: 0, "test": _Test()})
    with pytest.raises(RuntimeError, match="Error while merging hparams"):
        trainer("collide-diff").fit(TestModel(same_params), TestDataModule(diff_params))

    tensor_params = deepcopy(same_params)
    tensor_params.update({"4": torch.tensor(3)})
    with pytest.raises(RuntimeError, match="Error while merging hparams"):
        trainer("collide-tensor").fit(TestModel(same_params), TestDataModule(tensor_params))
    first.logger.close()
    expected = {"1": 1, "2": 2, "three": 3.0, "4": 4}
    config = dict(first.logger.monitor.run.config)
    # 'test' (a local class) is the same text at both fits, when Lightning keeps it at all
    assert config.pop("test", None) in (None, f"<{__name__}.{_Test.__qualname__} object>")
    assert config == expected
    for backend in BACKENDS:
        readback.assert_config(backend, first.logger.monitor.run, expected)
