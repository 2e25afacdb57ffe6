"""Lightning: a real 2-epoch fit on CPU; Lightning's own CSVLogger is the oracle."""

from __future__ import annotations

import csv
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import readback
from _run import SCRIPTS, load, run_script

sys.path.insert(0, str(SCRIPTS))
from lightning_fit import BACKENDS, TinyRegressor, data, fit

from core_monitor.integrations.lightning import MonitorLogger


def csv_rows(path: Path) -> list[tuple[str, int, float]]:
    """``metrics.csv`` as ``(tag, step, value)``: every filled cell except the step column."""
    with path.open(newline="") as file:
        return [(tag, int(row["step"]), float(value))
                for row in csv.DictReader(file) for tag, value in row.items()
                if tag != "step" and value != ""]


# What users get (writer processes): this framework's one run in the users' default dispatch.
@pytest.mark.process
def test_every_backend_holds_exactly_the_steps_and_values_of_metrics_csv(log_dir):
    monitor_logger, csv_logger, trainer = fit(log_dir)
    oracle = csv_rows(Path(csv_logger.log_dir) / "metrics.csv")
    tags = {tag for tag, _, _ in oracle}
    assert {"train_loss", "val_loss", "epoch"} <= tags
    assert len([r for r in oracle if r[0] == "train_loss"]) == 12  # 6 batches x 2 epochs
    assert max(step for _, step, _ in oracle) == trainer.global_step - 1
    monitor = monitor_logger.monitor
    assert not monitor.closed  # finalize() at the end of fit flushed and kept the run open
    monitor_logger.close()
    for backend in BACKENDS:
        assert readback.runs(backend, monitor.run) == 1, backend
        readback.assert_rows(backend, monitor.run, oracle)


def test_fit_then_test_is_one_run_holding_what_metrics_csv_holds(log_dir):
    monitor_logger, csv_logger, trainer = fit(log_dir, name="fit-test", test=True)
    oracle = csv_rows(Path(csv_logger.log_dir) / "metrics.csv")  # CSVLogger: one file
    assert [step for tag, step, _ in oracle if tag == "test_loss"] == [trainer.global_step]
    monitor_logger.close()
    assert monitor_logger.version == "fit-test"
    for backend in BACKENDS:
        assert readback.runs(backend, monitor_logger.monitor.run) == 1, backend
        readback.assert_rows(backend, monitor_logger.monitor.run, oracle)


def test_hyperparameters_reach_every_backend(log_dir):
    monitor_logger, csv_logger, _ = fit(log_dir, name="hp")
    monitor_logger.close()
    expected = {"lr": 0.05, "hidden": 8, "optimizer.name": "sgd", "optimizer.momentum": 0.0}
    assert {k: monitor_logger.monitor.run.config[k] for k in expected} == expected
    hparams = (Path(csv_logger.log_dir) / "hparams.yaml").read_text()
    assert "lr: 0.05" in hparams and "hidden: 8" in hparams  # Lightning's own record agrees
    for backend in BACKENDS:
        readback.assert_config(backend, monitor_logger.monitor.run, expected)


def test_name_version_and_namespace_hyperparameters(log_dir):
    logger = MonitorLogger(["tensorboard"], project="lit", name="ns", log_dir=log_dir)
    assert (logger.name, logger.version, logger.monitor) == ("lit", "ns", None)
    logger.log_hyperparams(Namespace(lr=0.1, layers=[4, 4]))
    logger.log_metrics({"loss": 0.5, "epoch": 0}, step=7)
    logger.finalize("success")
    assert dict(logger.monitor.run.config) == {"lr": 0.1, "layers": [4, 4]}
    readback.assert_rows("tensorboard", logger.monitor.run, [  # hp_metric: default_hp_metric
        ("hp_metric", 0, -1.0), ("loss", 7, 0.5), ("epoch", 7, 0.0)])


def test_logging_after_finalize_goes_on_in_the_run_and_after_close_starts_a_second(log_dir):
    logger = MonitorLogger(["tensorboard"], project="lit", name="twice", log_dir=log_dir)
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    readback.assert_rows("tensorboard", logger.monitor.run, [("loss", 0, 1.0)])  # flushed
    logger.log_metrics({"loss": 0.5}, step=1)  # the next stage: the same run
    logger.close()
    first = logger.monitor.run
    with pytest.warns(UserWarning, match="new run 'twice-2'"):
        logger.log_metrics({"loss": 2.0}, step=0)
    logger.close()
    assert logger.version == "twice-2"
    readback.assert_rows("tensorboard", first, [("loss", 0, 1.0), ("loss", 1, 0.5)])
    readback.assert_rows("tensorboard", logger.monitor.run, [("loss", 0, 2.0)])


def test_two_loggers_with_default_names_are_two_runs_with_two_checkpoint_folders(
        log_dir, tmp_path):
    import lightning as L
    from lightning_fit import TinyRegressor, data

    loggers = [MonitorLogger(["tensorboard"], project="lit", log_dir=log_dir) for _ in range(2)]
    assert loggers[0].version != loggers[1].version  # even when made in the same second
    for logger in loggers:
        trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=logger,
                            log_every_n_steps=1, default_root_dir=str(tmp_path / "root"),
                            enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(TinyRegressor(), data(16, 1))
        logger.close()
    # beside the TensorBoard run, in save_dir (log_dir), as with TensorBoardLogger
    folders = sorted(p.parent.parent.name for p in log_dir.rglob("*.ckpt"))
    assert folders == sorted(logger.version for logger in loggers)
    for logger in loggers:
        assert [t for t, _, _ in readback.rows("tensorboard", logger.monitor.run)
                if t == "train_loss"] == ["train_loss"] * 2


def test_a_second_logger_starting_closes_the_first_waiting_between_stages(log_dir):
    first = MonitorLogger(["trackio"], project="lit", name="trial-1", log_dir=log_dir / "a")
    first.log_metrics({"loss": 1.0}, step=0)
    first.finalize("success")
    assert not first.monitor.closed
    # Trackio keeps one folder per process: an open run in another log_dir would refuse it.
    second = MonitorLogger(["trackio"], project="lit", name="trial-2", log_dir=log_dir / "b")
    second.log_metrics({"loss": 2.0}, step=0)
    assert first.monitor.closed and not second.monitor.closed
    second.close()
    readback.assert_rows("trackio", first.monitor.run, [("loss", 0, 1.0)])
    readback.assert_rows("trackio", second.monitor.run, [("loss", 0, 2.0)])


def test_ddp_under_torchrun_writes_one_run_per_backend_from_rank_0(log_dir, tmp_path):
    out = tmp_path / "out.json"
    run_script("lightning_fit.py", log_dir, out, nproc=2)
    result = load(out)
    ranks = [load(Path(f"{out}.rank{k}.json")) for k in (0, 1)]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0]["backends"] == BACKENDS and ranks[1]["backends"] == []
    run = readback.RunInfo(project="lit", name="ddp", log_dir=Path(result["run"]["log_dir"]))
    oracle = csv_rows(Path(result["csv"]))
    assert len([r for r in oracle if r[0] == "train_loss"]) == 6  # 48 samples / 2 ranks / 8
    for backend in BACKENDS:
        assert readback.runs(backend, run) == 1, backend
        assert readback.runs(backend, readback.RunInfo("lit", "ddp", log_dir=run.log_dir,
                                                       rank=1)) == 0
        readback.assert_rows(backend, run, oracle)


def test_fit_from_ckpt_path_resumes_the_same_run(log_dir, tmp_path):
    """One epoch, a checkpoint, the run closed (as a process ending would close it); then
    fit(ckpt_path=...) to epoch 2 with the same logger: one run in every backend, steps 0..11."""
    import lightning as L
    from lightning_fit import TinyRegressor, data

    from wandb_monitor import find_run_dirs
    from wandb_monitor._compat import read_records

    def trainer(epochs: int) -> L.Trainer:
        return L.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=logger,
                         log_every_n_steps=1, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)

    torch_seed = __import__("torch").manual_seed
    torch_seed(0)
    logger = MonitorLogger(BACKENDS, project="lit", name="ckpt", log_dir=log_dir)
    first = trainer(1)
    first.fit(TinyRegressor(), data(48, 0), data(16, 1))
    first.save_checkpoint(tmp_path / "epoch1.ckpt")
    logger.close()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "starts a new run" warning
        trainer(2).fit(TinyRegressor(), data(48, 0), data(16, 1),
                       ckpt_path=str(tmp_path / "epoch1.ckpt"))
    logger.close()
    run = logger.monitor.run
    assert (logger.version, run.resumed, run.last_step) == ("ckpt", True, 5)
    for backend in BACKENDS:
        steps = sorted(s for t, s, _ in readback.rows(backend, run) if t == "train_loss")
        assert steps == list(range(12)), backend
    assert readback.runs("trackio", run) == readback.runs("tensorboard", run) == 1
    ids = {next(r.run.run_id for r in read_records(f) if r.HasField("run"))
           for f in find_run_dirs(log_dir, project="lit", name="ckpt")}
    assert len(ids) == 1


class _FailsAtBatch3(TinyRegressor):
    def training_step(self, batch, batch_idx):
        if batch_idx == 3:
            raise RuntimeError("loss is NaN at batch 3")
        return super().training_step(batch, batch_idx)


def test_a_fit_that_raises_ends_the_run_as_crashed_as_mlflowlogger_sets_failed(log_dir,
                                                                                 tmp_path):
    """Lightning calls ``finalize("failed")`` from inside its ``except`` block; the run ends
    crashed, naming the exception, where ``MLFlowLogger`` (beside it, Lightning's own record)
    sets its run ``FAILED``; every row logged before the exception is stored."""
    import lightning as L
    from lightning.pytorch.loggers import MLFlowLogger

    import csv_monitor
    import mlflow_monitor

    monitor_logger = MonitorLogger(["csv", "mlflow"], project="lit", name="fails",
                                   log_dir=log_dir, default_hp_metric=False)
    theirs = MLFlowLogger(experiment_name="lit", run_name="theirs",
                          tracking_uri=f"sqlite:///{tmp_path / 'theirs.db'}")
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=[monitor_logger, theirs],
                        log_every_n_steps=1, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(log_dir / "root"))
    with pytest.raises(RuntimeError, match="loss is NaN"):
        trainer.fit(_FailsAtBatch3(lr=0.05, hidden=8, optimizer={"name": "sgd"}), data(48, 1))
    assert theirs.experiment.get_run(theirs.run_id).info.status == "FAILED"
    run = monitor_logger.monitor.run
    assert monitor_logger.monitor.closed
    ours = mlflow_monitor.local_store_uri(log_dir)  # MLFlowLogger set the global one
    assert "raised RuntimeError: loss is NaN at batch 3" in csv_monitor.read_crash(run)
    assert "raised RuntimeError: loss is NaN at batch 3" in mlflow_monitor.reader.read_crash(
        run, tracking_uri=ours)
    assert mlflow_monitor.find_run(run, tracking_uri=ours).info.status == "FAILED"
    assert [s for t, s, _ in csv_monitor.read_rows(run) if t == "train_loss"] == [0, 1, 2]
