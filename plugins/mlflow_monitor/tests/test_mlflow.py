"""The MLflow backend against a real ``mlflow server`` on 127.0.0.1 and a local SQLite store.

Everything is read back through ``MlflowClient`` (``get_metric_history``, run params and tags):
the tracking server's own API, never the core. The server is started once per session
(``mlflow_server``), stopped by its process group at the end; one test stops it and starts it
again, another freezes it (SIGSTOP) to act as a hung server.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pytest
from interpreter import run_python

pytest.importorskip("mlflow_monitor")

from core_monitor import (
    BackendWarning,
    ConfigError,
    Event,
    Histogram,
    Image,
    Monitor,
    RunInfo,
    Text,
    hookimpl,
)
from core_monitor.testing import MonitorContract
from mlflow_monitor import (
    CRASH_TAG,
    ESCAPE,
    MEDIA_ESCAPE,
    MlflowMonitor,
    _compat,
    client_for,
    escape_key,
    find_run,
    local_store_uri,
    media_key,
    media_tag,
    param_value,
    read_config,
    read_media,
    read_rows,
    storage,
    unescape_key,
)
from mlflow_monitor.reader import read_crash

#: What the server process sees besides this process's (offline, SDK folders in a temp dir).
SERVER_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}
START_TIMEOUT = 180.0
#: Short limits for the tests that make the server fail: an attempt waits 1 s, a flush 1 s for
#: what is queued, a close 1 s.
FAST_FAIL = {"request_timeout": 1.0, "flush_wait": 1.0, "close_wait": 1.0}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MlflowServer:
    """A real ``mlflow server`` process on 127.0.0.1 with a SQLite store under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        #: Seconds each start took until ``/health`` answered ``OK``.
        self.start_seconds: list[float] = []

    def start(self) -> None:
        (self.root / "artifacts").mkdir(parents=True, exist_ok=True)
        mlflow_cli = Path(sys.executable).with_name("mlflow")
        command = [
            str(mlflow_cli) if mlflow_cli.exists() else "mlflow", "server",
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{(self.root / 'mlflow.db').as_posix()}",
            "--default-artifact-root", (self.root / "artifacts").as_uri(),
            "--no-serve-artifacts",
        ]
        log = (self.root / "server.log").open("ab")
        began = time.monotonic()
        self.process = subprocess.Popen(
            command, cwd=self.root, env={**os.environ, **SERVER_ENV}, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        while time.monotonic() - began < START_TIMEOUT:
            if self.process.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.process.returncode}:\n"
                            f"{self.log()[-4000:]}")
            if self.healthy():
                self.start_seconds.append(time.monotonic() - began)
                return
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"mlflow server not healthy after {START_TIMEOUT} s:\n{self.log()[-4000:]}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                return answer.read().strip() == b"OK"
        except OSError:
            return False

    def send(self, signum: int) -> None:
        """Send ``signum`` to the server's whole process group (its workers too)."""
        assert self.process is not None
        os.killpg(self.process.pid, signum)

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop the process group by PID; SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.send(signal.SIGCONT)  # a frozen server must be able to exit
            self.send(signum)
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.process.wait(timeout=30)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the session (creating one runs MLflow's migrations, ~5 s)."""
    return local_store_uri(tmp_path_factory.mktemp("mlflow-sqlite"))


# The contract kit, against the server and against a local store ------------------------------


class TestMlflowServerContract(MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return MlflowMonitor

    @pytest.fixture
    def backend_options(self, mlflow_server):
        return {"tracking_uri": mlflow_server.uri}

    @pytest.fixture
    def read_rows(self, mlflow_server):
        return functools.partial(read_rows, tracking_uri=mlflow_server.uri)

    @pytest.fixture
    def read_config(self, mlflow_server):
        return functools.partial(read_config, tracking_uri=mlflow_server.uri)

    @pytest.fixture
    def read_media(self, mlflow_server):
        return functools.partial(read_media, tracking_uri=mlflow_server.uri)

    @pytest.fixture
    def read_crash(self, mlflow_server):
        return functools.partial(read_crash, tracking_uri=mlflow_server.uri)


class TestMlflowSqliteContract(MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return MlflowMonitor

    @pytest.fixture
    def backend_options(self, sqlite_uri):
        return {"tracking_uri": sqlite_uri}

    @pytest.fixture
    def read_rows(self, sqlite_uri):
        return functools.partial(read_rows, tracking_uri=sqlite_uri)

    @pytest.fixture
    def read_config(self, sqlite_uri):
        return functools.partial(read_config, tracking_uri=sqlite_uri)

    @pytest.fixture
    def read_media(self, sqlite_uri):
        return functools.partial(read_media, tracking_uri=sqlite_uri)

    @pytest.fixture
    def read_crash(self, sqlite_uri):
        return functools.partial(read_crash, tracking_uri=sqlite_uri)


@pytest.fixture
def monitor_factory(tmp_path, mlflow_server):
    """Monitors logging to the session's server (strict unless told otherwise)."""
    made: list[Monitor] = []

    def make(backends=("mlflow",), **kwargs) -> Monitor:
        kwargs.setdefault("project", "cases")
        kwargs.setdefault("name", f"case-{time.time_ns()}")
        kwargs.setdefault("log_dir", tmp_path / "logs")
        kwargs.setdefault("strict", True)
        options = kwargs.setdefault("mlflow", {})
        options.setdefault("tracking_uri", mlflow_server.uri)
        monitor = Monitor(list(backends), **kwargs)
        made.append(monitor)
        return monitor

    yield make
    for monitor in made:
        monitor.close()


# Storage: steps, values, tags, config -----------------------------------------------------------


def test_a_crash_ends_the_run_failed_with_the_reason_as_a_tag(tmp_path):
    crashed = RunInfo(project="cases", name="crashed", log_dir=tmp_path)
    backend = MlflowMonitor(crashed)
    backend.monitor_write([Event("loss", 0.5, step, 1.0e9 + step) for step in range(3)])
    backend.monitor_crash(reason="the training process (pid 1) ended without closing")
    backend.monitor_close()
    found = find_run(crashed)
    assert found.info.status == "FAILED"
    assert found.data.tags[CRASH_TAG] == "the training process (pid 1) ended without closing"
    assert read_rows(crashed) == [("loss", step, 0.5) for step in range(3)]

    closed = RunInfo(project="cases", name="closed", log_dir=tmp_path)
    MlflowMonitor(closed).monitor_close()
    assert find_run(closed).info.status == "FINISHED"
    assert CRASH_TAG not in find_run(closed).data.tags


def test_importing_the_plugin_imports_no_mlflow():
    code = "import sys, mlflow_monitor; print(sorted(m for m in sys.modules if 'mlflow' == m " \
           "or m.startswith('mlflow.')))"
    assert run_python(code, timeout=120).stdout.strip() == "[]"


def test_ten_thousand_steps_of_eight_scalars_read_back_exactly(monitor_factory, mlflow_server):
    monitor = monitor_factory()
    want = []
    for step in range(10_000):
        row = {f"train/scalar_{j}": step * 1e-3 + j / 7 for j in range(8)}
        monitor.log(row, step=step)
        want += [(tag, step, value) for tag, value in row.items()]
    monitor.flush()
    got = read_rows(monitor.run, tracking_uri=mlflow_server.uri)
    assert sorted(got) == sorted(want)
    for j in range(8):  # each tag's history in the logged order, every value float64-exact
        tag = f"train/scalar_{j}"
        assert [(s, v) for t, s, v in got if t == tag] == [(s, v) for t, s, v in want if t == tag]


def test_escaped_tags_round_trip_and_are_stored_as_documented(monitor_factory, mlflow_server):
    tags = ["loss 🔥", "a//b", "k/", "/x", "./x", "..x", "a,b=c#d+e", "::x", ".", ":", "é/ü",
            "x" * 250, "with space/and:colon", "百分比%"]
    monitor = monitor_factory()
    monitor.log({tag: float(i) for i, tag in enumerate(tags)}, step=3)
    monitor.flush()
    stored = find_run(monitor.run, tracking_uri=mlflow_server.uri).data.metrics
    assert sorted(stored) == sorted(escape_key(tag) for tag in tags)
    assert {"a//b", "loss 🔥", "::x"}.isdisjoint(stored)  # MLflow refuses those or they clash
    assert {"with space/and:colon", "é/ü", "x" * 250} <= set(stored)  # valid ones kept as is
    assert escape_key("loss 🔥") == ESCAPE + "loss :1f525:"
    assert escape_key("a//b") == ESCAPE + "a:2f::2f:b"
    assert escape_key("::x") == ":::3a::3a:x"
    assert all(unescape_key(escape_key(tag)) == tag for tag in tags)
    assert sorted(read_rows(monitor.run, tracking_uri=mlflow_server.uri)) == sorted(
        (tag, 3, float(i)) for i, tag in enumerate(tags)
    )


def test_a_tag_too_long_for_mlflow_is_reported_and_the_rest_of_the_call_is_stored(
    monitor_factory, mlflow_server
):
    monitor = monitor_factory(strict=False)
    with pytest.warns(BackendWarning, match="250-character key limit"):
        monitor.log({"ok": 1.0, "y" * 251: 2.0}, step=1)
        monitor.flush()  # the backend's worker failed: reported on the caller's next call
    assert read_rows(monitor.run, tracking_uri=mlflow_server.uri) == [("ok", 1, 1.0)]
    assert monitor.failures == {"mlflow": 1}
    with pytest.warns(BackendWarning, match="1 scalar"):
        monitor.close()


def test_identical_repeated_points_are_all_kept_in_logged_order(monitor_factory, mlflow_server):
    monitor = monitor_factory()
    for _ in range(3):
        monitor.log({"loss": 0.5}, step=7)
    monitor.write_events([("loss", 0.5, 7), ("loss", 0.5, 7), ("loss", 0.25, 2)])
    monitor.flush()
    assert read_rows(monitor.run, tracking_uri=mlflow_server.uri) == [
        ("loss", 7, 0.5)] * 5 + [("loss", 2, 0.25)]
    history = client_for(monitor.run, mlflow_server.uri).get_metric_history(
        find_run(monitor.run, tracking_uri=mlflow_server.uri).info.run_id, "loss")
    stamps = [m.timestamp for m in history]
    assert stamps == sorted(set(stamps)), "timestamps must be distinct and increasing per tag"


def test_infinities_are_stored_as_mlflow_stores_them_and_restored_on_read(
    monitor_factory, mlflow_server
):
    monitor = monitor_factory()
    monitor.log({"up": math.inf, "down": -math.inf, "nan": math.nan}, step=0)
    monitor.flush()
    stored = find_run(monitor.run, tracking_uri=mlflow_server.uri).data.metrics
    assert stored["up"] == sys.float_info.max and stored["down"] == -sys.float_info.max
    values = {t: v for t, _, v in read_rows(monitor.run, tracking_uri=mlflow_server.uri)}
    assert values["up"] == math.inf and values["down"] == -math.inf and math.isnan(values["nan"])


def test_config_is_stored_as_params_and_read_back(monitor_factory, mlflow_server):
    config = {"lr": 3e-4, "layers": [64, 64], "optimizer": {"name": "adam", "betas": [0.9, 0.99]},
              "seed": None, "flag": True, "note": "n" * 7000, "odd key!": 1, "big": 2**70}
    monitor = monitor_factory(config=config)
    monitor.log_config({"epochs": 3, "lr": 1e-3})
    monitor.close()
    found = find_run(monitor.run, tracking_uri=mlflow_server.uri)
    params = found.data.params
    assert params["lr"] == "0.0003"  # params cannot change: the first value stays
    assert found.data.tags["mlflow_monitor.config.lr"] == "0.001"
    assert params["layers"] == "[64, 64]"
    assert params["optimizer.name"] == "adam" and params["optimizer.betas"] == "[0.9, 0.99]"
    assert params["seed"] == "null" and params["flag"] == "True"
    assert params["note"] == "n" * 6000  # MLflow's 6,000-character limit
    assert params[escape_key("odd key!")] == "1" and params["big"] == str(2**70)
    assert read_config(monitor.run, tracking_uri=mlflow_server.uri) == {
        key: param_value(value) for key, value in monitor.run.config.items()
    }
    assert read_config(monitor.run, tracking_uri=mlflow_server.uri)["lr"] == "0.001"
    assert found.info.status == "FINISHED"


def test_no_config_reads_back_empty(monitor_factory, mlflow_server):
    monitor = monitor_factory()
    monitor.close()
    assert read_config(monitor.run, tracking_uri=mlflow_server.uri) == {}


# Media: images and text as run artifacts -------------------------------------------------------


def test_media_are_mlflow_images_and_text_files_at_the_callers_steps(
    monitor_factory, mlflow_server, tmp_path
):
    """Read through MLflow's own client, not the plugin's reader: ``log_image``'s PNG files
    under ``images/`` (named by key and step, as MLflow's UI reads them), the text files under
    ``text/``, the run tag MLflow sets for images; the histogram is skipped and reported."""
    np = pytest.importorskip("numpy")
    from PIL import Image as PILImage

    rng = np.random.default_rng(16)
    rgb = rng.integers(0, 256, size=(9, 11, 3), dtype=np.uint8)
    rgba = rng.integers(0, 256, size=(4, 6, 4), dtype=np.uint8)
    grey = rng.integers(0, 256, size=(5, 3), dtype=np.uint8)
    note = "# Step 5\r\n*predicted*: `cat` — 猫\n"
    monitor = monitor_factory()
    with pytest.warns(BackendWarning, match="does not store histogram"):
        monitor.log({"loss": 0.5, "val/rgb": Image(rgb, caption="no captions in MLflow"),
                     "w": Histogram([1.0, 2.0, 2.5], bins=2), "notes": Text(note)}, step=5)
    monitor.log({"rgba": Image(rgba), "grey": Image(grey)}, step=2**63 - 1)
    monitor.log({"val/rgb": Image(rgb[::-1].copy())}, step=1)
    monitor.flush()
    assert monitor.media_skipped == {("mlflow", "histogram"): 1}

    run_id = find_run(monitor.run, tracking_uri=mlflow_server.uri).info.run_id
    client = client_for(monitor.run, mlflow_server.uri)
    assert client.get_run(run_id).data.tags["mlflow.loggedImages"] == "True"
    pngs = sorted((p.path for p in client.list_artifacts(run_id, "images")
                   if p.path.endswith(".png")), key=lambda p: p.split("+timestamp+")[1])
    assert [p.split("+timestamp+")[0] for p in pngs] == [
        "images/val~rgb+step+5", f"images/rgba+step+{2**63 - 1}",
        f"images/grey+step+{2**63 - 1}", "images/val~rgb+step+1"]
    for path, (pixels, mode) in zip(pngs, [(rgb, "RGB"), (rgba, "RGBA"), (grey, "L"),
                                           (rgb[::-1], "RGB")], strict=True):
        with PILImage.open(client.download_artifacts(run_id, path, str(tmp_path))) \
                as picture:
            assert picture.format == "PNG" and picture.mode == mode
            assert np.array_equal(np.asarray(picture), pixels)
    texts = [p.path for p in client.list_artifacts(run_id, "text")]
    assert len(texts) == 1 and texts[0].startswith("text/notes+step+5+timestamp+")
    local = Path(client.download_artifacts(run_id, texts[0], str(tmp_path)))
    assert local.read_bytes() == note.encode("utf-8")

    got = read_media(monitor.run, tracking_uri=mlflow_server.uri)  # the plugin's reader agrees
    assert [(t, s, type(v).__name__) for t, s, v in got] == [
        ("val/rgb", 5, "Image"), ("notes", 5, "Text"), ("rgba", 2**63 - 1, "Image"),
        ("grey", 2**63 - 1, "Image"), ("val/rgb", 1, "Image")]
    assert got[1][2].text == note and np.array_equal(got[3][2].array, grey[:, :, None])
    assert read_rows(monitor.run, tracking_uri=mlflow_server.uri) == [("loss", 5, 0.5)]


def test_media_tags_are_escaped_reversibly_and_a_too_long_one_is_reported(
    tmp_path, monkeypatch, sqlite_uri
):
    tags = ["loss 🔥", "acc,top5", "--x", "a:b", "é/ü", "x" * storage.MAX_MEDIA_KEY, "val/ok",
            "/lead", "a~b", "n-2d-"]
    assert media_key("loss 🔥") == MEDIA_ESCAPE + "loss -1f525-"
    assert media_key("acc,top5") == "--acc-2c-top5" and media_key("--x") == "---2d--2d-x"
    assert media_key("val/ok") == "val/ok" and media_key("n-2d-") == "n-2d-"
    assert all(media_tag(media_key(tag)) == tag for tag in tags)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    monitor = Monitor(["mlflow"], project="media-tags", name=f"tags-{time.time_ns()}",
                      mlflow={"tracking_uri": sqlite_uri})
    with pytest.warns(BackendWarning) as reported:  # the worker's failure, reported at close
        monitor.log({**{tag: Text(f"text of {tag}") for tag in tags}, "y" * 151: Text("lost")},
                    step=1)
        monitor.close()
    # two warnings: the refused tag (reported by the worker at close) and the close report
    # of what was not delivered; the outbox reports at close too, so their order is not fixed
    messages = [str(w.message) for w in reported if w.category is BackendWarning]
    assert len(messages) == 2, messages
    refused = [m for m in messages if "longer than 150 characters" in m]
    report = [m for m in messages if "1 media value(s)" in m and "not delivered" in m]
    assert len(refused) == 1 and len(report) == 1 and refused != report, messages
    assert monitor.failures == {"mlflow": 1}
    got = read_media(monitor.run, tracking_uri=sqlite_uri)
    assert [(t, s, v.text) for t, s, v in got] == [(tag, 1, f"text of {tag}") for tag in tags]
    assert sorted(tmp_path.iterdir()) == before  # nothing in the current directory (./mlruns)
    run_id = find_run(monitor.run, tracking_uri=sqlite_uri).info.run_id
    folder = Path(sqlite_uri[len("sqlite:///"):]).parent / "artifacts"
    assert len(list(folder.glob(f"**/{run_id}/artifacts/text/*.md"))) == len(tags)


# Batching -------------------------------------------------------------------------------------


def test_rows_wait_in_the_buffer_until_a_threshold_or_flush(monitor_factory, mlflow_server):
    # sync: each log() has reached the backend when it returns, so the reads below see what
    # the buffer sent, not how far a background writer has got (a race seen under load).
    monitor = monitor_factory(mlflow={"batch_size": 16, "flush_secs": 3600}, dispatch="sync")
    monitor.log({f"t{j}": 1.0 for j in range(8)}, step=0)
    assert read_rows(monitor.run, tracking_uri=mlflow_server.uri) == []
    monitor.log({f"t{j}": 2.0 for j in range(8)}, step=1)  # 16 buffered: sent
    assert len(read_rows(monitor.run, tracking_uri=mlflow_server.uri)) == 16
    monitor.log({"t0": 3.0}, step=2)
    assert len(read_rows(monitor.run, tracking_uri=mlflow_server.uri)) == 16
    monitor.flush()
    assert len(read_rows(monitor.run, tracking_uri=mlflow_server.uri)) == 17


def test_flush_secs_zero_sends_every_log_call(monitor_factory, mlflow_server):
    # Read right after log(): the backend must run on this thread to have sent it by then.
    monitor = monitor_factory(mlflow={"flush_secs": 0}, dispatch="sync")
    monitor.log({"loss": 1.0}, step=0)
    assert read_rows(monitor.run, tracking_uri=mlflow_server.uri) == [("loss", 0, 1.0)]


def test_a_write_of_more_than_a_batch_is_split_into_requests(monitor_factory, mlflow_server):
    monitor = monitor_factory(mlflow={"batch_size": 7})
    monitor.log({f"m{j}": float(j) for j in range(50)}, step=4)
    monitor.flush()
    assert sorted(read_rows(monitor.run, tracking_uri=mlflow_server.uri)) == sorted(
        (f"m{j}", 4, float(j)) for j in range(50))


# Runs, experiments, ranks, the user's own MLflow use -----------------------------------------


def test_default_store_is_sqlite_under_log_dir_and_nothing_is_written_elsewhere(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monitor = Monitor(["mlflow"], project="local", name="r", log_dir=tmp_path / "logs",
                      config={"lr": 0.1}, strict=True)
    monitor.log({"loss": 0.5}, step=2)
    monitor.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env", "logs"]
    # mlflow wrote only its folder; .journal is the core's run journal (docs/operations/journal.md)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [".journal", "mlflow"]
    assert (tmp_path / "logs" / "mlflow" / "mlflow.db").is_file()
    assert read_rows(monitor.run) == [("loss", 2, 0.5)]
    assert read_rows(monitor.run, tracking_uri=local_store_uri(tmp_path / "logs")) == [
        ("loss", 2, 0.5)]
    assert read_config(monitor.run) == {"lr": "0.1"}
    experiment = client_for(monitor.run).get_experiment_by_name("local")
    assert experiment.artifact_location.endswith("logs/mlflow/artifacts")


@pytest.mark.parametrize("folder", ["a%20b", "what?", "50% off"])
def test_a_log_dir_with_percent_or_question_mark_keeps_store_and_artifacts_inside_it(
    tmp_path, monkeypatch, folder
):
    """SQLAlchemy percent-decodes a ``sqlite:///`` path and ends it at ``?``: the local store's
    URI quotes both, so the database and the artifacts land in ``log_dir`` as named. (MLflow
    makes the database's folder from the URI undecoded: an empty stray folder is its own.)"""
    np = pytest.importorskip("numpy")
    monkeypatch.chdir(tmp_path)
    log_dir = tmp_path / folder / "logs"
    monitor = Monitor(["mlflow"], project="local", name="r", log_dir=log_dir, strict=True)
    monitor.log({"loss": 0.5, "img": Image(np.zeros((2, 3, 3), dtype=np.uint8))}, step=2)
    monitor.close()
    written = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {folder}
    assert (log_dir / "mlflow" / "mlflow.db").is_file()
    pngs = list((log_dir / "mlflow" / "artifacts").rglob("*.png"))
    assert [p.name.split("+timestamp+")[0] for p in pngs] == ["img+step+2"]
    assert read_rows(monitor.run) == [("loss", 2, 0.5)]


def test_experiment_option_and_run_tags(monitor_factory, mlflow_server):
    monitor = monitor_factory(mlflow={"experiment": "elsewhere", "tags": {"team": "vision",
                                                                          "try": 2}})
    monitor.log({"loss": 1.0}, step=0)
    monitor.close()
    found = find_run(monitor.run, tracking_uri=mlflow_server.uri, experiment="elsewhere")
    assert found.data.tags["team"] == "vision" and found.data.tags["try"] == "2"
    assert found.info.run_name == monitor.run.name
    with pytest.raises(LookupError):
        find_run(monitor.run, tracking_uri=mlflow_server.uri)  # not in the project's experiment


def test_run_id_resumes_a_run(monitor_factory, mlflow_server):
    first = monitor_factory(config={"lr": 0.1})
    first.log({"loss": 1.0}, step=0)
    first.close()
    run_id = find_run(first.run, tracking_uri=mlflow_server.uri).info.run_id
    again = monitor_factory(name=first.run.name, config={"lr": 0.1, "epochs": 2},
                            mlflow={"run_id": run_id})
    again.log({"loss": 0.5}, step=1)
    again.close()
    assert read_rows(again.run, tracking_uri=mlflow_server.uri, run_id=run_id) == [
        ("loss", 0, 1.0), ("loss", 1, 0.5)]
    assert read_config(again.run, tracking_uri=mlflow_server.uri, run_id=run_id) == {
        "lr": "0.1", "epochs": "2"}


def test_a_rank_above_zero_logs_its_own_run(monitor_factory, mlflow_server, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monitor = monitor_factory(rank_zero_only=False)
    monitor.log({"loss": 1.0}, step=4)
    monitor.close()
    found = find_run(monitor.run, tracking_uri=mlflow_server.uri)
    assert found.info.run_name == f"{monitor.run.name}-rank1"
    # Every rank writes its own run: each carries the job's group as a tag.
    assert monitor.run.group is not None
    assert found.data.tags["job.group"] == monitor.run.group
    assert read_rows(monitor.run, tracking_uri=mlflow_server.uri) == [("loss", 4, 1.0)]


#: One process of ``test_processes_creating_one_new_store_at_once_each_write_their_run``: it
#: imports MLflow and the plugin, says it is ready (a file), waits for the file ``go``, then
#: constructs the backend on the shared log_dir (which creates the store) and logs 5 steps.
RACER = """
import sys, time
from pathlib import Path
from core_monitor import Event, RunInfo
from mlflow_monitor import MlflowMonitor
import mlflow.store.tracking.sqlalchemy_store  # the slow imports, before the start line
log_dir, index = Path(sys.argv[1]), int(sys.argv[2])
(log_dir.parent / f"ready{index}").touch()
while not (log_dir.parent / "go").exists():
    time.sleep(0.001)
backend = MlflowMonitor(RunInfo(project="race", name=f"p{index}", log_dir=log_dir))
backend.monitor_write([Event("loss", index * 100.0 + step, step, 1.0e9 + step)
                       for step in range(5)])
backend.monitor_close()
"""


@pytest.mark.heavy
def test_processes_creating_one_new_store_at_once_each_write_their_run(tmp_path):
    """Ranks of a job, or monitors sharing a log_dir, create its local store at the same
    moment: MLflow's migrations, run by each process that finds the tables missing, broke
    one another ("Online migration expected to match one row ... 0 found", "duplicate column
    name"); the store's creation is now serialised by a lock beside the database."""
    import mlflow

    log_dir, count = tmp_path / "logs", 4
    with ThreadPoolExecutor(count) as pool:
        racing = [pool.submit(run_python, RACER, log_dir, index, check=False, timeout=240)
                  for index in range(count)]
        deadline = time.monotonic() + 240
        while sum(1 for p in tmp_path.glob("ready*")) < count and not any(
                r.done() for r in racing):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (tmp_path / "go").touch()
        done = [r.result() for r in racing]
    for process in done:
        assert process.returncode == 0, process.stderr[-3000:]
    client = mlflow.MlflowClient(local_store_uri(log_dir))
    experiment = client.get_experiment_by_name("race")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"p{index}" for index in range(count)]
    for found in runs:
        index = int(found.info.run_name[1:])
        assert found.info.status == "FINISHED"
        history = client.get_metric_history(found.info.run_id, "loss")
        assert [(m.step, m.value) for m in history] == [
            (step, index * 100.0 + step) for step in range(5)]


def test_the_users_own_active_run_is_left_alone(tmp_path, monkeypatch, sqlite_uri):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_uri)  # also the monitor's store
    with mlflow.start_run(run_name="users-own") as mine:
        mlflow.log_metric("user", 1.0, step=0)
        monitor = Monitor(["mlflow"], project="fluent", name="monitor-run",
                          log_dir=tmp_path / "logs", strict=True)
        monitor.log({"loss": 1.0}, step=5)
        monitor.close()
        assert mlflow.active_run().info.run_id == mine.info.run_id
        mlflow.log_metric("user", 2.0, step=1)
    client = mlflow.MlflowClient(sqlite_uri)
    assert [m.value for m in client.get_metric_history(mine.info.run_id, "user")] == [1.0, 2.0]
    assert "loss" not in client.get_run(mine.info.run_id).data.metrics
    assert read_rows(monitor.run) == [("loss", 5, 1.0)]
    # the URI the user set wins over log_dir: nothing of MLflow's there (the core's run
    # journal, <log_dir>/.journal, may be)
    logs = tmp_path / "logs"
    assert [p for p in logs.rglob("*") if p.relative_to(logs).parts[0] != ".journal"] == []


# Options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"tracking_uri": 5}, ["tracking_uri", "5"]),
        ({"experiment": ""}, ["experiment", "''"]),
        ({"tags": ["a"]}, ["tags", "mapping"]),
        ({"tags": {"a//b": "x"}}, ["tags", "'a//b'"]),
        ({"request_timeout": 0}, ["request_timeout", "0"]),
        ({"request_timeout": True}, ["request_timeout", "True"]),
        ({"max_retries": 11}, ["max_retries", "11", "0 to 10"]),
        ({"batch_size": 1001}, ["batch_size", "1001", "1 to 1000"]),
        ({"flush_secs": -1}, ["flush_secs", "-1"]),
        ({"flush_secs": math.nan}, ["flush_secs", "nan"]),
    ],
)
def test_bad_option_values_raise_config_error_naming_them(options, words, tmp_path):
    with pytest.raises(ConfigError) as raised:
        Monitor(["mlflow"], project="p", log_dir=tmp_path, mlflow=options)
    for word in words:
        assert word in str(raised.value)


def test_request_limits_apply_to_the_calling_thread_only(monkeypatch):
    from mlflow.utils import rest_utils

    _compat.check()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "77")
    seen = {}

    def other_thread() -> None:
        seen["other"] = rest_utils.MLFLOW_HTTP_REQUEST_TIMEOUT.get()

    with _compat.request_limits(1.5, 0):
        assert rest_utils.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 1.5
        assert rest_utils.MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 0
        assert rest_utils.MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER.get() is False
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert seen["other"] == 77
    assert rest_utils.MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 77
    assert _compat.request_time_bound(5.0, 2) == 17.0


def test_an_mlflow_of_another_shape_fails_loudly_naming_the_supported_versions():
    code = textwrap.dedent(
        """
        from mlflow.utils import rest_utils
        del rest_utils.MLFLOW_HTTP_REQUEST_TIMEOUT  # as if MLflow had renamed it
        from core_monitor import BackendLoadError
        from core_monitor.compat import ensure_sdk
        from mlflow_monitor import MlflowMonitor
        try:
            ensure_sdk(MlflowMonitor)
        except BackendLoadError as error:
            print(error)
        """
    )
    done = run_python(code, timeout=120)
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" in done.stdout
    assert _compat.TESTED in done.stdout and "mlflow-monitor" in done.stdout


# A server that dies or hangs -------------------------------------------------------------------


def test_server_killed_mid_run_keeps_rows_until_close_wait_then_names_them(tmp_path,
                                                                          mlflow_server):
    """The server stays down to the end: flush raises naming what is kept, close waits
    ``close_wait`` then names what MLflow never took; the other backend gets every row.
    (A server that comes back gets everything: test_outage.py, against PostgreSQL.)"""
    tensorboard_monitor = pytest.importorskip("tensorboard_monitor")  # the other backend

    options = {"tracking_uri": mlflow_server.uri, **FAST_FAIL}
    monitor = Monitor(["tensorboard", "mlflow"], project="outage", name="killed",
                      log_dir=tmp_path / "logs", mlflow=options)
    try:
        for step in range(50):
            monitor.log({"loss": 1 / (step + 1), "acc": step / 50}, step=step)
        monitor.flush()
        mlflow_server.stop(signal.SIGKILL)
        with warnings.catch_warnings(record=True) as reported:
            warnings.simplefilter("always")
            for step in range(50, 100):
                monitor.log({"loss": 1 / (step + 1), "acc": step / 50}, step=step)
            monitor.flush()
            for step in range(100, 150):
                monitor.log({"loss": 1 / (step + 1), "acc": step / 50}, step=step)
            began = time.monotonic()
            monitor.close()
            closing = time.monotonic() - began
        messages = [str(w.message) for w in reported if w.category is BackendWarning]
        assert any(m.startswith("backend 'mlflow' failed in monitor_flush") and
                   "100 scalars not yet taken" in m for m in messages), messages
        assert any("did not take a request" in m for m in messages), messages  # the outage
        assert any("200 scalar(s)" in m and "close_wait=1" in m for m in messages), messages
        assert monitor.failures == {"mlflow": 2}  # Monitor.flush, and the flush of close
        assert closing < FAST_FAIL["close_wait"] + 10  # + one attempt, on a loaded machine
        assert len(tensorboard_monitor.read_rows(monitor.run)) == 300  # every row
    finally:
        mlflow_server.start()
    assert len(read_rows(monitor.run, tracking_uri=mlflow_server.uri)) == 100  # before the kill
    after = Monitor(["mlflow"], project="outage", name="after-restart",
                    log_dir=tmp_path / "logs", mlflow=options, strict=True)
    after.log({"loss": 0.5}, step=1)
    after.close()
    assert read_rows(after.run, tracking_uri=mlflow_server.uri) == [("loss", 1, 0.5)]


def test_a_hung_server_never_delays_a_log_and_flush_and_close_keep_their_waits(
    tmp_path, mlflow_server
):
    monitor = Monitor(["mlflow"], project="outage", name="hung", log_dir=tmp_path / "logs",
                      mlflow={"tracking_uri": mlflow_server.uri, **FAST_FAIL})
    monitor.log({"loss": 1.0}, step=0)
    monitor.flush()
    mlflow_server.send(signal.SIGSTOP)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            monitor.log({"loss": 1.5}, step=1)
            began = time.monotonic()
            monitor.flush()
            flushing = time.monotonic() - began
            began = time.monotonic()
            monitor.log({"loss": 2.0}, step=2)
            logging_ = time.monotonic() - began
            began = time.monotonic()
            monitor.close()
            closing = time.monotonic() - began
    finally:
        mlflow_server.send(signal.SIGCONT)
    assert monitor.failures == {"mlflow": 2}  # Monitor.flush, and the flush of close
    reported = [str(w.message) for w in caught if issubclass(w.category, BackendWarning)]
    assert any("failed in monitor_flush" in m for m in reported), reported
    assert any("2 scalar(s)" in m and "close_wait=1" in m for m in reported), reported
    assert FAST_FAIL["flush_wait"] <= flushing < FAST_FAIL["flush_wait"] + 10
    assert logging_ < 10.0  # log() only buffers (room for a loaded machine; a log() that waited on
    # the stopped server would wait out every retry of every request, and never return here)
    assert closing < FAST_FAIL["close_wait"] + 10  # + the attempt in flight


def test_a_media_request_to_a_hung_server_is_kept_and_counted_at_close(
    tmp_path, mlflow_server
):
    np = pytest.importorskip("numpy")
    monitor = Monitor(["mlflow"], project="outage", name="hung-media", log_dir=tmp_path / "logs",
                      mlflow={"tracking_uri": mlflow_server.uri, "flush_secs": 3600,
                              **FAST_FAIL})
    monitor.log({"loss": 1.0, "acc": 0.5}, step=0)  # buffered
    mlflow_server.send(signal.SIGSTOP)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            began = time.monotonic()
            monitor.log({"samples": Image(np.zeros((2, 2), np.uint8))}, step=1)
            queueing = time.monotonic() - began
            monitor.log({"loss": 0.5, "notes": Text("after the failure")}, step=2)
            monitor.close()
    finally:
        mlflow_server.send(signal.SIGCONT)
    reported = [str(w.message) for w in caught if issubclass(w.category, BackendWarning)]
    assert any("3 scalar(s), 2 media value(s)" in m for m in reported), reported
    assert queueing < 1.0  # queued, not sent on the caller's thread


class MemoryBackend:
    """A backend written for these tests: keeps ``(tag, step, value)`` in a class-level list."""

    name = "memory"
    rows: ClassVar[list[tuple[str, int, float]]] = []

    def __init__(self, run: RunInfo) -> None:
        self.run = run

    @hookimpl
    def monitor_write(self, events) -> None:
        self.rows.extend((e.tag, e.step, e.value) for e in events)


def test_a_server_that_is_down_at_start_does_not_disable_the_backend(tmp_path):
    """The backend starts anyway; with the server down to the end, close names what it kept.
    (A server that comes up later gets the run created: test_outage.py.)"""
    dead = f"http://127.0.0.1:{free_port()}"
    MemoryBackend.rows.clear()
    began = time.monotonic()
    monitor = Monitor([MemoryBackend, "mlflow"], project="down", name="at-start",
                      log_dir=tmp_path / "logs", mlflow={"tracking_uri": dead, **FAST_FAIL})
    starting = time.monotonic() - began
    assert monitor.backends == ["memory", "mlflow"]
    monitor.log({"loss": 1.0}, step=0)
    with pytest.warns(BackendWarning) as reported:
        monitor.close()
    messages = [str(w.message) for w in reported]
    assert any("1 scalar(s)" in m and "1 start" in m for m in messages), messages
    assert MemoryBackend.rows == [("loss", 0, 1.0)]
    assert starting < 60  # MLflow's own limits would retry for about four minutes


def test_the_acceptance_script_in_a_fresh_interpreter(tmp_path, mlflow_server):
    """The issue's acceptance: a plain script logs to the running server; the data MLflow serves
    matches, step for step."""
    script = textwrap.dedent(
        f"""
        from core_monitor import Monitor
        with Monitor(["mlflow"], project="acceptance", name="script", strict=True,
                     mlflow={{"tracking_uri": {mlflow_server.uri!r}}}) as monitor:
            for step in [*range(5), 3, *range(5, 300)]:
                monitor.log({{"loss": 1 / (step + 1), "lr": step * 1e-4}}, step=step)
        """
    )
    run_python(script, cwd=tmp_path)
    steps = [*range(5), 3, *range(5, 300)]
    rows = read_rows(RunInfo(project="acceptance", name="script"), tracking_uri=mlflow_server.uri)
    assert [s for t, s, _ in rows if t == "loss"] == steps
    assert [v for t, _, v in rows if t == "loss"] == [1 / (s + 1) for s in steps]
    assert [v for t, _, v in rows if t == "lr"] == [s * 1e-4 for s in steps]


def test_a_run_ended_on_a_server_prints_no_url_unless_quiet_is_false(mlflow_server, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from core_monitor import Monitor
        options = {{"tracking_uri": {mlflow_server.uri!r}, "quiet": sys.argv[1] == "quiet"}}
        with Monitor(["mlflow"], project="quiet", name=sys.argv[1], mlflow=options) as m:
            m.log({{"loss": 0.5}}, step=0)
    """)
    printed = {}
    for mode in ("quiet", "verbose"):
        done = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        printed[mode] = done.stdout
    assert printed["quiet"] == ""
    assert "View run verbose at: " + mlflow_server.uri in printed["verbose"]  # MLflow's own
