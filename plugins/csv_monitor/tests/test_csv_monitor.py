"""The ``csv`` backend: the contract kit in both layouts, and each layout against the files of
the logger it copies (Lightning's ``CSVLogger``, DeepSpeed's ``csvMonitor``)."""

from __future__ import annotations

import csv
import math
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from core_monitor import ConfigError, Monitor, RunInfo
from core_monitor.testing import MonitorContract
from csv_monitor import CsvMonitor, read_config, read_rows, read_rows_in
from csv_monitor.deepspeed_files import column, file_name
from csv_monitor.reader import read_crash
from csv_monitor.storage import run_dir, status_of


class TestCsvLightningContract(MonitorContract):
    """Every check of the kit, in the default layout (Lightning's ``metrics.csv``)."""

    backend_class = CsvMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_crash = staticmethod(read_crash)


class TestCsvDeepSpeedContract(MonitorContract):
    """Every check of the kit, in DeepSpeed's one-file-per-tag layout."""

    backend_class = CsvMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_crash = staticmethod(read_crash)
    backend_options = {"layout": "deepspeed"}  # noqa: RUF012 (the kit reads it as given)


def test_the_entry_points_name_the_backend_and_its_reader():
    (backend,) = entry_points(group="experiment_monitors", name="csv")
    assert backend.load() is CsvMonitor
    (reader,) = entry_points(group="experiment_monitor_readers", name="csv")
    assert reader.value == "csv_monitor.reader"


def _lightning_metrics(calls: list[tuple[dict[str, float], int]], folder: Path) -> bytes:
    """What Lightning's own writer makes of ``calls`` (its ``log_metrics``/``save`` logic),
    restated from ``lightning.fabric.loggers.csv_logs._ExperimentWriter``: sorted header,
    rewritten when a save brings a new column, ``csv.DictWriter`` rows."""
    path = folder / "metrics.csv"
    keys: list[str] = []
    for batch in (calls[:2], calls[2:]):  # two saves, the second bringing a new column
        rows = [{**metrics, "step": step} for metrics, step in batch]
        new = set().union(*rows) - set(keys)
        keys = sorted([*keys, *new])
        exists = path.exists()
        if new and exists:
            with path.open(newline="") as file:
                old = list(csv.DictReader(file))
            with path.open("w", newline="") as file:
                writer = csv.DictWriter(file, fieldnames=keys)
                writer.writeheader()
                writer.writerows(old)
        with path.open("a" if exists else "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=keys)
            if not exists:
                writer.writeheader()
            writer.writerows(rows)
    return path.read_bytes()


CALLS = [({"train/loss": 0.5, "lr": 0.001}, 0), ({"train/loss": 0.25}, 5),
         ({"train/loss": 0.125, "val/acc": 0.75}, 10), ({"lr": 1e-05}, 15)]


def test_lightning_layout_matches_the_csv_logger_byte_for_byte(tmp_path):
    """Against Lightning's ``CSVLogger`` itself where Lightning is installed (the
    ``frameworks`` session), else against its writer's logic restated above."""
    ours = tmp_path / "ours"
    with Monitor(["csv"], project="proj", name="v0", log_dir=ours, dispatch="sync",
                 config={"lr": 0.001, "layers": 3, "name": "mlp"}) as monitor:
        for metrics, step in CALLS[:2]:
            monitor.log(metrics, step=step)
        monitor.flush()
        for metrics, step in CALLS[2:]:
            monitor.log(metrics, step=step)
    produced = (run_dir(monitor.run) / "metrics.csv").read_bytes()
    try:
        from lightning.pytorch.loggers import CSVLogger
    except ImportError:
        (tmp_path / "theirs").mkdir()
        expected = _lightning_metrics(CALLS, tmp_path / "theirs")
        hparams = {"lr": 0.001, "layers": 3, "name": "mlp"}
    else:  # with lightning installed (the dev venv may have it; nox -s frameworks does)
        logger = CSVLogger(tmp_path / "theirs", name="proj", version="v0")
        logger.log_hyperparams({"lr": 0.001, "layers": 3, "name": "mlp"})
        for metrics, step in CALLS[:2]:
            logger.log_metrics(metrics, step=step)
        logger.save()
        for metrics, step in CALLS[2:]:
            logger.log_metrics(metrics, step=step)
        logger.finalize("success")
        expected = (Path(logger.log_dir) / "metrics.csv").read_bytes()
        hparams = yaml.safe_load((Path(logger.log_dir) / "hparams.yaml").read_text())
    assert produced == expected
    assert produced.splitlines()[0] == b"lr,step,train/loss,val/acc"  # csv's \r\n ends
    assert yaml.safe_load((run_dir(monitor.run) / "hparams.yaml").read_text()) == hparams
    assert status_of(run_dir(monitor.run)).read() == "finished"


def _deepspeed_files(events: list[tuple[str, float, int]], folder: Path) -> None:
    """DeepSpeed's ``csvMonitor.write_events`` (``deepspeed/monitor/csv_monitor.py``),
    restated: one file per tag, header once per file, ``open(..., "a+")``."""
    written: list[str] = []
    for tag, value, step in events:
        header = tag.split("/")[-1]
        filename = tag.replace("/", "_").replace(" ", "_")
        with open(folder / f"{filename}.csv", "a+") as file:
            writer = csv.writer(file)
            if filename not in written:
                written.append(filename)
                writer.writerow(["step", header])
            writer.writerow([step, value])


def test_deepspeed_layout_matches_csv_monitor_files(tmp_path):
    events = [("Train/Samples/train_loss", 2.5, 8), ("Train/Samples/lr", 0.0001, 8),
              ("Train/Samples/train_loss", 2.25, 16), ("Eval acc", 0.5, 16)]
    with Monitor(["csv"], project="out", name="job", log_dir=tmp_path / "ours",
                 dispatch="sync", csv={"layout": "deepspeed"}) as monitor:
        monitor.write_events(events)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    _deepspeed_files(events, theirs)
    ours = run_dir(monitor.run)
    for name in ("Train_Samples_train_loss.csv", "Train_Samples_lr.csv", "Eval_acc.csv"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    assert (ours / "Train_Samples_lr.csv").read_text().splitlines()[0] == "step,lr"
    assert file_name("a b/c") == "a_b_c.csv" and column("a/b/c") == "c"
    assert read_rows(monitor.run) == [
        ("Train/Samples/train_loss", 8, 2.5), ("Train/Samples/train_loss", 16, 2.25),
        ("Train/Samples/lr", 8, 0.0001), ("Eval acc", 16, 0.5)]


def test_run_dir_puts_the_files_in_that_folder_exactly(tmp_path):
    """DeepSpeed's ``<output_path>/<job_name>`` (the DeepSpeed integration's ``csv_monitor``);
    a rank above 0 in ``rank<k>`` under it; resume finds the run there."""
    folder = tmp_path / "out" / "job"
    options = {"layout": "deepspeed", "run_dir": str(folder)}
    with Monitor(["csv"], project="p", name="n", log_dir=tmp_path / "logs", dispatch="sync",
                 csv=options) as monitor:
        monitor.log({"a/b": 1.5}, step=3)
    assert sorted(p.name for p in folder.iterdir()) == ["a_b.csv", "deepspeed_config.csv",
                                                        "status", "tags.json"]
    assert not (tmp_path / "logs").exists()
    with Monitor(["csv"], project="p", name="n", dispatch="sync", resume="allow",
                 csv=options) as monitor:
        monitor.log({"a/b": 2.5}, step=4)
    assert monitor.last_steps == {"csv": 3}
    assert read_rows_in(folder) == [("a/b", 3, 1.5), ("a/b", 4, 2.5)]
    ranked = CsvMonitor(RunInfo(project="p", name="n", rank=1), run_dir=folder)
    ranked.monitor_close()
    assert status_of(folder / "rank1").read() == "finished"
    with pytest.raises(ConfigError, match="run_dir"):
        Monitor(["csv"], project="p", name="n", dispatch="sync", csv={"run_dir": ""})


@pytest.mark.parametrize("layout", ["lightning", "deepspeed"])
def test_resume_appends_to_the_same_files(tmp_path, layout):
    options = {"layout": layout}
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, csv=options,
                 dispatch="sync", config={"a": 1}) as first:
        first.log({"loss": 1.0}, step=1)
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, csv=options,
                 dispatch="sync", resume="allow", config={"b": 2}) as second:
        assert second.last_steps == {"csv": 1}
        second.log({"loss": 0.5}, step=2)
    assert read_rows(second.run) == [("loss", 1, 1.0), ("loss", 2, 0.5)]
    assert read_config(second.run) == {"a": 1, "b": 2}


def test_a_second_run_of_the_same_name_never_deletes_the_first(tmp_path):
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync") as first:
        first.log({"loss": 1.0}, step=1)
    with pytest.raises(ConfigError, match="resume='allow' to append"):
        Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                strict=True)
    assert read_rows(first.run) == [("loss", 1, 1.0)]


def test_the_other_layouts_run_is_refused_naming_the_layout(tmp_path):
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync") as first:
        first.log({"loss": 1.0}, step=1)
    with pytest.raises(ConfigError, match="layout='lightning'"):
        Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                strict=True, resume="allow", csv={"layout": "deepspeed"})


def test_a_bad_layout_is_a_config_error_from_the_core(tmp_path):
    with pytest.raises(ConfigError, match=r"layout='wide'.*one of 'lightning', 'deepspeed'"):
        Monitor(["csv"], project="p", log_dir=tmp_path, csv={"layout": "wide"})


def test_a_crash_is_marked_in_the_status_file_after_the_rows(tmp_path):
    backend = CsvMonitor(RunInfo(project="p", name="c", log_dir=tmp_path))
    from core_monitor import Event

    backend.monitor_write([Event("loss", 0.5, 3, 0.0)])
    backend.monitor_flush()
    backend.monitor_crash("the training process (pid 1) ended without closing the monitor")
    backend.monitor_close()
    folder = run_dir(RunInfo(project="p", name="c", log_dir=tmp_path))
    assert status_of(folder).read() == ("crashed: the training process (pid 1) ended without "
                                   "closing the monitor")
    assert read_rows(RunInfo(project="p", name="c", log_dir=tmp_path)) == [("loss", 3, 0.5)]


def test_media_are_skipped_and_reported_once(tmp_path):
    from core_monitor.media import Text

    with pytest.warns(Warning, match="csv") as caught, Monitor(
        ["csv"], project="p", name="m", log_dir=tmp_path, dispatch="sync"
    ) as monitor:
        monitor.log({"note": Text("a"), "loss": 0.5}, step=1)
        monitor.log({"note": Text("b")}, step=2)
    assert len([w for w in caught if "csv" in str(w.message)]) == 1
    assert read_rows(monitor.run) == [("loss", 1, 0.5)]


def test_values_round_trip_exactly(tmp_path):
    values = [0.1, 1 / 3, 1e-300, -0.0, math.inf, -math.inf]
    with Monitor(["csv"], project="p", name="v", log_dir=tmp_path, dispatch="sync") as monitor:
        for step, value in enumerate(values):
            monitor.log({"x": value}, step=step)
    assert [v for _, _, v in read_rows(monitor.run)] == values
