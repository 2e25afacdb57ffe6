"""``log_hyperparams(params, metrics)``, ``hp_metric`` and ``trainer.log_dir``, side by side with
``TensorBoardLogger``.

Restated from Lightning 2.6's ``tests/tests_pytorch/loggers/test_tensorboard.py`` (each test
names the one it restates): the same body runs against ``TensorBoardLogger`` and against
``MonitorLogger`` with the three local backends, and what ``TensorBoardLogger`` wrote (its
event files, read with the TensorBoard backend's reader at its folder) is the oracle for what
every backend stores. Not restated: ``test_tensorboard_log_omegaconf_hparams_and_metrics``
(omegaconf is not a test dependency).
"""

from __future__ import annotations

import os
from argparse import Namespace

import numpy as np
import pytest
import readback
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import TensorBoardLogger

from core_monitor import ConfigError, RunInfo
from core_monitor.integrations.lightning import MonitorLogger
from tensorboard_monitor import read_config, read_rows, run_dir

BACKENDS = list(readback.BACKENDS)


def hparams() -> dict:
    """The hyperparameters of Lightning's two tests (one tensor and array for both loggers)."""
    return {
        "float": 0.3,
        "int": 1,
        "string": "abc",
        "bool": True,
        "dict": {"a": {"b": "c"}},
        "list": [1, 2, 3],
        "namespace": Namespace(foo=Namespace(bar="buzz")),
        "layer": torch.nn.BatchNorm1d,
        "tensor": torch.arange(8.0).reshape(2, 2, 2),  # Lightning's torch.empty: any values
        "array": np.arange(8.0).reshape(2, 2, 2),
    }


def tensorboard_logger_stored(logger: TensorBoardLogger) -> tuple[list, dict]:
    """What ``TensorBoardLogger`` wrote: its scalars and its HParams."""
    logger.finalize("success")
    folder = logger.log_dir
    run = RunInfo("unused", "unused")
    return sorted(read_rows(run, run_dir=folder)), read_config(run, run_dir=folder)


def assert_like_tensorboard_logger(logger: MonitorLogger, oracle: tuple[list, dict]) -> None:
    """Every backend holds ``TensorBoardLogger``'s scalars, and the tensor and array
    hyperparameters as it stores them (``str(value)``)."""
    rows, config = oracle
    logger.close()
    run = logger.monitor.run
    for backend in BACKENDS:
        readback.assert_rows(backend, run, rows)
        readback.assert_config(backend, run, {k: config[k] for k in ("tensor", "array")})
    assert config["tensor"] == str(hparams()["tensor"])


def test_tensorboard_log_hyperparams(tmp_path, log_dir):
    """``test_tensorboard_log_hyperparams``: ``default_hp_metric`` (on by default) writes
    ``hp_metric = -1`` at step 0, beside the HParams."""
    oracle_logger = TensorBoardLogger(tmp_path / "tb")
    oracle_logger.log_hyperparams(hparams())
    oracle = tensorboard_logger_stored(oracle_logger)
    assert oracle[0] == [("hp_metric", 0, -1.0)]

    logger = MonitorLogger(BACKENDS, project="hp", name="default", log_dir=log_dir)
    logger.log_hyperparams(hparams())
    logger.log_metrics({"loss": 0.5}, step=3)
    logger.log_hyperparams(hparams())  # a second stage: hp_metric is not written again
    oracle = (sorted([*oracle[0], ("loss", 3, 0.5)]), oracle[1])
    assert_like_tensorboard_logger(logger, oracle)
    # TensorBoard's HParams tab: the hyperparameters and hp_metric in one run folder
    folder = run_dir("hp", "default", log_dir)
    assert read_config(logger.monitor.run)["int"] == 1.0
    assert ("hp_metric", 0, -1.0) in read_rows(logger.monitor.run, run_dir=folder)


def test_tensorboard_log_hparams_and_metrics(tmp_path, log_dir):
    """``test_tensorboard_log_hparams_and_metrics``: ``metrics`` given are the scalars (at step
    0), no ``hp_metric``."""
    metrics = {"abc": torch.tensor([0.54])}
    oracle_logger = TensorBoardLogger(tmp_path / "tb", default_hp_metric=False)
    oracle_logger.log_hyperparams(hparams(), metrics)
    oracle = tensorboard_logger_stored(oracle_logger)
    assert [(tag, step) for tag, step, _ in oracle[0]] == [("abc", 0)]

    logger = MonitorLogger(BACKENDS, project="hp", name="metrics", log_dir=log_dir,
                           default_hp_metric=False)
    logger.log_hyperparams(hparams(), metrics)
    assert_like_tensorboard_logger(logger, oracle)


def test_a_number_as_metrics_is_hp_metric_at_the_step_given(tmp_path, log_dir):
    """``TensorBoardLogger.log_hyperparams(params, 0.9, step=5)``: ``{"hp_metric": 0.9}`` at 5."""
    oracle_logger = TensorBoardLogger(tmp_path / "tb")
    oracle_logger.log_hyperparams({"lr": 0.1}, 0.9, step=5)
    rows, _ = tensorboard_logger_stored(oracle_logger)
    assert [(tag, step) for tag, step, _ in rows] == [("hp_metric", 5)]
    logger = MonitorLogger(BACKENDS, project="hp", name="number", log_dir=log_dir)
    logger.log_hyperparams({"lr": 0.1}, 0.9, step=5)
    logger.close()
    for backend in BACKENDS:  # 0.9 exactly (TensorBoard: as float32, as in the oracle's)
        readback.assert_rows(backend, logger.monitor.run, [("hp_metric", 5, 0.9)])


def test_tensorboard_hparams_reload(tmp_path):
    """``test_tensorboard_hparams_reload``: ``trainer.log_dir`` is the logger's folder before
    and after ``fit`` (here ``save_dir``, Lightning's choice for loggers other than its
    TensorBoard and CSV ones): a folder holding the run's files, its checkpoint beside the
    TensorBoard run, and the hyperparameters in every backend (instead of ``hparams.yaml``)."""

    class CustomModel(BoringModel):
        def __init__(self, b1=0.5, b2=0.999):
            super().__init__()
            self.save_hyperparameters()

    logger = MonitorLogger(BACKENDS, project="reload", name="run")  # no log_dir given
    trainer = Trainer(max_steps=1, default_root_dir=tmp_path, logger=logger,
                      enable_progress_bar=False, enable_model_summary=False)
    model = CustomModel()
    assert trainer.log_dir == logger.save_dir == str(tmp_path)  # default_root_dir
    trainer.fit(model)
    assert trainer.log_dir == logger.save_dir == str(tmp_path)
    logger.close()
    run = logger.monitor.run
    assert run.log_dir == tmp_path
    folder = trainer.log_dir
    assert os.path.isdir(folder)
    for backend in BACKENDS:  # the run's local files are under trainer.log_dir
        assert readback.runs(backend, run) == 1, backend
        readback.assert_config(backend, run, {"b1": 0.5, "b2": 0.999})
        assert ("hp_metric", 0, -1.0) in readback.rows(backend, run)
    assert (tmp_path / "reload" / "run").is_dir()  # TensorBoard's run folder
    # verify artifacts
    assert len(os.listdir(os.path.join(folder, "reload", "run", "checkpoints"))) == 1


def test_save_dir_is_log_dir(tmp_path, log_dir):
    """``save_dir=`` is Lightning's name for ``log_dir``: either gives the folder."""
    assert MonitorLogger(["tensorboard"], save_dir=log_dir).save_dir == str(log_dir)
    assert MonitorLogger(["tensorboard"], log_dir=log_dir).save_dir == str(log_dir)
    assert MonitorLogger(["tensorboard"]).save_dir is None  # no Trainer running
    with pytest.raises(ConfigError, match=r"save_dir=.* and log_dir=.*give one of them"):
        MonitorLogger(["tensorboard"], save_dir=log_dir, log_dir=tmp_path)
    with pytest.raises(ConfigError, match="default_hp_metric='no' must be True or False"):
        MonitorLogger(["tensorboard"], default_hp_metric="no")
    logger = MonitorLogger(["tensorboard"], project="p", name="n", save_dir=log_dir)
    logger.log_metrics({"x": 1.0}, step=0)
    logger.close()
    assert (log_dir / "p" / "n").is_dir()
