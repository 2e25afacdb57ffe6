"""The ``csv`` backend: the contract kit in both layouts, and each layout against the files of
the logger it copies (Lightning's ``CSVLogger``, DeepSpeed's ``csvMonitor``)."""

from __future__ import annotations

import csv
import math
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

import csv_monitor
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
    # the backend wrote nothing under log_dir: only the core's run journal is there
    assert [p.name for p in (tmp_path / "logs").iterdir()] == [".journal"]
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


def test_a_second_run_of_the_same_name_replaces_the_first_with_a_warning_as_csvlogger(tmp_path):
    """Lightning's ``CSVLogger`` with a ``version`` already used warns and deletes the folder's
    ``metrics.csv``: the rows of the two runs never mix."""
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                 config={"a": 1}) as first:
        first.log({"loss": 1.0, "old": 3.0}, step=1)
    with pytest.warns(UserWarning, match=r"exists and is not empty.*metrics.csv is deleted.*"
                                         r"resume='allow'"):
        second = Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                         strict=True, config={"b": 2})
    with second:
        second.log({"loss": 0.5}, step=0)
    assert read_rows(second.run) == [("loss", 0, 0.5)]
    assert read_config(second.run) == {"b": 2}
    assert (tmp_path / "p" / "r" / "metrics.csv").read_bytes() == b"loss,step\r\n0.5,0\r\n"


def test_a_second_deepspeed_layout_run_of_the_same_name_replaces_the_first(tmp_path):
    """DeepSpeed's ``csv_monitor`` appends to each tag's file (a second header row among the
    rows); the one rule for a run that is a folder is ``CSVLogger``'s: a warning naming the
    folder and ``resume='allow'``, then the earlier run's tag files deleted, so no tag of the
    first run is read back with the second; other files in the folder are kept."""
    options = {"layout": "deepspeed"}
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                 csv=options, config={"a": 1}) as first:
        first.log({"loss": 1.0, "Train/lr": 0.1}, step=1)
    (tmp_path / "p" / "r" / "notes.txt").write_text("mine")
    with pytest.warns(UserWarning, match=r"'.*r' exists and is not empty.*resume='allow'"):
        second = Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                         strict=True, csv=options)
    with second:
        second.log({"loss": 0.5}, step=0)
    assert read_rows(second.run) == [("loss", 0, 0.5)]
    assert read_config(second.run) == {}
    assert sorted(p.name for p in (tmp_path / "p" / "r").iterdir()) == [
        "deepspeed_config.csv", "loss.csv", "notes.txt", "status", "tags.json"]


def test_epoch_is_written_as_an_integer_as_csvlogger_writes_it(tmp_path):
    """``epoch`` (Lightning logs it as an int) reads ``0``, so ``int(row["epoch"])`` works; other
    tags keep the float's repr (a float metric 1.0 is ``1.0``, as in CSVLogger); a tag named in
    ``integer_tags`` likewise, and a value that is not whole stays a float."""
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync",
                 csv={"integer_tags": ["epoch", "tokens"]}) as monitor:
        monitor.log({"epoch": 0, "acc": 1, "tokens": 2**40, "loss": 0.25}, step=0)
        monitor.log({"epoch": 1.5, "tokens": float("nan")}, step=1)
    assert (tmp_path / "p" / "r" / "metrics.csv").read_bytes() == (
        b"acc,epoch,loss,step,tokens\r\n1.0,0,0.25,0,1099511627776\r\n,1.5,,1,nan\r\n")
    assert [(tag, step, repr(value)) for tag, step, value in read_rows(monitor.run)] == [
        ("acc", 0, "1.0"), ("epoch", 0, "0.0"), ("loss", 0, "0.25"), ("tokens", 0, repr(2.0**40)),
        ("epoch", 1, "1.5"), ("tokens", 1, "nan")]


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


# A remote folder (an fsspec URL), as Lightning's test_csv_logger_remotefs writes one ----------

@pytest.fixture
def memory_url(request):
    """A folder of fsspec's in-memory filesystem, removed after the test."""
    import fsspec

    url = f"memory://csv-tests/{request.node.name}"
    fs, path = fsspec.core.url_to_fs(url)
    yield url
    if fs.exists(path):
        fs.rm(path, recursive=True)


def test_a_run_dir_url_is_written_through_fsspec(memory_url):
    """``run_dir`` as an fsspec URL: the same ``metrics.csv``, ``hparams.yaml`` and ``status``
    as in a local folder, written through fsspec, read back by the reader from the URL."""
    import fsspec

    url = f"{memory_url}/p/r"
    with Monitor(["csv"], project="p", name="r", csv={"run_dir": url}, config={"lr": 0.1},
                 dispatch="sync") as monitor:
        monitor.log({"loss": 0.5, "epoch": 0}, step=0)
        monitor.flush()
        monitor.log({"loss": 0.25, "acc": 1.0}, step=1)  # a new column: the file rewritten
    assert read_rows_in(url) == [("epoch", 0, 0.0), ("loss", 0, 0.5), ("acc", 1, 1.0),
                                 ("loss", 1, 0.25)]
    fs, path = fsspec.core.url_to_fs(url)
    assert fs.cat_file(f"{path}/metrics.csv") == (
        b"acc,epoch,loss,step\r\n,0,0.5,0\r\n1.0,,0.25,1\r\n")
    assert csv_monitor.read_config_in(url) == {"lr": 0.1}
    assert fs.cat_file(f"{path}/status") == b"finished\n"
    assert not Path("memory:").exists()  # nothing written to a local folder named after it


def test_a_remote_run_of_the_same_name_is_replaced_or_continued(memory_url):
    url = f"{memory_url}/p/r"
    with Monitor(["csv"], project="p", name="r", csv={"run_dir": url},
                 dispatch="sync") as first:
        first.log({"loss": 1.0}, step=3)
    with Monitor(["csv"], project="p", name="r", csv={"run_dir": url}, dispatch="sync",
                 resume="allow") as second:
        assert second.last_steps == {"csv": 3}
        second.log({"loss": 0.5}, step=4)
    assert read_rows_in(url) == [("loss", 3, 1.0), ("loss", 4, 0.5)]
    with pytest.warns(UserWarning, match="exists and is not empty"):
        third = Monitor(["csv"], project="p", name="r", csv={"run_dir": url}, dispatch="sync",
                        strict=True)
    with third:
        third.log({"loss": 0.25}, step=0)
    assert read_rows_in(url) == [("loss", 0, 0.25)]


def test_a_url_the_backend_cannot_write_is_refused_naming_the_fix(tmp_path, memory_url):
    with pytest.raises(ConfigError, match=r"memory://.*only the lightning layout"):
        Monitor(["csv"], project="p", name="r", csv={"run_dir": memory_url,
                                                    "layout": "deepspeed"},
                dispatch="sync", strict=True)
    with pytest.raises(ConfigError, match=r"nofs://x.*install the filesystem's package"):
        Monitor(["csv"], project="p", name="r", csv={"run_dir": "nofs://x"}, dispatch="sync",
                strict=True)


@pytest.mark.parametrize("log_dir", ["s3://bucket/runs", "memory://runs"])
def test_a_url_as_log_dir_is_a_config_error_not_a_local_folder(tmp_path, monkeypatch, log_dir):
    """``Path("s3://b/x")`` is the local folder ``s3:/b/x``: refused, naming the csv option."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"log_dir='.*' is a URL.*csv=\{'run_dir'"):
        Monitor(["csv"], project="p", log_dir=log_dir)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(":")]  # no ./s3: folder
