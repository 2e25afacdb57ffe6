"""The TensorBoard backend: the contract kit, the user cases, and what TensorBoard itself reads.

Everything is read back from the event files with TensorBoard's own readers
(``EventAccumulator`` through ``tensorboard_monitor.read_rows``, ``LegacyEventFileLoader`` for
raw events, the HParams plugin's own metadata parser).
"""

from __future__ import annotations

import math
import os
import textwrap
import time
from pathlib import Path

import pytest
from interpreter import imported_after, load_error_after, run_python
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.plugins.hparams import metadata as hparams_metadata

from core_monitor import ConfigError, Event, Monitor, RunInfo
from core_monitor.testing import MonitorContract
from tensorboard_monitor import (
    CRASH_TAG,
    TensorBoardMonitor,
    hparam_value,
    read_config,
    read_media,
    read_rows,
    run_dir,
)
from tensorboard_monitor.reader import read_crash


def raw_events(folder: Path) -> list:
    """Every ``Event`` protobuf of the folder's event files, in file order, as written."""
    events = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        events.extend(LegacyEventFileLoader(str(path)).Load())
    return events


def scalar_events(folder: Path) -> list:
    """The events that carry scalars (not the file-version or HParams events)."""
    return [
        e for e in raw_events(folder) if any(v.HasField("simple_value") for v in e.summary.value)
    ]


def session_start_info(folder: Path):
    accumulator = EventAccumulator(str(folder)).Reload()
    try:
        content = accumulator.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
    except KeyError:  # the folder holds no HParams data at all
        return None
    return hparams_metadata.parse_session_start_info_plugin_data(
        content[hparams_metadata.SESSION_START_INFO_TAG]
    )


class TestTensorBoardContract(MonitorContract):
    backend_class = TensorBoardMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_media = staticmethod(read_media)
    read_crash = staticmethod(read_crash)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


# Cases -------------------------------------------------------------------------------------------


def test_c1_explicit_steps_reach_the_event_file_by_entry_point_name(logs):
    with Monitor(["tensorboard"], project="p", name="c1", log_dir=logs) as monitor:
        for step in (0, 10, 20, 120):
            monitor.log({"loss": 0.3}, step=step)
    assert [(t, s) for t, s, _ in read_rows(monitor.run)] == [
        ("loss", 0), ("loss", 10), ("loss", 20), ("loss", 120)
    ]


def test_c2_lower_step_is_kept_in_file_order_and_next_step_is_max_plus_one(logs):
    with Monitor(["tensorboard"], project="p", name="c2", log_dir=logs) as monitor:
        monitor.log({"loss": 1.0}, step=5)
        monitor.log({"loss": 2.0}, step=3)
        monitor.log({"loss": 3.0})
    assert read_rows(monitor.run) == [("loss", 5, 1.0), ("loss", 3, 2.0), ("loss", 6, 3.0)]
    assert [e.step for e in scalar_events(logs / "p" / "c2")] == [5, 3, 6]


@pytest.mark.parametrize("options", [{}, {"flush_secs": 3600, "max_queue": 1000}])
def test_c3_process_exiting_without_close_loses_no_point(logs, options):
    script = textwrap.dedent(
        f"""
        from core_monitor import Monitor
        monitor = Monitor(["tensorboard"], project="p", name="c3", log_dir={str(logs)!r},
                          tensorboard={options!r})
        for step in range(3):
            monitor.log({{"loss": step / 2}}, step=step)
        # no close(), no flush(): the interpreter just exits
        """
    )
    run_python(script, timeout=120)
    assert read_rows(RunInfo("p", "c3", log_dir=logs)) == [
        ("loss", 0, 0.0), ("loss", 1, 0.5), ("loss", 2, 1.0)
    ]


# Storage: one Event per step row, wall time, float32, layout ----------------------------------


def test_one_event_per_step_row_carries_every_scalar_of_the_row(logs):
    with Monitor(["tensorboard"], project="p", name="rows", log_dir=logs) as monitor:
        for step in range(5):
            monitor.log({f"m{i}": step + i / 10 for i in range(8)}, step=step)
        monitor.write_events([("a", 1.0, 7), ("b", 2.0, 7), ("a", 3.0, 8)])
    events = scalar_events(logs / "p" / "rows")
    assert [e.step for e in events] == [0, 1, 2, 3, 4, 7, 8]
    assert [len(e.summary.value) for e in events] == [8] * 5 + [2, 1]
    assert [v.tag for v in events[0].summary.value] == [f"m{i}" for i in range(8)]


def test_event_wall_time_is_the_time_of_the_log_call(logs):
    with Monitor(["tensorboard"], project="p", name="wall", log_dir=logs) as monitor:
        before = time.time()
        monitor.log({"loss": 1.0}, step=1)
        after = time.time()
        time.sleep(0.05)
    (event,) = scalar_events(logs / "p" / "wall")
    assert before <= event.wall_time <= after


def test_values_are_float32(logs):
    with Monitor(["tensorboard"], project="p", name="f32", log_dir=logs) as monitor:
        monitor.log({"tenth": 0.1, "huge": 1e39, "tiny": 1e-50}, step=0)
    got = {tag: value for tag, _, value in read_rows(RunInfo("p", "f32", log_dir=logs))}
    assert got == {"tenth": 0.10000000149011612, "huge": math.inf, "tiny": 0.0}


def test_read_rows_returns_more_than_tensorboards_default_10000_points_per_tag(logs):
    with Monitor(["tensorboard"], project="p", name="long", log_dir=logs) as monitor:
        for step in range(10_050):
            monitor.log({"loss": float(step)}, step=step)
    rows = read_rows(RunInfo("p", "long", log_dir=logs))
    assert [s for _, s, _ in rows] == list(range(10_050))
    assert [v for _, _, v in rows] == [float(s) for s in range(10_050)]


def test_layout_is_log_dir_project_run_name_with_one_event_file(logs):
    with Monitor(["tensorboard"], project="proj", name="sweep/lr-1", log_dir=logs) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    files = [p.relative_to(logs) for p in logs.rglob("*")  # .journal: the core's run journal
             if p.is_file() and p.relative_to(logs).parts[0] != ".journal"]
    assert len(files) == 1
    assert files[0].parent == Path("proj/sweep/lr-1")
    assert files[0].name.startswith("events.out.tfevents.")


def test_without_log_dir_runs_go_under_dot_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Monitor(["tensorboard"], project="p", name="default") as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert run_dir("p", "default", None) == tmp_path / "runs" / "p" / "default"
    assert read_rows(RunInfo("p", "default")) == [("loss", 0, 1.0)]


def test_changing_directory_after_start_does_not_move_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Monitor(["tensorboard"], project="p", name="cwd", log_dir="rel") as monitor:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        monitor.log({"loss": 1.0}, step=0)
    assert read_rows(RunInfo("p", "cwd", log_dir=tmp_path / "rel")) == [("loss", 0, 1.0)]
    assert not (elsewhere / "rel").exists()


def test_filename_suffix_ends_the_event_file_name(logs):
    with Monitor(["tensorboard"], project="p", name="sfx", log_dir=logs,
                 tensorboard={"filename_suffix": ".v2"}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    (path,) = (logs / "p" / "sfx").iterdir()
    assert path.name.endswith(".v2")
    assert read_rows(monitor.run) == [("loss", 0, 1.0)]


def test_rank_above_zero_writes_its_own_sub_run(logs, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with Monitor(["tensorboard"], project="p", name="ddp", log_dir=logs,
                 rank_zero_only=False, config={"lr": 0.1}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert monitor.run.rank == 1
    assert read_rows(monitor.run) == [("loss", 0, 1.0)]  # the rank's own sub-run
    assert [e.step for e in scalar_events(logs / "p" / "ddp" / "rank1")] == [0]
    assert session_start_info(logs / "p" / "ddp" / "rank1") is None  # hparams: rank 0 only


# HParams -------------------------------------------------------------------------------------


def test_config_is_written_as_hparams_session_start_info(logs):
    config = {"lr": 3e-4, "layers": [64, 64], "seed": None, "opt": {"name": "adam"},
              "amp": True, "tag": "größe", "big": 2**60, "steps": 1000}
    with Monitor(["tensorboard"], project="p", name="hp", log_dir=logs, config=config) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    info = session_start_info(logs / "p" / "hp")
    assert info is not None
    hparams = {key: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
               for key, value in info.hparams.items()}
    assert hparams == {
        "lr": 3e-4, "layers": "[64, 64]", "seed": "null", "opt.name": "adam", "amp": True,
        "tag": "größe", "big": str(2**60), "steps": 1000.0,
    }
    assert info.group_name == "p/hp"
    assert read_rows(monitor.run) == [("loss", 0, 1.0)]  # hparams are not scalars


def test_hparams_false_or_empty_config_writes_no_hparams(logs):
    with Monitor(["tensorboard"], project="p", name="off", log_dir=logs, config={"lr": 0.1},
                 tensorboard={"hparams": False}):
        pass
    with Monitor(["tensorboard"], project="p", name="empty", log_dir=logs):
        pass
    assert session_start_info(logs / "p" / "off") is None
    assert session_start_info(logs / "p" / "empty") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True), (3, 3.0), (0.5, 0.5), ("adam", "adam"), (None, "null"),
        ([64, 64], "[64, 64]"), ({"b": 1, "a": "é"}, '{"a": "é", "b": 1}'),
        (2**53 + 1, "9007199254740993"), (math.nan, "nan"), (-math.inf, "-inf"),
    ],
)
def test_hparam_value_conversion(value, expected):
    assert hparam_value(value) == expected
    assert type(hparam_value(value)) is type(expected)


# Options and lifecycle ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("flush_secs", 0), ("flush_secs", -1.0), ("flush_secs", math.inf), ("flush_secs", "5"),
        ("flush_secs", True), ("max_queue", 0), ("max_queue", 2.5), ("max_queue", False),
        ("filename_suffix", "a/b"), ("filename_suffix", 3), ("hparams", "yes"),
    ],
)
def test_bad_option_value_raises_config_error_naming_it(logs, option, value):
    with pytest.raises(ConfigError, match=option):
        Monitor(["tensorboard"], project="p", name="bad", log_dir=logs,
                tensorboard={option: value})


def test_unknown_option_raises_config_error_listing_accepted_ones(logs):
    with pytest.raises(ConfigError, match="flush_secs"):
        Monitor(["tensorboard"], project="p", log_dir=logs, tensorboard={"flush_sec": 5})


@pytest.mark.parametrize(("project", "name"), [("..", "r"), ("p", "../r"), ("p", "a//b"),
                                               ("/abs", "r"), ("p", ".")])
def test_names_that_would_leave_log_dir_are_refused(logs, project, name):
    with pytest.raises(ConfigError, match="log_dir"):
        run_dir(project, name, logs)


def test_a_run_closed_before_any_write_reads_back_no_rows(logs):
    backend = TensorBoardMonitor(RunInfo(project="p", name="direct", log_dir=logs))
    backend.monitor_close()
    assert read_rows(RunInfo("p", "direct", log_dir=logs)) == []


def test_read_rows_of_a_missing_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_rows(RunInfo("p", "nothing", log_dir=tmp_path))


# Late config, lazy import, SDK check ----------------------------------------------------------


def test_config_given_before_the_first_log_is_merged_into_the_hparams(logs):
    with Monitor(["tensorboard"], project="p", name="late", log_dir=logs,
                 config={"lr": 0.1, "layers": 2}) as monitor:
        monitor.log_config({"lr": 0.2, "batch": 32})  # e.g. Lightning's log_hyperparams
        monitor.log({"loss": 1.0}, step=0)
        monitor.flush()
        assert read_config(monitor.run) == {"lr": 0.2, "layers": 2.0, "batch": 32.0}
    info = session_start_info(logs / "p" / "late")  # what TensorBoard's HParams plugin reads
    assert {k: v.number_value for k, v in info.hparams.items()} == {
        "lr": 0.2, "layers": 2.0, "batch": 32.0
    }
    starts = [e for e in raw_events(logs / "p" / "late")
              if any(v.tag == hparams_metadata.SESSION_START_INFO_TAG for v in e.summary.value)]
    assert len(starts) == 1


def test_config_only_through_log_config_is_written_as_hparams(logs):
    with Monitor(["tensorboard"], project="p", name="only-late", log_dir=logs) as monitor:
        monitor.log_config({"opt": "adam"})
    assert read_config(monitor.run) == {"opt": "adam"}


def test_config_after_a_log_but_before_the_first_flush_reaches_the_hparams(logs):
    with Monitor(["tensorboard"], project="p", name="after-log", log_dir=logs,
                 config={"lr": 0.1}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
        monitor.log_config({"lr": 0.2})
    assert read_config(monitor.run) == {"lr": 0.2}


def test_config_after_the_hparams_were_written_warns_and_tensorboard_keeps_the_first(logs):
    with Monitor(["tensorboard"], project="p", name="too-late", log_dir=logs,
                 config={"lr": 0.1}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
        monitor.flush()
        with pytest.warns(RuntimeWarning, match=r"\['lr'\].*first HParams"):
            monitor.log_config({"lr": 0.2})
            monitor.flush()  # background dispatch: the hook runs on the backend's thread
    assert read_config(monitor.run) == {"lr": 0.1}
    assert monitor.failures == {}


def test_tensorboard_shows_only_the_first_session_start_info_of_a_run(tmp_path):
    """Why HParams are written once: TensorBoard keeps the first plugin data per tag and run."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import summary_v2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "p" / "r"))
    for lr in (0.1, 0.2):
        summary = summary_v2.hparams_pb({"lr": lr}, trial_id="p/r", start_time_secs=1.0)
        writer.add_event(event_pb2.Event(wall_time=1.0, step=0, summary=summary))
    writer.close()
    assert session_start_info(tmp_path / "p" / "r").hparams["lr"].number_value == 0.1
    assert read_config(RunInfo("p", "r", log_dir=tmp_path)) == {"lr": 0.1}


def test_importing_the_plugin_imports_no_sdk():
    """A rank that writes nothing imports the plugin (the core checks options from the class)
    but must not pay for TensorBoard and its dependencies."""
    statement = "from tensorboard_monitor import TensorBoardMonitor, read_config, read_rows"
    assert imported_after(statement, ("tensorboard", "numpy", "google.protobuf", "grpc")) == []


def test_check_sdk_passes_for_the_installed_tensorboard():
    assert TensorBoardMonitor.check_sdk() == []


def test_a_tensorboard_without_the_writer_the_plugin_uses_fails_loudly():
    """Simulates a TensorBoard release that changed ``EventFileWriter``."""
    message = load_error_after(
        "from tensorboard.summary.writer import event_file_writer\n"
        "from core_monitor.compat import ensure_sdk\n"
        "from tensorboard_monitor import TensorBoardMonitor\n"
        "del event_file_writer.EventFileWriter.add_event",
        "ensure_sdk(TensorBoardMonitor)",
    )
    assert "EventFileWriter.add_event" in message and "tensorboard>=2.21,<3" in message


def test_media_events_are_what_tensorboards_dashboards_read(logs):
    """Raw events: one per media value at the caller's step; the image a PNG TensorBoard's
    Images dashboard decodes; the histogram migrated by TensorBoard's own ``data_compat`` (what
    its Histograms dashboard reads) into buckets holding every value; text under the Text
    plugin."""
    import io

    import numpy as np
    from PIL import Image as PILImage
    from tensorboard import data_compat
    from tensorboard.util import tensor_util

    from core_monitor import Histogram, Image, Text

    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    values = np.linspace(-1, 1, 101)
    with Monitor(["tensorboard"], project="p", name="media", log_dir=logs) as monitor:
        monitor.log({"img": Image(pixels), "w": Histogram(values, bins=8), "md": Text("**b**")},
                    step=250)
    media = [e for e in raw_events(run_dir("p", "media", logs)) if e.summary.value
             and e.summary.value[0].WhichOneof("value") in ("image", "histo", "tensor")]
    assert [(e.step, e.summary.value[0].tag) for e in media] == [(250, "img"), (250, "w"),
                                                                 (250, "md")]
    image = media[0].summary.value[0].image
    assert (image.height, image.width, image.colorspace) == (4, 5, 3)
    assert np.array_equal(np.asarray(PILImage.open(io.BytesIO(image.encoded_image_string))),
                          pixels)
    migrated = data_compat.migrate_event(media[1]).summary.value[0]
    buckets = tensor_util.make_ndarray(migrated.tensor)  # rows of (left, right, count)
    assert migrated.metadata.plugin_data.plugin_name == "histograms"
    assert buckets[:, 2].sum() == 101 and buckets[0, 0] == -1 and buckets[-1, 1] == 1
    text = media[2].summary.value[0]
    assert text.metadata.plugin_data.plugin_name == "text"
    assert text.tensor.string_val == [b"**b**"]


def test_run_dir_writes_the_event_files_exactly_there(tmp_path):
    folder = tmp_path / "output" / "job"
    with Monitor(["tensorboard"], project="p", name="r", log_dir=tmp_path / "logs",
                 tensorboard={"run_dir": str(folder)}) as monitor:
        monitor.log({"loss": 0.5}, step=3)
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    # the backend wrote nothing under log_dir: only the core's run journal is there
    assert [p.name for p in (tmp_path / "logs").iterdir()] == [".journal"]
    assert read_rows(monitor.run, run_dir=folder) == [("loss", 3, 0.5)]
    with pytest.raises(ConfigError, match="run_dir"):
        Monitor(["tensorboard"], project="p", tensorboard={"run_dir": ""})


def test_from_deepspeed_puts_events_where_deepspeeds_own_writer_does():
    assert TensorBoardMonitor.from_deepspeed({"output_path": "o", "job_name": "j"}) == {
        "run_dir": os.path.join("o", "j"), "name": "j"}
    assert TensorBoardMonitor.from_deepspeed({}) == {"run_dir": "DeepSpeedJobName"}


def test_a_crash_is_a_text_at_the_runs_largest_step(tmp_path):
    crashed = RunInfo(project="cases", name="crashed", log_dir=tmp_path)
    backend = TensorBoardMonitor(crashed)
    backend.monitor_write([Event("loss", 0.5, step, 1.0e9 + step) for step in (0, 7, 3)])
    backend.monitor_flush()
    backend.monitor_crash(reason="the training process (pid 1) ended without closing")
    backend.monitor_close()
    assert [(tag, step, value.text) for tag, step, value in read_media(crashed)] == [
        (CRASH_TAG, 7, "the training process (pid 1) ended without closing")]
    assert read_rows(crashed) == [("loss", step, 0.5) for step in (0, 7, 3)]

    closed = RunInfo(project="cases", name="closed", log_dir=tmp_path)
    backend = TensorBoardMonitor(closed)
    backend.monitor_write([Event("loss", 0.5, 0, 1.0e9)])
    backend.monitor_close()
    assert read_media(closed) == []


def test_a_run_dir_url_is_written_through_tensorboards_file_layer():
    """``run_dir`` as an fsspec URL (``memory://``), as ``TensorBoardLogger(save_dir=<URL>)``
    takes one: the event file is written there and read back with ``EventAccumulator``; a
    second run there adds its event file beside the first (``SummaryWriter(log_dir=...)``'s
    meaning of an exact folder), nothing deleted."""
    import fsspec

    url = "memory://tensorboard-tests/p/r"
    fs, path = fsspec.core.url_to_fs(url)
    try:
        with Monitor(["tensorboard"], project="p", name="r", dispatch="sync",
                     tensorboard={"run_dir": url}) as monitor:
            monitor.log({"loss": 0.5}, step=3)
        assert read_rows(monitor.run, run_dir=url) == [("loss", 3, 0.5)]
        assert not Path("memory:").exists()
        with Monitor(["tensorboard"], project="p", name="r", dispatch="sync", strict=True,
                     tensorboard={"run_dir": url}) as second:
            second.log({"loss": 0.25}, step=4)
        assert read_rows(second.run, run_dir=url) == [("loss", 3, 0.5), ("loss", 4, 0.25)]
        assert len(fs.glob(f"{path}/*tfevents*")) == 2
    finally:
        if fs.exists(path):
            fs.rm(path, recursive=True)
