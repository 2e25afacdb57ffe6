"""The Trackio backend against Trackio's real SQLite storage (no mocks).

Rows are read back from ``<log_dir>/trackio/<project>.db`` with ``trackio_monitor.read_rows``
(SQL on Trackio's own tables) and, where the point is that Trackio itself can read them, with
Trackio's own reader ``trackio.sqlite_storage.SQLiteStorage``.
"""

from __future__ import annotations

import functools
import json
import math
import socketserver
import threading
from pathlib import Path

import pytest
import trackio
from interpreter import imported_after, load_error_after, run_python
from trackio import context_vars, utils
from trackio.sqlite_storage import SQLiteStorage

from core_monitor import ConfigError, Event, RunInfo
from core_monitor import Monitor as _Monitor
from core_monitor.testing import MonitorContract
from trackio_monitor import (
    CRASH_ALERT_TITLE,
    TrackioMonitor,
    read_alerts,
    read_config,
    read_media,
    read_rows,
    trackio_dir,
)
from trackio_monitor.reader import read_crash

#: Most tests here check the plugin against Trackio's process-wide state as this process sees
#: it (Trackio's folder, its current run, ``SQLiteStorage`` while the run is open), so their
#: backend runs in this process (``dispatch="sync"``). The default, a writer process, is what
#: the contract kit below, the subprocess tests and tests/plugins/test_crash.py run.
Monitor = functools.partial(_Monitor, dispatch="sync")


class TestTrackioContract(MonitorContract):
    backend_class = TrackioMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_media = staticmethod(read_media)
    read_crash = staticmethod(read_crash)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


def _current_dir() -> Path:
    """The folder Trackio writes to right now."""
    return utils.TRACKIO_DIR


def _steps(rows, tag="loss"):
    return [(step, value) for t, step, value in rows if t == tag]




# Cases from real users ------------------------------------------------------------------------

def test_c1_explicit_steps_are_stored_exactly(log_dir):
    with Monitor(["trackio"], project="c1", name="r", log_dir=log_dir) as monitor:
        for step, loss in zip([0, 10, 20, 120], [0.3, 0.25, 0.2, 0.1], strict=True):
            monitor.log({"loss": loss}, step=step)
    assert read_rows(RunInfo("c1", "r", log_dir=log_dir)) == [
        ("loss", 0, 0.3), ("loss", 10, 0.25), ("loss", 20, 0.2), ("loss", 120, 0.1)
    ]


def test_c3_rows_survive_a_process_that_exits_without_close(log_dir):
    run_python(f"""
        from core_monitor import Monitor
        monitor = Monitor(["trackio"], project="c3", name="r", log_dir={str(log_dir)!r})
        for step in range(3):
            monitor.log({{"loss": step / 2}}, step=step)
        # no close(), no flush(): the process simply ends
    """)
    assert read_rows(RunInfo("c3", "r", log_dir=log_dir)) == [
        ("loss", 0, 0.0), ("loss", 1, 0.5), ("loss", 2, 1.0)
    ]


def test_c10_odd_config_is_stored_json_safe_in_trackio_configs(log_dir):
    config = {"layers": [64, 64], "seed": None, "out": Path("x"), "opt": object(), "_private": 1}
    with Monitor(["trackio"], project="c10", name="r", config=config, log_dir=log_dir) as monitor:
        monitor.log({"loss": 1.0}, step=0)
        monitor.flush()
        # Trackio's own reader sees the config while the run is open, with its own keys
        own = SQLiteStorage.get_run_config("c10", "r")
        assert own["layers"] == [64, 64]
        assert own["config._private"] == 1  # Trackio refuses "_" keys: stored with a prefix
        assert own["_Username"] is None  # no Hub look-up
    stored = read_config(monitor.run)
    json.dumps(stored, allow_nan=False)  # JSON-safe
    assert stored["layers"] == [64, 64]
    assert stored["seed"] is None
    assert stored["out"] == "x"
    assert isinstance(stored["opt"], str) and "object" in stored["opt"]
    assert stored["_private"] == 1  # read_config undoes the prefix
    assert "_Username" not in stored and "_Created" not in stored  # Trackio's own keys


# Trackio specifics ----------------------------------------------------------------------------

def test_flushed_rows_are_readable_by_trackios_own_reader_while_open(log_dir):
    with Monitor(["trackio"], project="own", name="r", log_dir=log_dir) as monitor:
        monitor.log({"loss": 0.5, "step": 7.0, "__x": 1.0}, step=3)
        monitor.log({"loss": math.inf}, step=1)
        monitor.flush()
        logs = SQLiteStorage.get_logs("own", "r")
        assert [(log["step"], log["loss"]) for log in logs] == [(3, 0.5), (1, math.inf)]
        assert logs[0]["__step"] == 7.0 and logs[0]["____x"] == 1.0  # Trackio's renames


def test_a_thousand_steps_read_back_exactly(log_dir):
    logged = [("loss", step, 1 / (step + 3)) for step in range(1000)]
    logged += [("lr", step, step * 1e-7) for step in range(1000)]
    with Monitor(["trackio"], project="big", name="r", log_dir=log_dir) as monitor:
        for step in range(1000):
            monitor.log({"loss": 1 / (step + 3), "lr": step * 1e-7}, step=step)
    rows = read_rows(RunInfo("big", "r", log_dir=log_dir))
    assert sorted(rows) == sorted(logged)
    assert [s for t, s, _ in rows if t == "loss"] == list(range(1000))


def test_rows_written_by_the_batching_thread_before_flush_are_not_duplicated(log_dir):
    with Monitor(["trackio"], project="dup", name="r", log_dir=log_dir) as monitor:
        for step in range(50):
            monitor.log({"loss": float(step)}, step=step)
            if step % 10 == 0:
                monitor.flush()
    assert _steps(read_rows(monitor.run)) == [(s, float(s)) for s in range(50)]


def test_log_dir_wins_over_trackio_dir_and_trackio_is_pointed_back(log_dir):
    home = utils.TRACKIO_DIR
    before = set(home.rglob("*")) if home.exists() else set()
    with Monitor(["trackio"], project="where", name="r", log_dir=log_dir) as monitor:
        monitor.log({"loss": 1.0}, step=0)
        assert _current_dir() == log_dir.resolve() / "trackio"
    assert (log_dir / "trackio" / "where.db").exists()
    assert _current_dir() == home  # Trackio's own folder again after close
    assert (set(home.rglob("*")) if home.exists() else set()) == before


def test_log_dir_wins_over_trackio_dir_set_before_trackio_was_imported(tmp_path, log_dir):
    elsewhere = tmp_path / "elsewhere"
    run_python(f"""
        import trackio  # imported first: Trackio has read TRACKIO_DIR already
        from core_monitor import Monitor
        with Monitor(["trackio"], project="p", name="r", log_dir={str(log_dir)!r}) as monitor:
            monitor.log({{"loss": 1.0}}, step=0)
    """, env={"TRACKIO_DIR": str(elsewhere)})
    assert read_rows(RunInfo("p", "r", log_dir=log_dir)) == [("loss", 0, 1.0)]
    assert not elsewhere.exists() or not any(elsewhere.iterdir())


def test_no_log_dir_uses_trackios_own_folder(tmp_path):
    with Monitor(["trackio"], project="home", name="r") as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert trackio_dir(None) == utils.TRACKIO_DIR.resolve()
    assert (utils.TRACKIO_DIR / "home.db").exists()
    assert read_rows(RunInfo("home", "r", log_dir=None)) == [("loss", 0, 1.0)]


def test_users_own_trackio_run_is_not_hijacked(log_dir):
    user_run = trackio.init(project="mine", name="user-run", auto_log_cpu=False,
                            auto_log_gpu=False)
    try:
        home_db = utils.TRACKIO_DIR / "mine.db"
        with Monitor(["trackio"], project="mine", name="plugin-run") as monitor:
            trackio.log({"user_metric": 1.0}, step=0)
            monitor.log({"loss": 2.0}, step=0)
            trackio.log({"user_metric": 3.0}, step=1)
        assert context_vars.current_run.get() is user_run
        trackio.log({"user_metric": 4.0}, step=2)  # the user's run is still open
    finally:
        trackio.finish()
    assert read_rows(RunInfo("mine", "plugin-run", log_dir=None)) == [("loss", 0, 2.0)]
    assert read_rows(RunInfo("mine", "user-run", log_dir=None)) == [
        ("user_metric", 0, 1.0), ("user_metric", 1, 3.0), ("user_metric", 2, 4.0)
    ]
    assert home_db.exists()


def test_a_second_folder_while_the_users_run_writes_is_a_clear_error(log_dir):
    trackio.init(project="mine2", name="user-run", auto_log_cpu=False, auto_log_gpu=False)
    try:
        with pytest.raises(ConfigError, match="one folder per process"):
            Monitor(["trackio"], project="p", log_dir=log_dir)
    finally:
        trackio.finish()
    assert not (log_dir / "trackio" / "p.db").exists()


def test_two_open_monitors_with_different_log_dirs_is_a_clear_error(tmp_path):
    with Monitor(["trackio"], project="p", log_dir=tmp_path / "a"):
        with pytest.raises(ConfigError, match=r"trackio.*one folder per process"):
            Monitor(["trackio"], project="p", log_dir=tmp_path / "b")
        with Monitor(["trackio"], project="p", name="same", log_dir=tmp_path / "a") as same:
            same.log({"loss": 1.0}, step=0)
    assert read_rows(RunInfo("p", "same", log_dir=tmp_path / "a")) == [("loss", 0, 1.0)]


def test_resume_allow_continues_the_run_of_that_name(log_dir):
    for step in (0, 1):
        with Monitor(["trackio"], project="res", name="r", log_dir=log_dir,
                     trackio={"resume": "allow"}) as monitor:
            monitor.log({"loss": float(step)}, step=step)
    assert read_rows(RunInfo("res", "r", log_dir=log_dir)) == [("loss", 0, 0.0), ("loss", 1, 1.0)]


def test_resume_never_starts_a_new_run_and_read_rows_reads_the_latest(log_dir):
    for step in (0, 1):
        with Monitor(["trackio"], project="res", name="r", log_dir=log_dir) as monitor:
            monitor.log({"loss": float(step)}, step=step)
    assert read_rows(RunInfo("res", "r", log_dir=log_dir)) == [("loss", 1, 1.0)]


def test_resume_must_without_a_run_is_a_config_error(log_dir):
    with pytest.raises(ConfigError, match="resume='must'"):
        Monitor(["trackio"], project="res", name="absent", log_dir=log_dir,
                trackio={"resume": "must"})
    assert _current_dir() != log_dir.resolve() / "trackio"  # folder released


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"resume": "sometimes"}, "resume"),
        ({"group": ""}, "group"),
        ({"space_id": 3}, "space_id"),
        ({"server_url": "ftp://host"}, "server_url"),
        ({"quiet": "yes"}, "quiet"),
        ({"auto_log_cpu": "on"}, "auto_log_cpu"),
    ],
)
def test_bad_option_values_are_config_errors_naming_the_option(log_dir, options, named):
    with pytest.raises(ConfigError, match=named):
        Monitor(["trackio"], project="p", log_dir=log_dir, trackio=options)


def test_project_name_trackio_refuses_is_a_config_error(log_dir):
    with pytest.raises(ConfigError, match="registry-"):
        Monitor(["trackio"], project="registry-x", log_dir=log_dir)


def test_group_is_stored_in_trackios_config(log_dir):
    with Monitor(["trackio"], project="g", name="r", log_dir=log_dir,
                 trackio={"group": "sweep-1"}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
        monitor.flush()
        assert SQLiteStorage.get_run_config("g", "r")["_Group"] == "sweep-1"


def test_quiet_by_default_and_prints_where_the_data_goes_when_asked(log_dir, capfd):
    with Monitor(["trackio"], project="q", name="r", log_dir=log_dir) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert capfd.readouterr().out == ""
    with Monitor(["trackio"], project="q", name="r2", log_dir=log_dir,
                 trackio={"quiet": False}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    out = capfd.readouterr().out
    assert str(log_dir.resolve() / "trackio") in out and "trackio show" in out


def test_no_network_request_even_with_a_hub_token(tmp_path, log_dir):
    """Trackio asks the Hub who the user is when a token is set; the plugin must not."""
    hits: list[bytes] = []

    class Recorder(socketserver.BaseRequestHandler):
        def handle(self):
            hits.append(self.request.recv(1024))

    with socketserver.TCPServer(("127.0.0.1", 0), Recorder) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            run_python(f"""
                from core_monitor import Monitor
                with Monitor(["trackio"], project="net", name="r",
                             log_dir={str(log_dir)!r}) as monitor:
                    monitor.log({{"loss": 1.0}}, step=0)
            """, env={
                "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_not_a_real_token",
                "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
            })
        finally:
            server.shutdown()
    assert hits == []
    assert read_rows(RunInfo("net", "r", log_dir=log_dir)) == [("loss", 0, 1.0)]


def test_rank_above_zero_writes_its_own_run(log_dir, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with Monitor(["trackio"], project="ddp", name="r", log_dir=log_dir,
                 rank_zero_only=False) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert monitor.run.rank == 1
    assert read_rows(monitor.run) == [("loss", 0, 1.0)]  # reads the rank's own run
    assert read_rows(RunInfo("ddp", "r-rank1", log_dir=log_dir)) == [("loss", 0, 1.0)]
    assert read_rows(RunInfo("ddp", "r", log_dir=log_dir)) == []


# Lazy import, SDK check, late config ------------------------------------------------------------

def test_importing_the_plugin_imports_no_sdk():
    """A rank that writes nothing imports the plugin (the core checks options from the class)
    but must not pay for Trackio and its dependencies."""
    statement = "from trackio_monitor import TrackioMonitor, read_config, read_rows"
    heavy = ("trackio", "huggingface_hub", "gradio_client", "pandas", "numpy", "orjson")
    assert imported_after(statement, heavy) == []


def test_check_sdk_passes_for_the_installed_trackio():
    assert TrackioMonitor.check_sdk() == []


def test_a_trackio_without_an_internal_the_plugin_uses_fails_loudly():
    """Simulates a Trackio release that dropped ``Run._flush_queues_inline``."""
    message = load_error_after(
        "import trackio.run\nfrom core_monitor import Monitor\n"
        "del trackio.run.Run._flush_queues_inline",
        "Monitor(['trackio'], project='p', log_dir='unused', strict=True, dispatch='sync')",
    )
    assert "'trackio'" in message and "_flush_queues_inline" in message
    assert "trackio>=0.42,<0.44" in message


def test_log_config_merges_into_trackios_run_config(log_dir):
    with Monitor(["trackio"], project="late", name="r", log_dir=log_dir,
                 config={"lr": 0.1, "layers": 2}, trackio={"group": "g"}) as monitor:
        monitor.log_config({"batch": 32})  # before the first row: goes with it
        monitor.log({"loss": 1.0}, step=0)
        monitor.flush()
        monitor.log_config({"lr": 0.2, "_seed": 7})  # after it: written at once ...
        monitor.flush()  # ... by the backend's thread (background dispatch)
        own = SQLiteStorage.get_run_config("late", "r")  # Trackio's own reader, run still open
        assert (own["lr"], own["batch"], own["config._seed"], own["_Group"]) == (0.2, 32, 7, "g")
        monitor.log({"loss": 0.5}, step=1)
    assert read_config(monitor.run) == {"lr": 0.2, "layers": 2, "batch": 32, "_seed": 7}
    assert read_config(monitor.run) == dict(monitor.run.config)
    assert read_rows(monitor.run) == [("loss", 0, 1.0), ("loss", 1, 0.5)]


def test_log_config_of_a_run_that_logs_nothing_stores_nothing(log_dir):
    """Trackio writes a run's config with its first row; a run without rows has none."""
    with Monitor(["trackio"], project="late", name="empty", log_dir=log_dir) as monitor:
        monitor.log_config({"lr": 0.1})
    assert read_config(monitor.run) == {}


def test_media_are_in_trackios_own_rows_and_media_folder(log_dir):
    """What Trackio's dashboard reads (``SQLiteStorage.get_logs``): each media value in the row
    of the caller's step, the image a PNG under ``media/<project>/<run>/<step>/``; a reserved
    tag renamed as for scalars and read back as logged."""
    import numpy as np

    from core_monitor import Histogram, Image, Text

    pixels = np.full((3, 4, 3), 200, dtype=np.uint8)
    with Monitor(["trackio"], project="p", name="media", log_dir=log_dir) as monitor:
        monitor.log({"loss": 1.0, "img": Image(pixels, caption="c")}, step=40)
        monitor.log({"w": Histogram([1, 2, 2, 3], bins=3), "step": Text("t")}, step=7)
        monitor.flush()
        logs = SQLiteStorage.get_logs("p", "media")
    by_step = {}
    for row in logs:
        by_step.setdefault(row["step"], {}).update(row)
    image = by_step[40]["img"]
    assert image["_type"] == "trackio.image" and image["caption"] == "c"
    assert Path(image["file_path"]).parent.as_posix() == "p/media/40"
    assert (trackio_dir(log_dir) / "media" / image["file_path"]).is_file()
    assert by_step[7]["w"]["_type"] == "trackio.histogram" and sum(by_step[7]["w"]["values"]) == 4
    assert by_step[7]["__step"] == {"_type": "trackio.markdown", "_value": "t"}
    assert [(t, s, type(v).__name__) for t, s, v in read_media(monitor.run)] == [
        ("img", 40, "Image"), ("w", 7, "Histogram"), ("step", 7, "Text")]
    assert read_rows(monitor.run) == [("loss", 40, 1.0)]


def test_a_crash_is_an_error_alert_on_the_run_at_its_last_step(tmp_path, capsys):
    crashed = RunInfo(project="cases", name="crashed", log_dir=tmp_path)
    backend = TrackioMonitor(crashed)
    backend.monitor_write([Event("loss", 0.5, step, 1.0e9 + step) for step in range(3)])
    backend.monitor_crash(reason="the training process (pid 1) ended without closing")
    backend.monitor_close()
    assert read_alerts(crashed) == [
        ("error", CRASH_ALERT_TITLE, "the training process (pid 1) ended without closing", 2)]
    assert read_rows(crashed) == [("loss", step, 0.5) for step in range(3)]
    assert "TRACKIO" not in capsys.readouterr().out, "quiet=True hides Trackio's alert line"

    closed = RunInfo(project="cases", name="closed", log_dir=tmp_path)
    backend = TrackioMonitor(closed)
    backend.monitor_write([Event("loss", 0.5, 0, 1.0e9)])
    backend.monitor_close()
    assert read_alerts(closed) == []
    assert read_alerts(RunInfo(project="other", name="closed", log_dir=tmp_path)) == []
