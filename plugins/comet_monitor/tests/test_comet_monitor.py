"""The ``comet`` backend: the contract kit reading Comet's offline archives back, and what is
Comet's own: side by side with comet_ml's own ``OfflineExperiment``, the archive checked with
comet_ml's own validators, resume, the crash mark, the options, quietness, and what the SDK
does outside ``log_dir``."""

from __future__ import annotations

import json
import math
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from interpreter import load_error_after, run_python  # tests/interpreter.py
from ranks import one_process, two_ranks

from comet_monitor import (
    CRASH_TAG,
    TESTED,
    CometMonitor,
    read_archives,
    read_config,
    read_crash,
    read_media,
    read_others,
    read_rows,
    read_tags,
    run_dir,
)
from comet_monitor.backend import QUIET_EXPERIMENT
from comet_monitor.reader import Archive, read_archives_in
from core_monitor import ConfigError, Image, Monitor, RunInfo, Text
from core_monitor.testing import MonitorContract


class TestCometContract(MonitorContract):
    """Every check of the kit, offline (the default)."""

    backend_class = CometMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_media = staticmethod(read_media)
    read_crash = staticmethod(read_crash)


def test_the_entry_points_name_the_backend_and_its_reader():
    (backend,) = entry_points(group="experiment_monitors", name="comet")
    assert backend.load() is CometMonitor
    (found,) = entry_points(group="experiment_monitor_readers", name="comet")
    assert found.value == "comet_monitor.reader"


def test_check_sdk_passes_for_the_installed_comet_ml():
    assert CometMonitor.check_sdk() == []


def test_a_comet_ml_without_an_internal_the_plugin_uses_fails_loudly(tmp_path):
    """Simulates a comet_ml release whose offline archive (an internal of comet_ml) names its
    files otherwise: the reader could not read the runs back, so the backend refuses to start,
    naming what changed and the tested range, before any experiment exists."""
    message = load_error_after(
        "from comet_ml.config import config_constants\nfrom core_monitor import Monitor\n"
        "config_constants.OFFLINE_EXPERIMENT_JSON_FILE_NAME = 'experiment-v2.json'",
        f"Monitor(['comet'], project='p', log_dir={str(tmp_path)!r}, strict=True, "
        "dispatch='sync')",  # the changed SDK is this process's
    )
    assert "OFFLINE_EXPERIMENT_JSON_FILE_NAME" in message and TESTED in message
    assert not (tmp_path / "comet").exists()


def payloads(archive: Archive, kind: str) -> list[dict]:
    return [m["payload"] for m in archive.messages if m["type"] == kind]


#: Out of order, a repeated step, a huge step, values JSON and float32 cannot all hold alike.
POINTS = [(0, {"loss": 1 / 3, "acc": 0.1}), (7, {"loss": math.nan, "grad": math.inf}),
          (3, {"loss": -0.0, "grad": -math.inf}), (3, {"loss": 2 / 7}),
          (2**62, {"loss": 1e-320})]
CONFIG = {"lr": 0.001, "layers": 3, "optimizer.name": "adam", "amp": True}
LATE = {"lr": 0.002, "batch_size": 32}


def test_the_archive_holds_what_comets_own_offline_experiment_writes(tmp_path):
    """comet_ml's ``OfflineExperiment`` called directly with the same values (its public API,
    the settings the plugin passes) and the plugin's archive hold the same metric messages
    (name, value, step, in order), the same parameters and the same experiment name."""
    import comet_ml

    direct_dir = tmp_path / "direct"
    experiment = comet_ml.OfflineExperiment(project_name="side", offline_directory=str(
        direct_dir), **QUIET_EXPERIMENT)
    experiment.set_name("run1")
    experiment.log_parameters(CONFIG)
    for step, row in POINTS:
        experiment.log_metrics(row, step=step)
    experiment.log_parameters(LATE)
    experiment.end()

    with Monitor(["comet"], project="side", name="run1", log_dir=tmp_path / "ours",
                 config=CONFIG) as monitor:
        for step, row in POINTS:
            monitor.log(row, step=step)
        monitor.log_config(LATE)

    (theirs,) = read_archives_in(direct_dir)
    (ours,) = read_archives(monitor.run)

    def metrics(archive: Archive) -> list[tuple]:
        return [(m["metric"]["metricName"], m["metric"]["metricValue"], m["metric"]["step"])
                for m in payloads(archive, "metric_msg")]

    def params(archive: Archive) -> list[tuple]:
        return [(p["param"]["paramName"], p["param"]["paramValue"])
                for p in payloads(archive, "parameter_msg") if p["param"]["source"] == "manual"]

    assert metrics(ours) == metrics(theirs)
    # One log_metrics call per step: Comet writes its metrics by name.
    assert [name for name, _, _ in metrics(ours)] == [t for _, row in POINTS for t in sorted(row)]
    assert params(ours) == params(theirs)
    assert ours.experiment["project_name"] == theirs.experiment["project_name"] == "side"
    assert read_others(monitor.run)["Name"] == "run1"
    # And the reader gives back exactly what was logged.
    got = read_rows(monitor.run)
    want = [(t, s, v) for s, row in POINTS for t, v in sorted(row.items())]
    assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in want]
    for (_, _, value), (_, _, logged) in zip(got, want, strict=True):
        assert (math.isnan(value) and math.isnan(logged)) or (
            value == logged and math.copysign(1, value) == math.copysign(1, logged))
    assert read_config(monitor.run) == {**CONFIG, **LATE}


@pytest.mark.parametrize("users_first", [True, False], ids=["users-first", "plugins-first"])
def test_the_users_own_experiment_in_the_same_process_keeps_what_it_logged(tmp_path,
                                                                          users_first):
    """comet_ml ends its current experiment whenever another starts: the plugin's experiment
    (in the training process: dispatch "sync") neither ends the user's own nor becomes the
    current one, started before or after it; both archives hold their metrics."""
    import comet_ml

    def users_experiment():
        return comet_ml.OfflineExperiment(project_name="mine", offline_directory=str(
            tmp_path / "mine"), **QUIET_EXPERIMENT)

    experiment = users_experiment() if users_first else None
    monitor = Monitor(["comet"], project="side", name="run1", log_dir=tmp_path / "ours",
                      dispatch="sync")
    if experiment is None:
        experiment = users_experiment()
    assert comet_ml.get_global_experiment() is experiment
    experiment.log_metrics({"mine": 1.5}, step=4)
    monitor.log({"loss": 0.5}, step=3)
    monitor.close()
    assert comet_ml.get_global_experiment() is experiment
    experiment.end()

    (theirs,) = read_archives_in(tmp_path / "mine")
    assert [(m["metric"]["metricName"], m["metric"]["step"]) for m in
            payloads(theirs, "metric_msg") if m["metric"]["metricName"] == "mine"] == [
        ("mine", 4)]
    assert read_rows(monitor.run) == [("loss", 3, 0.5)]


def test_300_steps_of_10_tags_are_read_back_exactly_from_the_archive(tmp_path):
    logged = []
    with Monitor(["comet"], project="long", name="r", log_dir=tmp_path) as monitor:
        for step in range(300):
            row = {f"tag{i}": step + i / 7 + 1 / 3 for i in range(10)}
            monitor.log(row, step=step)
            logged += [(tag, step, value) for tag, value in row.items()]
    assert read_rows(monitor.run) == logged
    (archive,) = read_archives(monitor.run)
    assert archive.path.parent == run_dir(monitor.run) == tmp_path / "comet" / "long" / "r"


def test_the_archive_passes_comets_own_message_validation(tmp_path):
    """``comet upload`` has no dry run, and uploading needs Comet's server; what it does first
    with an archive, offline, is check ``experiment.json`` and every message against
    comet_ml's own JSON schemas (``comet_ml.schemas``, used by ``comet_ml.offline``). Here
    every file and message of a run with config, late config, images, text and a crash mark
    passes them."""
    import numpy as np
    from comet_ml import schemas

    run = RunInfo(project="valid", name="r", log_dir=tmp_path, config=CONFIG)
    backend = CometMonitor(run, tags=["a", "b"])
    from core_monitor.events import Event
    from core_monitor.media import MediaItem

    backend.monitor_write([Event("loss", 0.5, 1, 0.0), Event("acc", math.nan, 1, 0.0)])
    backend.monitor_write_media([
        MediaItem("img", 2, 0.0, Image(np.zeros((4, 5, 3), np.uint8), caption="c")),
        MediaItem("notes", 2, 0.0, Text("hello"))])
    backend.monitor_config(LATE)
    backend.monitor_crash("the training process died")
    backend.monitor_close()
    (archive,) = read_archives(run)
    schemas.get_experiment_file_validator().validate(archive.experiment)
    validators = {"metric_msg": schemas.get_metric_msg_validator(),
                  "parameter_msg": schemas.get_parameter_msg_validator(),
                  "log_other": schemas.get_log_other_msg_validator(),
                  "file_upload": schemas.get_upload_msg_validator()}
    kinds = [m["type"] for m in archive.messages]
    assert set(kinds) == set(validators), kinds
    for message in archive.messages:
        validators[message["type"]].validate(message["payload"])
    for payload in payloads(archive, "file_upload"):
        assert archive.file(payload["file_path"])  # the upload's file is in the archive


def test_resume_continues_the_experiment_in_a_second_archive(tmp_path):
    with Monitor(["comet"], project="p", name="r", log_dir=tmp_path) as first:
        first.log({"loss": 1.0}, step=4)
    with Monitor(["comet"], project="p", name="r", log_dir=tmp_path, resume="allow") as second:
        assert (second.run.resumed, second.run.last_step) == (True, 4)
        second.log({"loss": 0.5}, step=5)
    archives = read_archives(second.run)
    assert [a.experiment["resume_strategy"] for a in archives] == ["create", "get"]
    assert archives[0].key == archives[1].key
    assert archives[1].path.name.startswith(archives[0].key + "-")
    assert read_rows(second.run) == [("loss", 4, 1.0), ("loss", 5, 0.5)]
    # A new run of the same name without resume is a new experiment; the reader reads it.
    with Monitor(["comet"], project="p", name="r", log_dir=tmp_path) as third:
        third.log({"loss": 9.0}, step=0)
    assert read_rows(third.run) == [("loss", 0, 9.0)]
    assert len(list(run_dir(third.run).glob("*.zip"))) == 3


def test_a_crash_is_marked_on_the_experiment_and_every_row_kept(tmp_path):
    from core_monitor.events import Event

    run = RunInfo(project="p", name="crashed", log_dir=tmp_path)
    backend = CometMonitor(run)
    backend.monitor_write([Event("loss", 0.25, 3, 0.0)])
    backend.monitor_crash("the training process (pid 1) ended without closing the monitor")
    backend.monitor_close()
    assert read_crash(run) == "the training process (pid 1) ended without closing the monitor"
    assert CRASH_TAG in read_tags(run)
    assert read_rows(run) == [("loss", 3, 0.25)]
    normal = RunInfo(project="p", name="fine", log_dir=tmp_path)
    CometMonitor(normal).monitor_close()
    assert read_crash(normal) is None and read_tags(normal) == []


def test_every_ranks_experiment_holds_the_jobs_group(tmp_path, monkeypatch):
    """``rank_zero_only=False``, two ranks: each rank's experiment (``ddp``, ``ddp-rank1``, an
    archive each) holds the "Other" value ``job.group`` = ``ddp`` in its archive, the column
    Comet's project view groups them by; a job of one process holds none."""
    from comet_monitor.reader import read_group

    runs = two_ranks("comet", tmp_path, monkeypatch)
    alone = one_process("comet", tmp_path, monkeypatch)
    assert [read_others(run)["Name"] for run in runs] == ["ddp", "ddp-rank1"]
    assert [read_others(run).get("job.group") for run in [*runs, alone]] == ["ddp", "ddp", None]
    assert [read_group(run) for run in [*runs, alone]] == ["ddp", "ddp", None]
    assert [read_rows(run) for run in runs] == [[("loss", 0, 0.0)], [("loss", 0, 1.0)]]


def test_what_was_flushed_survives_the_writer_being_killed(tmp_path):
    """Comet writes its archive only at ``end()``; ``monitor_flush`` writes it as it stands.
    A process that flushed and then died without ending the experiment (``os._exit``: no
    ``atexit``, as after SIGKILL) leaves an archive holding every row it flushed."""
    run_python(f"""
        import os
        from comet_monitor import CometMonitor
        from core_monitor import RunInfo
        from core_monitor.events import Event
        backend = CometMonitor(RunInfo(project="p", name="killed", log_dir={str(tmp_path)!r},
                                       config={{"lr": 0.1}}))
        backend.monitor_write([Event("loss", 0.5, 0, 0.0), Event("loss", 0.25, 1, 0.0)])
        backend.monitor_flush()
        backend.monitor_write([Event("loss", 0.125, 2, 0.0)])  # not flushed: lost
        os._exit(1)
    """, check=False)
    run = RunInfo(project="p", name="killed", log_dir=tmp_path)
    assert read_rows(run) == [("loss", 0, 0.5), ("loss", 1, 0.25)]
    assert read_config(run) == {"lr": 0.1}
    assert [p.name for p in run_dir(run).glob("*.partial")] == []


def test_options_reach_the_experiment(tmp_path):
    key = "a" * 20 + "0123456789ab"
    with Monitor(["comet"], project="p", name="r", log_dir=tmp_path,
                 comet={"project": "comet-project", "workspace": "team", "tags": ["x", "y"],
                        "experiment_key": key}) as monitor:
        monitor.log({"loss": 1.0}, step=0)
    (archive,) = read_archives(monitor.run)
    assert archive.path.name == f"{key}.zip" and archive.key == key
    assert (archive.experiment["project_name"], archive.experiment["workspace"]) == (
        "comet-project", "team")
    assert sorted(read_tags(monitor.run)) == ["x", "y"]  # Comet keeps tags as a set
    with pytest.raises(ConfigError, match=f"archive of experiment {key}.*resume='allow'"):
        Monitor(["comet"], project="p", name="r", log_dir=tmp_path, strict=True,
                comet={"experiment_key": key})


@pytest.mark.parametrize("comet_project", [True, False])
def test_comet_project_leaves_the_project_to_comets_configuration(tmp_path, monkeypatch,
                                                                 comet_project):
    """``comet_project=True`` (what a DeepSpeed ``comet`` section without ``project`` gives):
    the project ``COMET_PROJECT_NAME`` names, as ``comet_ml.start(project=None)`` takes it;
    by default the run's project."""
    monkeypatch.setenv("COMET_PROJECT_NAME", "from-comet-config")
    with Monitor(["comet"], project="p", name="r", log_dir=tmp_path,
                 comet={"comet_project": comet_project}) as monitor:
        monitor.log({"loss": 1.0}, step=4)
    (archive,) = read_archives(monitor.run)
    assert archive.experiment["project_name"] == ("from-comet-config" if comet_project else "p")
    assert read_rows(monitor.run) == [("loss", 4, 1.0)]


@pytest.mark.parametrize(("options", "words"), [
    ({"experiment_key": "short"}, ["experiment_key='short'", "32 to 50 letters and digits"]),
    ({"project": ""}, ["project=''"]),
    ({"tags": ["ok", ""]}, ["tags=['ok', '']", "a list of non-blank str"]),
    ({"workspace": "  "}, ["workspace='  '", "a non-blank str or None"]),
    ({"online": "yes"}, ["online='yes'"]),
])
def test_a_bad_option_is_refused_naming_it(tmp_path, options, words):
    with pytest.raises(ConfigError) as raised:
        Monitor(["comet"], project="p", log_dir=tmp_path / "logs", comet=options)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_keeps_comets_own_lines_off_the_terminal(tmp_path, quiet):
    """In a fresh interpreter (comet_ml's log handler holds the ``sys.stderr`` of the moment
    comet_ml was imported): ``quiet=False`` shows Comet's ``comet upload ...`` hint."""
    done = run_python(f"""
        from core_monitor import Monitor
        with Monitor(["comet"], project="p", name="r", log_dir={str(tmp_path)!r},
                     dispatch="sync", comet={{"quiet": {quiet}}}) as monitor:
            monitor.log({{"loss": 1.0}}, step=0)
    """)
    shown = done.stdout + done.stderr
    assert ("COMET" in shown) is not quiet, shown
    assert ("comet upload" in shown) is not quiet, shown


def test_comets_import_hooks_are_off_and_nothing_is_written_outside_log_dir(tmp_path):
    """A fresh interpreter without ``COMET_DISABLE_AUTO_LOGGING`` (the plugin sets it before it
    imports comet_ml), ``HOME``, ``TMPDIR`` and the working folder under ``tmp_path``: after a
    run with scalars, config, an image and text, comet_ml has no import hook installed and
    nothing was written anywhere but the run's folder, except matplotlib's font cache
    (``MPLCONFIGDIR``): comet_ml's ``log_image`` imports matplotlib where it is installed."""
    home, tmp, cwd, logs = (tmp_path / name for name in ("home", "tmp", "cwd", "logs"))
    for folder in (home, tmp, cwd):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "COMET_DISABLE_AUTO_LOGGING"}
    env.update(HOME=str(home), TMPDIR=str(tmp))
    done = run_python(f"""
        import json, os, sys
        import numpy as np
        from core_monitor import Image, Monitor, Text
        with Monitor(["comet"], project="p", name="r", log_dir={str(logs)!r}, dispatch="sync",
                     config={{"lr": 0.1}}) as monitor:
            monitor.log({{"loss": 0.5, "img": Image(np.zeros((3, 3, 3), np.uint8)),
                         "notes": Text("hi")}}, step=1)
        print(json.dumps({{
            "auto_logging": os.environ.get("COMET_DISABLE_AUTO_LOGGING"),
            "hooks": [type(f).__name__ for f in sys.meta_path if "Comet" in type(f).__name__],
        }}))
    """, env=env, cwd=cwd)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {"auto_logging": "1", "hooks": []}
    mpl = Path(os.environ["MPLCONFIGDIR"])
    outside = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                     if p.is_file() and logs not in p.parents and mpl not in p.parents)
    assert outside == []
    assert [p.suffix for p in (logs / "comet" / "p" / "r").iterdir()] == [".zip"]
