"""Lightning's own ``tests/tests_pytorch/loggers/test_csv.py``, restated against
``MonitorLogger(["csv"])``, with ``CSVLogger`` as the oracle in the same test wherever both can
write: the same calls give the same ``metrics.csv`` bytes. Where the two differ on purpose, the
test asserts the difference as ``docs/frameworks/lightning.md`` documents it."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch
import yaml
from _run import SCRIPTS
from lightning.pytorch.loggers import CSVLogger

sys.path.insert(0, str(SCRIPTS))
from lightning_fit import fit

from core_monitor.integrations.lightning import MonitorLogger

METRICS = {"float": 0.3, "int": 1, "FloatTensor": torch.tensor(0.1),
           "IntTensor": torch.tensor(1)}


def ours(save_dir: Path, name: str = "exp", version: str = "v0", **kwargs) -> MonitorLogger:
    """``MonitorLogger(["csv"])`` writing where ``CSVLogger(save_dir, name, version)`` does."""
    return MonitorLogger(["csv"], save_dir=save_dir, project=name, name=version,
                         default_hp_metric=False, **kwargs)


def table(logger: MonitorLogger | CSVLogger) -> bytes:
    folder = Path(logger.log_dir) if isinstance(logger, CSVLogger) else (
        Path(logger.save_dir) / logger.name / logger.version)
    return (folder / "metrics.csv").read_bytes()


def test_a_fit_writes_csvloggers_metrics_csv_byte_for_byte(log_dir):
    """A real 2-epoch fit with both loggers: the same file, Lightning's ``epoch`` column as
    integers (``int(row["epoch"])`` works), float metrics as their repr."""
    monitor_logger, csv_logger, _ = fit(log_dir, backends=["csv"])
    monitor_logger.close()
    theirs = table(csv_logger)
    assert table(monitor_logger) == theirs
    rows = list(csv.DictReader(theirs.decode().splitlines()))
    assert sorted({int(row["epoch"]) for row in rows}) == [0, 1]


@pytest.mark.parametrize("step_idx", [10, None])
def test_log_metrics(tmp_path, step_idx):
    """Lightning's ``test_log_metrics``: one row and a header naming every key. Python ints
    and integer tensors are floats here (``1.0`` where ``CSVLogger`` writes ``1``): values
    reach backends as floats; only ``epoch`` (and the csv option ``integer_tags``) are
    written as integers (documented)."""
    theirs = CSVLogger(tmp_path / "theirs", name="exp", version="v0")
    logger = ours(tmp_path / "ours")
    for each in (theirs, logger):
        each.log_metrics(METRICS, step_idx)
        each.save()
    lines = table(logger).decode().splitlines()
    assert len(lines) == 2
    assert all(n in lines[0] for n in METRICS)
    assert table(theirs).split(b"\r\n")[1].split(b",")[1::2] == [b"1", b"1"]  # int, IntTensor
    assert table(logger) == table(theirs).replace(b",1,0.3,1,", b",1.0,0.3,1.0,")
    logger.close()


def test_named_version_and_log_hyperparams_without_an_argument(tmp_path):
    """Lightning's ``test_named_version``: a string version is the run's folder, the only one
    under the name's folder. ``log_hyperparams()`` takes no argument, as ``CSVLogger``'s. The
    run (so its folder) starts at the first metric or at the end of a stage (``finalize``),
    not at ``save()`` (documented)."""
    version = "2020-02-05-162402"
    logger = ours(tmp_path, version=version)
    logger.log_hyperparams()
    logger.log_hyperparams({"a": 1, "b": 2})
    logger.save()
    assert not (tmp_path / "exp").exists()
    logger.finalize("success")
    assert logger.version == version
    assert [p.name for p in (tmp_path / "exp").iterdir()] == [version]
    assert yaml.safe_load((tmp_path / "exp" / version / "hparams.yaml").read_text()) == {
        "a": 1, "b": 2}
    logger.close()


def test_log_hyperparams_nested_values_are_flattened(tmp_path):
    """Lightning's ``test_log_hyperparams``: every key in ``hparams.yaml``. A nested dict is
    flattened with ``.`` and a class stored as its ``str`` (documented: one config shape for
    every backend), where ``CSVLogger`` keeps the nesting and pickles the class as a YAML
    tag."""
    hparams = {"float": 0.3, "int": 1, "string": "abc", "bool": True, "dict": {"a": {"b": "c"}},
               "list": [1, 2, 3], "layer": torch.nn.BatchNorm1d}
    logger = ours(tmp_path)
    logger.log_hyperparams(hparams)
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.save()
    params = yaml.safe_load((tmp_path / "exp" / "v0" / "hparams.yaml").read_text())
    assert {k: params[k] for k in ("float", "int", "string", "bool", "list")} == {
        "float": 0.3, "int": 1, "string": "abc", "bool": True, "list": [1, 2, 3]}
    assert params["dict.a.b"] == "c"
    assert "BatchNorm1d" in params["layer"]
    logger.close()


def test_a_folder_left_by_csvlogger_is_replaced_with_its_warning(tmp_path):
    """Lightning's ``test_manual_versioning_file_exists``: a run folder that is not empty gets
    a warning, and its ``metrics.csv`` is deleted, so the rows of the earlier run (here,
    ``CSVLogger``'s) never mix with the new ones."""
    theirs = CSVLogger(tmp_path, name="exp", version="v0")
    theirs.log_metrics({"old": 1.0, "epoch": 0}, step=5)
    theirs.save()
    previous = Path(theirs.log_dir) / "metrics.csv"
    assert previous.exists()
    logger = ours(tmp_path, dispatch="sync")
    with pytest.warns(UserWarning,
                      match=r"(?i)experiment logs directory .* exists and is not empty"):
        _ = logger.experiment
    assert not previous.exists()
    logger.log_metrics({"new": 2.0, "epoch": 0}, step=0)
    logger.save()
    assert previous.read_bytes() == b"epoch,new,step\r\n0,2.0,0\r\n"
    logger.close()


def test_append_metrics_file_with_resume_allow(tmp_path):
    """Lightning's ``test_append_metrics_file`` (where Lightning mocks its folder check away):
    a second logger of the same version appends to the file, with ``resume="allow"``."""
    first = ours(tmp_path)
    first.log_metrics({"a": 1, "b": 2})
    first.log_metrics({"a": 3, "b": 4})
    first.close()
    second = ours(tmp_path, resume="allow")
    second.log_metrics({"a": 100, "b": 200})
    second.save()
    lines = table(second).decode().splitlines()
    assert len(lines) == 4  # 1 header + 3 lines of metrics
    assert lines[-1] == "100.0,200.0,2"
    second.close()


def test_append_columns(tmp_path):
    """Lightning's ``test_append_columns``: a new key rewrites the file with the wider header,
    a key that disappears keeps its column; byte for byte with ``CSVLogger``'s file."""
    theirs = CSVLogger(tmp_path / "theirs", name="exp", version="v0")
    logger = ours(tmp_path / "ours")
    for step, metrics in enumerate(({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0, "c": 3.0},
                                     {"a": 1.0, "c": 3.0})):
        for each in (theirs, logger):
            each.log_metrics(metrics, step=step)
            each.save()
        assert table(logger) == table(theirs)
    assert set(table(logger).decode().splitlines()[0].split(",")) == {"step", "a", "b", "c"}
    logger.close()


def test_csv_logger_remotefs():
    """Lightning's ``test_csv_logger_remotefs``: ``save_dir`` an fsspec URL (``memory://``);
    the file is written through fsspec, the same bytes as ``CSVLogger``'s there, and nothing
    in a local folder named after the URL."""
    import fsspec

    url = "memory://test_fit_csv_logger_remotefs"
    fs, _ = fsspec.core.url_to_fs(url)
    theirs = CSVLogger(save_dir=f"{url}/theirs", name="exp", version="v0")
    logger = ours(f"{url}/ours")
    assert logger.save_dir == f"{url}/ours"
    for each in (theirs.experiment, logger):
        each.log_metrics({"loss": 0.1, "epoch": 0})
        each.save()
    metrics_file = f"{url}/ours/exp/v0/metrics.csv"
    assert fs.isfile(metrics_file)
    assert fs.cat_file(metrics_file) == fs.cat_file(f"{theirs.log_dir}/metrics.csv")
    assert not Path("memory:").exists()
    logger.close()
    fs.rm("/test_fit_csv_logger_remotefs", recursive=True)


def test_tensorboard_beside_csv_in_a_remote_save_dir():
    """``TensorBoardLogger`` writes to an fsspec URL too: so does the tensorboard backend,
    read back from there with TensorBoard's own ``EventAccumulator``."""
    import fsspec

    from tensorboard_monitor import read_rows

    url = "memory://test_tensorboard_remote"
    logger = MonitorLogger(["csv", "tensorboard"], save_dir=url, project="exp", name="v0")
    logger.log_metrics({"loss": 0.5}, step=3)
    logger.close()
    run = logger.monitor.run
    assert read_rows(run, run_dir=f"{url}/exp/v0") == [("loss", 3, 0.5)]
    fs, _ = fsspec.core.url_to_fs(url)
    assert fs.isfile(f"{url}/exp/v0/metrics.csv")
    assert not Path("memory:").exists()
    fs.rm("/test_tensorboard_remote", recursive=True)


@pytest.mark.parametrize("backends", [["csv", "wandb"], ["tensorboard", "trackio"]])
def test_a_remote_save_dir_names_the_backend_that_cannot_write_there(backends):
    from core_monitor import ConfigError

    with pytest.raises(ConfigError, match=rf"backend '{backends[-1]}' cannot write to "
                                          r"save_dir='s3://bucket/runs' \(a URL\).*local"):
        MonitorLogger(backends, save_dir="s3://bucket/runs")
