"""The wandb backend against real offline runs, read back from their ``.wandb`` transaction logs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from interpreter import imported_after, load_error_after, run_python

from core_monitor import BackendWarning, ConfigError, Event, Monitor, RunInfo, Text
from core_monitor.testing import MonitorContract
from wandb_monitor import (
    ESCAPE,
    WandbMonitor,
    find_run_dirs,
    read_config,
    read_exit_code,
    read_media,
    read_records,
    read_rows,
)
from wandb_monitor.reader import read_crash

#: Keep runs lean and local: no console capture, git, code saving or system-metrics process.
LEAN = {"console": "off", "save_code": False, "disable_git": True, "x_disable_stats": True}
OPTIONS = {"mode": "offline", "settings": LEAN}


def wandb_core_processes(pid: int | None = None) -> list[int]:
    """Pids of ``wandb-core`` processes descending from ``pid`` (default: this process)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        close = stat.rindex(")")
        names[int(entry)] = stat[stat.index("(") + 1 : close]
        parents[int(entry)] = int(stat[close + 2 :].split()[1])
    found, frontier = [], [pid or os.getpid()]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                frontier.append(child)
                if names[child].startswith("wandb-core"):
                    found.append(child)
    return found


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def only_run_dir(monitor: Monitor) -> Path:
    run = monitor.run
    dirs = find_run_dirs(run.log_dir, project=run.project, name=run.name)
    assert len(dirs) == 1, f"expected one run folder for {run.name!r}, found {dirs}"
    return dirs[0]


def records_of(run_dir: Path, kind: str) -> list:
    return [getattr(r, kind) for r in read_records(run_dir) if r.WhichOneof("record_type") == kind]


class TestWandbContract(MonitorContract):
    backend_class = WandbMonitor
    backend_options = OPTIONS
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_media = staticmethod(read_media)
    read_crash = staticmethod(read_crash)


@pytest.fixture
def monitor_factory(tmp_path):
    made: list[Monitor] = []

    def make(**kwargs) -> Monitor:
        kwargs.setdefault("project", "cases")
        kwargs.setdefault("name", f"run-{len(made)}")
        kwargs.setdefault("log_dir", tmp_path / "logs")
        kwargs.setdefault("wandb", OPTIONS)
        monitor = Monitor(["wandb"], strict=True, **kwargs)
        made.append(monitor)
        return monitor

    yield make
    for monitor in made:
        monitor.close()


def steps_of(rows, tag):
    return [step for t, step, _ in rows if t == tag]


# Cases ----------------------------------------------------------------------------------------


def test_c1_explicit_steps_are_stored_through_the_entry_point(monitor_factory):
    monitor = monitor_factory()
    for step in (0, 10, 20, 120):
        monitor.log({"loss": 0.3}, step=step)
    monitor.close()
    assert steps_of(read_rows(monitor.run), "loss") == [0, 10, 20, 120]


def test_a_crash_finishes_the_run_with_exit_code_1_and_a_close_with_0(tmp_path):
    crashed = RunInfo(project="cases", name="crashed", log_dir=tmp_path)
    backend = WandbMonitor(crashed, **OPTIONS)
    backend.monitor_write([Event("loss", 0.5, step, 1.0e9 + step) for step in range(3)])
    backend.monitor_flush()
    backend.monitor_crash(reason="the training process (pid 1) ended without closing")
    backend.monitor_close()
    assert read_exit_code(crashed) == 1
    assert read_rows(crashed) == [("loss", step, 0.5) for step in range(3)]

    closed = RunInfo(project="cases", name="closed", log_dir=tmp_path)
    backend = WandbMonitor(closed, **OPTIONS)
    assert read_exit_code(closed) is None, "no exit record while the run is open"
    backend.monitor_close()
    assert read_exit_code(closed) == 0
    assert read_exit_code(RunInfo(project="cases", name="never", log_dir=tmp_path)) is None


def test_c2_lower_step_keeps_its_row_and_wandb_step_only_counts_rows(monitor_factory):
    monitor = monitor_factory()
    monitor.log({"loss": 1.0}, step=5)
    monitor.log({"loss": 2.0}, step=3)
    monitor.log({"loss": 3.0})
    monitor.close()
    run_dir = only_run_dir(monitor)
    assert read_rows(monitor.run) == [("loss", 5, 1.0), ("loss", 3, 2.0), ("loss", 6, 3.0)]
    counters = [
        int(item.value_json)
        for history in records_of(run_dir, "history")
        for item in history.item
        if item.nested_key == ["_step"]
    ]
    assert counters == [0, 1, 2]


def test_step_metric_is_declared_hidden_and_the_x_axis_of_every_metric(monitor_factory):
    monitor = monitor_factory()
    monitor.log({"loss": 1.0}, step=1)
    monitor.close()
    metrics = records_of(only_run_dir(monitor), "metric")
    assert any(m.name == "global_step" and m.options.hidden for m in metrics)
    assert any(m.glob_name == "*" and m.step_metric == "global_step" for m in metrics)


@needs_proc
def test_c3_rows_survive_a_process_that_exits_without_close(tmp_path):
    log_dir = tmp_path / "logs"
    script = textwrap.dedent(
        f"""
        import os
        from core_monitor import Monitor
        monitor = Monitor(["wandb"], project="c3", name="no-close", log_dir={str(log_dir)!r},
                          wandb={OPTIONS!r}, dispatch="thread")  # wandb-core: our child
        for step in range(3):
            monitor.log({{"loss": step / 2}}, step=step)
        for entry in os.listdir("/proc"):  # the service this process started
            try:
                stat = open(f"/proc/{{entry}}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if "(wandb-core" in stat and fields[1] == str(os.getpid()):
                print(entry)
        """
    )
    result = run_python(script)
    (run_dir,) = find_run_dirs(log_dir, name="no-close")
    assert read_rows(RunInfo("c3", "no-close", log_dir=log_dir)) == [
        ("loss", 0, 0.0), ("loss", 1, 0.5), ("loss", 2, 1.0)
    ]
    assert records_of(run_dir, "exit"), "the run was not finished: no exit record"
    assert result.stdout.split(), "expected the script to find its wandb-core process"
    for pid in result.stdout.split():
        assert not Path(f"/proc/{pid}").exists(), f"wandb-core {pid} outlived its process"


@needs_proc
def test_sigterm_keeps_rows_already_logged(tmp_path):
    log_dir = tmp_path / "logs"
    script = textwrap.dedent(
        f"""
        import sys, time
        from core_monitor import Monitor
        monitor = Monitor(["wandb"], project="term", name="killed", log_dir={str(log_dir)!r},
                          wandb={OPTIONS!r})
        for step in (5, 3):
            monitor.log({{"loss": float(step)}}, step=step)
        print("logged", flush=True)
        time.sleep(300)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout.readline().strip() == "logged", child.stderr.read()
            child.terminate()
            child.wait(timeout=120)
        finally:
            child.kill()
    assert read_rows(RunInfo("term", "killed", log_dir=log_dir)) == [
        ("loss", 5, 5.0), ("loss", 3, 3.0)
    ]


def test_c9_non_finite_values_are_stored_as_wandb_json_tokens(monitor_factory):
    monitor = monitor_factory()
    monitor.log({"a": math.nan, "b": math.inf, "c": -math.inf, "d": -0.0}, step=0)
    monitor.close()
    run_dir = only_run_dir(monitor)
    (history,) = records_of(run_dir, "history")
    stored = {item.nested_key[0]: item.value_json for item in history.item}
    assert (stored["a"], stored["b"], stored["c"]) == ("NaN", "Infinity", "-Infinity")
    values = {tag: value for tag, _, value in read_rows(monitor.run)}
    assert math.isnan(values["a"]) and values["b"] == math.inf and values["c"] == -math.inf
    assert math.copysign(1.0, values["d"]) == -1.0


def test_c10_odd_config_is_stored_json_safe_in_the_run_record(monitor_factory):
    config = {"layers": [64, 64], "seed": None, "out": Path("x"), "opt": object(),
              "optimizer": {"lr": 3e-4}, "_private": 1}
    monitor = monitor_factory(config=config)
    monitor.close()
    (run,) = records_of(only_run_dir(monitor), "run")
    stored = {update.key: json.loads(update.value_json) for update in run.config.update}
    assert stored["layers"] == [64, 64]
    assert stored["seed"] is None
    assert stored["out"] == "x"
    assert stored["opt"] == "<object object>"  # the default repr, without its address
    assert stored["optimizer.lr"] == 3e-4
    assert stored[ESCAPE + "_private"] == 1


def test_one_offline_run_folder_per_monitor(monitor_factory, tmp_path):
    monitor = monitor_factory(config={"lr": 0.1})
    for step in range(5):
        monitor.log({"loss": 1.0 / (step + 1)}, step=step)
    monitor.flush()
    monitor.close()
    folders = list((tmp_path / "logs" / "wandb").glob("*run-*"))
    assert [f.name.startswith("offline-run-") for f in folders] == [True]
    assert len(records_of(folders[0], "run")) == 1


@needs_proc
def test_no_wandb_core_process_is_left_after_close(monitor_factory):
    assert wandb_core_processes() == [], "a wandb service was already running"
    monitor = monitor_factory()
    monitor.log({"loss": 1.0}, step=1)
    assert wandb_core_processes(), "expected the plugin to start a wandb-core process"
    monitor.close()
    assert wandb_core_processes() == []


@needs_proc
def test_user_runs_are_neither_taken_over_nor_finished(monitor_factory, tmp_path):
    import wandb

    settings = wandb.Settings(**LEAN)
    first = wandb.init(project="mine", name="first", dir=tmp_path / "user", settings=settings)
    try:
        check_user_runs_are_left_alone(monitor_factory(), first, settings, tmp_path)
    finally:
        # Ends the service the user's runs kept alive; its shutdown also completes their files
        # (the user's own finish() may return before the exit record is written).
        wandb.teardown()
    user_rows = [
        {item.nested_key[0]: item.value_json for item in history.item}
        for folder in find_run_dirs(tmp_path / "user", name="second")
        for history in records_of(folder, "history")
    ]
    assert [row.get("user") for row in user_rows] == ["1", "2"]
    assert all("global_step" not in row for row in user_rows)


def check_user_runs_are_left_alone(monitor, first, settings, tmp_path):
    import wandb

    assert wandb.run is first
    assert wandb.init(project="mine", dir=tmp_path / "user", settings=settings) is first
    first.finish()
    # With only the monitor's run open, the user's wandb.init() must start the user's own run.
    second = wandb.init(project="mine", name="second", dir=tmp_path / "user", settings=settings)
    assert (second.project, second.name) == ("mine", "second")
    wandb.log({"user": 1.0})
    monitor.log({"loss": 1.0}, step=7)
    monitor.close()
    assert wandb.run is second
    assert wandb_core_processes(), "close() tore down the service the user's run needs"
    second.log({"user": 2.0})
    second.finish()
    assert read_rows(monitor.run) == [("loss", 7, 1.0)]


def _wait_ended(pid: int) -> None:
    """Wait until ``pid`` (a child of this process) has exited: a zombie, or gone."""
    for _ in range(200):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not end within 10 s of SIGTERM")


@needs_proc
def test_a_service_killed_under_the_run_loses_nothing(tmp_path):
    """SIGTERM to wandb-core (a scheduler signals every process of a job; wandb-core exits at
    once, with what it held in memory): the backend raises ``TrackerLost`` and its writer
    starts it again at its cursor (the last flush). It continues the run in a new service, a
    second folder of the same run id, and is handed what the run's files lack: every row, the
    image and the config key are stored exactly once, and the run ends finished. The image and
    the config come before the flush: after it, media and config are delivered at least once
    (docs/operations/journal.md)."""
    import numpy as np

    from core_monitor import Image

    monitor = Monitor(["wandb"], project="cases", name="killed", config={"lr": 0.1},
                      log_dir=tmp_path, dispatch="process", wait=True, wandb=OPTIONS)

    def write(step: int) -> None:
        monitor.log({f"m{i}": step + i / 8 for i in range(3)}, step=step)

    pixels = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    for step in range(100):
        write(step)
    monitor.log({"img": Image(pixels)}, step=99)
    monitor.log_config({"late": 1})
    monitor.flush()  # the first folder holds these (and the run record)
    for step in range(100, 120):  # held in wandb-core's memory when it is killed
        write(step)
    writer = monitor._dispatch.writers[0].process
    (service,) = wandb_core_processes(writer.pid)
    os.kill(service, signal.SIGTERM)
    _wait_ended(service)
    with pytest.warns(BackendWarning, match="'wandb': wandb's service .* ended under the run "
                                            ".* started again at its cursor"):
        for step in range(120, 220):
            write(step)
        monitor.close()

    assert writer.returncode == 0 and monitor._dispatch.restarts == {}  # the same writer
    assert len(find_run_dirs(tmp_path)) == 2
    assert sorted(read_rows(monitor.run)) == sorted(
        (f"m{i}", s, s + i / 8) for s in range(220) for i in range(3))
    ((tag, at, image),) = read_media(monitor.run)
    assert (tag, at) == ("img", 99) and (image.array == pixels).all()
    assert read_config(monitor.run) == {"lr": 0.1, "late": 1}
    assert read_exit_code(monitor.run) == 0
    assert wandb_core_processes() == []


def test_tags_wandb_reserves_are_escaped_in_storage(monitor_factory):
    monitor = monitor_factory(wandb={**OPTIONS, "step_metric": "it"})
    monitor.log({"_step": 1.0, "it": 2.0, "~a": 3.0, "global_step": 4.0}, step=9)
    monitor.close()
    run_dir = only_run_dir(monitor)
    (history,) = records_of(run_dir, "history")
    keys = {item.nested_key[0] for item in history.item}
    assert {"~_step", "~it", "~~a", "global_step", "it"} <= keys
    assert sorted(read_rows(monitor.run)) == [  # the step metric is read from the run's file
        ("_step", 9, 1.0), ("global_step", 9, 4.0), ("it", 9, 2.0), ("~a", 9, 3.0)
    ]


def test_an_open_run_reads_as_a_prefix_and_is_complete_after_flush(monitor_factory):
    """wandb-core writes whole 32 KiB blocks: without a flush an open run reads as a prefix;
    flush() writes the block through (so a killed process keeps every row)."""
    monitor = monitor_factory()
    for step in range(300):
        monitor.log({f"tag{i}": step + i / 8 for i in range(8)}, step=step)
    before_flush = read_rows(monitor.run)
    monitor.flush()
    after_flush = read_rows(monitor.run)
    monitor.close()
    after_close = read_rows(monitor.run)
    assert len(after_close) == 300 * 8
    assert before_flush == after_close[: len(before_flush)]
    assert after_flush == after_close


def test_a_corrupt_transaction_log_is_reported(monitor_factory):
    monitor = monitor_factory()
    monitor.log({"loss": 1.0}, step=1)
    monitor.close()
    (file,) = only_run_dir(monitor).glob("run-*.wandb")
    data = bytearray(file.read_bytes())
    data[data.rindex(b"loss")] ^= 0xFF  # inside the history record's data
    file.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt"):
        read_rows(monitor.run)


def test_log_dir_wins_over_wandb_dir(monitor_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    monitor = monitor_factory()
    monitor.close()
    assert only_run_dir(monitor).parent == tmp_path / "logs" / "wandb"
    assert not (tmp_path / "elsewhere" / "wandb").exists()


def test_disabled_mode_writes_nothing_and_closes(monitor_factory, tmp_path):
    monitor = monitor_factory(wandb={**OPTIONS, "mode": "disabled"})
    monitor.log({"loss": 1.0}, step=1)
    monitor.close()
    assert find_run_dirs(tmp_path / "logs") == []
    assert monitor.failures == {}


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"mode": "dryrun"}, ["mode", "'dryrun'", "offline"]),
        ({"step_metric": "_step"}, ["step_metric", "'_step'"]),
        ({"step_metric": "a.b"}, ["step_metric", "'a.b'"]),
        ({"tags": "baseline"}, ["tags", "list"]),
        ({"entity": 3}, ["entity"]),
        ({"settings": ["console"]}, ["settings", "mapping"]),
        ({"settings": {"no_such_field": 1}}, ["settings", "no_such_field"]),
    ],
)
def test_bad_option_values_raise_config_error_naming_them(options, words, tmp_path):
    with pytest.raises(ConfigError) as raised:
        Monitor(["wandb"], project="p", log_dir=tmp_path, wandb=options)
    for word in words:
        assert word in str(raised.value)


def test_a_bad_setting_never_echoes_its_value(tmp_path):
    secret = "s3cr3t-" + "0" * 33
    with pytest.raises(ConfigError) as raised:
        Monitor(["wandb"], project="p", log_dir=tmp_path,
                wandb={"settings": {"api_key": secret, "console": "never"}})
    assert "console" in str(raised.value)
    assert secret not in str(raised.value)


def test_a_thousand_steps_read_back_exactly_also_by_wandbs_own_reader(monitor_factory):
    """The acceptance script: 1,000 steps incl. 5 then 3; wandb-core's reader agrees."""
    monitor = monitor_factory(name="thousand")
    steps = [*range(5), 5, 3, *range(6, 1001)]
    want = []
    for i, step in enumerate(steps):
        metrics = {"loss": 1.0 / (i + 1), "lr": i * 1e-7, "acc": (i % 97) / 97}
        monitor.log(metrics, step=step)
        want += [(tag, step, value) for tag, value in metrics.items()]
    monitor.close()
    run_dir = only_run_dir(monitor)
    rows = read_rows(monitor.run)
    assert sorted(rows, key=lambda r: (want.index(r))) == want
    assert len(rows) == len(want)
    assert [s for t, s, _ in rows if t == "loss"] == steps

    # `wandb leet inspect` reads the file with wandb-core's transaction-log reader, the one
    # `wandb sync` uses: it must see every row and a finished run. Reads files only.
    wandb_cli = Path(sys.executable).with_name("wandb")
    if not wandb_cli.exists():
        pytest.skip("no wandb command next to this Python")
    inspect = subprocess.run(
        [str(wandb_cli), "leet", "inspect", "--json", str(run_dir)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    records = [json.loads(line) for line in inspect.stdout.splitlines() if line.strip()]
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert [row["global_step"] for row in history] == steps
    assert [row["loss"] for row in history] == [1.0 / (i + 1) for i in range(len(steps))]
    assert records[-1]["type"] == "exit" and records[-1]["exit"].get("exit_code", 0) == 0


# Late config, lazy import, SDK check ----------------------------------------------------------


def test_log_config_merges_into_the_runs_config(monitor_factory):
    monitor = monitor_factory(config={"lr": 0.1, "layers": [64, 64]})
    monitor.log({"loss": 1.0}, step=0)
    monitor.log_config({"lr": 0.2, "batch": 32, "_seed": 7, "global_step": 1})
    monitor.log({"loss": 0.5}, step=1)
    monitor.close()
    assert monitor.failures == {}
    assert read_config(monitor.run) == {
        "lr": 0.2, "layers": [64, 64], "batch": 32, "_seed": 7, "global_step": 1
    }
    assert read_config(monitor.run) == dict(monitor.run.config)
    # wandb's own records: the start config in the run record, the update in a config record
    # with the same key escaping as at start.
    updates = {item.key: json.loads(item.value_json)
               for config in records_of(only_run_dir(monitor), "config")
               for item in config.update}
    assert updates["lr"] == 0.2 and updates[ESCAPE + "_seed"] == 7
    assert updates[ESCAPE + "global_step"] == 1
    assert read_rows(monitor.run) == [("loss", 0, 1.0), ("loss", 1, 0.5)]


def test_importing_the_plugin_imports_no_sdk():
    """A rank that writes nothing imports the plugin (the core checks options from the class)
    but must not pay for wandb and its dependencies."""
    statement = "from wandb_monitor import WandbMonitor, read_config, read_rows"
    assert imported_after(statement, ("wandb", "pydantic", "google.protobuf", "sentry_sdk")) == []


def test_check_sdk_passes_for_the_installed_wandb():
    assert WandbMonitor.check_sdk() == []


def test_a_wandb_without_an_internal_the_plugin_uses_fails_loudly(tmp_path):
    """Simulates a wandb release that dropped the active-run list the plugin hides its run from."""
    message = load_error_after(
        "from wandb.sdk import wandb_setup\nfrom core_monitor import Monitor\n"
        "del wandb_setup._WandbSetup.remove_active_run",
        f"Monitor(['wandb'], project='p', log_dir={str(tmp_path)!r}, strict=True, "
        f"wandb={OPTIONS!r}, dispatch='sync')",  # the changed SDK is this process's
    )
    assert "remove_active_run" in message and "wandb>=0.31,<0.32" in message
    assert find_run_dirs(tmp_path) == []  # refused before any run started


def test_media_are_in_the_history_rows_of_the_callers_step(tmp_path):
    """The ``.wandb`` log's own history record: the image row holds the caller's step as the
    step metric and a reference to a PNG wandb wrote under ``files/media/images/``; the
    histogram's counts and the text sit in the row of their step."""
    import numpy as np

    from core_monitor import Histogram, Image, Text

    logs = tmp_path / "logs"
    with Monitor(["wandb"], project="p", name="media", log_dir=logs, wandb=OPTIONS) as monitor:
        monitor.log({"img": Image(np.zeros((2, 3, 3), np.uint8))}, step=90)
        monitor.log({"w": Histogram([0.0, 1.0, 1.0], bins=2), "_note": Text("hi")}, step=60)
    (folder,) = find_run_dirs(logs)
    rows = []
    for record in read_records(folder):
        if record.HasField("history"):
            row = {}
            for item in record.history.item:
                key = item.key or ".".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    image_row = next(r for r in rows if "img._type" in r)
    assert image_row["global_step"] == 90 and image_row["img._type"] == "image-file"
    assert (folder / "files" / image_row["img.path"]).is_file()
    assert image_row["img.path"].startswith("media/images/")
    other = next(r for r in rows if "w._type" in r)
    assert other["global_step"] == 60 and sum(other["w.values"]) == 3
    assert other[ESCAPE + "_note"] == "hi"
    got = [(t, s) for t, s, _ in read_media(monitor.run)]  # wandb orders keys within a row
    assert got[0] == ("img", 90) and sorted(got[1:]) == [("_note", 60), ("w", 60)]


def test_from_deepspeed_reads_deepspeeds_team_as_the_entity():
    assert WandbMonitor.from_deepspeed({"team": "t", "group": "g", "project": "p"}) == {
        "entity": "t", "group": "g", "project": "p"}


def test_a_resumed_offline_run_keeps_counting_wandb_step_in_its_new_folder(tmp_path):
    """wandb's own row counter goes on across the offline folders of one resumed run (wandb
    would restart it at 0: offline it cannot ask its server), media rows included; the caller's
    steps stay as given."""
    log_dir = tmp_path / "logs"
    counters = []
    for session, steps in enumerate(([0, 1, 2], [2, 3], [4])):
        monitor = Monitor(["wandb"], project="cases", name="job", log_dir=log_dir, strict=True,
                          wandb=OPTIONS, resume="never" if session == 0 else "must",
                          dispatch="sync")
        for step in steps:
            monitor.log({"loss": float(step)}, step=step)
        if session == 1:
            monitor.log({"note": Text("media row")}, step=3)
        monitor.close()
    folders = sorted((log_dir / "wandb").glob("offline-run-*"))
    assert len(folders) == 3
    for folder in folders:
        counters.append([int(item.value_json) for history in records_of(folder, "history")
                         for item in history.item if item.nested_key == ["_step"]])
    assert counters == [[0, 1, 2], [3, 4, 5], [6]]
    rows = read_rows(RunInfo(project="cases", name="job", log_dir=log_dir))
    assert steps_of(rows, "loss") == [0, 1, 2, 2, 3, 4]


def test_system_charts_describe_the_training_process_not_the_writer(tmp_path):
    """In a writer process wandb's system monitor samples the training process (its
    ``x_stats_pid``): here the training process runs 40 idle threads more than any writer."""
    import threading

    release = threading.Event()
    idle = [threading.Thread(target=release.wait, daemon=True) for _ in range(40)]
    for thread in idle:
        thread.start()
    try:
        monitor = Monitor(["wandb"], project="cases", name="stats", log_dir=tmp_path,
                          dispatch="process", strict=True,
                          wandb={"mode": "offline", "settings": {
                              "console": "off", "x_stats_sampling_interval": 0.2}})
        for step in range(8):
            monitor.log({"loss": float(step)}, step=step)
            monitor.flush()
        monitor.close()
    finally:
        release.set()
    (run_dir,) = find_run_dirs(tmp_path, project="cases", name="stats")
    threads = [float(item.value_json) for stats in records_of(run_dir, "stats")
               for item in stats.item if item.key == "proc.cpu.threads"]
    assert threads, "wandb sampled no process (no stats record)"
    assert max(threads) >= 40, f"wandb sampled a process with {max(threads)} threads: the writer"
