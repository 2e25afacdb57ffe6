"""The contract kit against the ``prometheus`` backend, and its own tests: the names it
exposes, the endpoint, and a real Prometheus and Pushgateway reading a run back
(prometheus_servers)."""

from __future__ import annotations

import json
import math
import socket
import time
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from prometheus_monitor import (
    PrometheusMonitor,
    metric_name,
    parse_crash,
    parse_rows,
    read_crash,
    read_rows,
)
from prometheus_monitor.storage import TARGETS, run_dir, split_node, unique_name
from prometheus_servers import SCRAPE_SECONDS, Prometheus, Pushgateway, free_port

from core_monitor import ConfigError, Monitor, RunInfo
from core_monitor.testing import MonitorContract


class TestPrometheusContract(MonitorContract):
    """Every check of the kit, each tag's latest point read back from ``metrics.prom``."""

    backend_class = PrometheusMonitor
    read_rows = staticmethod(read_rows)
    read_crash = staticmethod(read_crash)


def test_the_entry_point_names_the_backend_class() -> None:
    (found,) = entry_points(group="experiment_monitors", name="prometheus")
    assert found.load() is PrometheusMonitor


@pytest.mark.parametrize(("tag", "name"), [
    ("train/loss", "training_train_loss"),
    ("Train/Loss", "training_Train_Loss"),
    ("perf/step_time_seconds", "training_perf_step_time_seconds"),
    ("system/gpu.0/power_watts", "training_system_gpu_0_power_watts"),
    ("tokens_total", "training_tokens"),
    ("a::b c", "training_a_b_c"),
    ("/lead/", "training_lead"),
    ("system/gpu0/utilization_percent", "training_system_gpu0_utilization_percent"),
    ("system/node0/gpu0/utilization_percent", "training_system_gpu0_utilization_percent"),
    ("system/node12/monitor/cpu_percent", "training_system_monitor_cpu_percent"),
    ("system/node01/cpu_percent", "training_system_node01_cpu_percent"),  # not the core's
    ("train/node1/loss", "training_train_node1_loss"),
])
def test_a_tag_becomes_a_prometheus_metric_name(tag: str, name: str) -> None:
    assert metric_name("training", tag) == name


def test_a_tag_with_no_valid_character_is_named_by_its_hash() -> None:
    name = metric_name("training", "损失")
    assert name.startswith("training_tag_") and len(name) == len("training_tag_") + 8
    assert metric_name("training", "损失") == name != metric_name("training", "训练")


@pytest.mark.parametrize(("tag", "split"), [
    ("system/node0/cpu_percent", ("system/cpu_percent", "0")),
    ("system/node1/gpu0/power_watts", ("system/gpu0/power_watts", "1")),
    ("system/node10/monitor/threads", ("system/monitor/threads", "10")),
    ("system/cpu_percent", ("system/cpu_percent", None)),
    ("system/node1", ("system/node1", None)),
    ("system/node1/", ("system/node1/", None)),
    ("system/node01/cpu_percent", ("system/node01/cpu_percent", None)),
    ("a/system/node1/x", ("a/system/node1/x", None)),
])
def test_a_nodes_system_tag_is_split_into_its_reading_and_node(
        tag: str, split: tuple[str, str | None]) -> None:
    assert split_node(tag) == split


def test_the_nodes_of_one_reading_share_its_name() -> None:
    """Node 1 takes the name node 0's reading holds; a tag without a node, or the same node
    again, does not; when a tag without a node holds the plain name, the nodes share the
    hashed name of the reading."""
    name = "training_system_cpu_percent"
    assert unique_name("training", "system/node1/cpu_percent", {name}, {name: {"0"}}) == name
    assert unique_name("training", "system/node0/cpu.percent", {name},
                       {name: {"0"}}).startswith(name + "_")
    assert unique_name("training", "system/cpu_percent", {name},
                       {name: {"0"}}).startswith(name + "_")
    hashed = unique_name("training", "system/node0/cpu_percent", {name})
    assert hashed.startswith(name + "_")
    assert unique_name("training", "system/node1/cpu_percent", {name, hashed},
                       {hashed: {"0"}}) == hashed


def test_a_name_taken_gets_the_tags_hash() -> None:
    taken = {"training_train_loss", "training_step"}
    assert unique_name("training", "train.loss", taken).startswith("training_train_loss_")
    assert unique_name("training", "step", taken).startswith("training_step_")
    assert unique_name("training", "lr", taken) == "training_lr"


def test_colliding_tags_are_both_exposed_and_read_back(tmp_path: Path) -> None:
    with Monitor(["prometheus"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({"train/loss": 1.0, "train_loss": 2.0, "train loss": 3.0}, step=4)
    assert read_rows(monitor.run) == [("train loss", 4, 3.0), ("train/loss", 4, 1.0),
                                      ("train_loss", 4, 2.0)]
    text = (run_dir(monitor.run) / "metrics.prom").read_text()  # type: ignore[operator]
    assert "\ntraining_train_loss{" in text


def test_nan_and_infinities_are_exposed(tmp_path: Path) -> None:
    """The kit's check reads only the latest point; here NaN and +-inf are the latest."""
    with Monitor(["prometheus"], project="p", name="r", log_dir=tmp_path) as monitor:
        monitor.log({"a": math.nan, "b": math.inf, "c": -math.inf}, step=1)
    rows = read_rows(monitor.run)
    assert [(tag, step) for tag, step, _ in rows] == [("a", 1), ("b", 1), ("c", 1)]
    assert math.isnan(rows[0][2]) and rows[1][2] == math.inf and rows[2][2] == -math.inf


def test_options_out_of_range_are_refused(tmp_path: Path) -> None:
    for options, match in (({"port": 70000}, "port=70000"), ({"prefix": "9x"}, "prefix='9x'"),
                           ({"prefix": "a:b"}, "prefix='a:b'"),
                           ({"pushgateway": " "}, "pushgateway=''"),
                           ({"push_timeout": 0}, "push_timeout=0")):
        with pytest.raises(ConfigError, match=match):
            Monitor(["prometheus"], project="p", log_dir=tmp_path, prometheus=options)


def test_port_must_be_an_int_or_none(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="port='9400'"):
        Monitor(["prometheus"], project="p", log_dir=tmp_path, prometheus={"port": "9400"})


def wait_for_file(path: Path, timeout: float = 60.0) -> str:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} not written after {timeout} s")


def test_the_endpoint_serves_the_latest_values_on_a_port_it_reports(tmp_path: Path) -> None:
    """Port 0: a free port, written to targets.json (file_sd format); the page holds each
    tag's latest value and step with the run's labels, from a writer process."""
    with Monitor(["prometheus"], project="p", name="r", log_dir=tmp_path,
                 dispatch="process") as monitor:
        monitor.log({"train/loss": 0.5, "lr": 0.1}, step=3)
        monitor.log({"train/loss": 0.25}, step=4)
        monitor.flush()
        targets = json.loads(wait_for_file(run_dir(monitor.run) / TARGETS))  # type: ignore[operator]
        (target,) = targets[0]["targets"]
        assert target.startswith("127.0.0.1:") and int(target.split(":")[1]) > 0
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as answer:
            page = answer.read().decode()
    assert parse_rows(page, monitor.run) == [("lr", 3, 0.1), ("train/loss", 4, 0.25)]
    host = socket.gethostname()
    assert (f'training_train_loss{{host="{host}",project="p",rank="0",run="r"}} 0.25'
            in page), page
    assert not (run_dir(monitor.run) / TARGETS).exists()  # type: ignore[operator]
    with pytest.raises(OSError):  # the endpoint is gone with the run
        urllib.request.urlopen(f"http://{target}/metrics", timeout=5)


def test_a_push_that_fails_names_the_pushgateway_and_keeps_the_values(tmp_path: Path) -> None:
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    gateway = f"127.0.0.1:{free_port()}"  # nothing listens there
    backend = PrometheusMonitor(run, port=None, pushgateway=gateway, push_timeout=2)
    from core_monitor import Event

    backend.monitor_write([Event("loss", 1.5, 2, time.time())])
    with pytest.raises(OSError, match=f"Pushgateway at '{gateway}' failed"):
        backend.monitor_flush()
    assert read_rows(run) == [("loss", 2, 1.5)]
    with pytest.raises(OSError, match="Pushgateway"):
        backend.monitor_close()
    backend.monitor_close()  # once only


# A real Prometheus and Pushgateway (prometheus_servers) ------------------------------------

def test_prometheus_scrapes_the_latest_value_and_step_of_a_run(
        tmp_path: Path, prometheus: Prometheus, scrape_port: int) -> None:
    """Prometheus samples the endpoint every second while the run logs; its query API gives
    the latest value and step, with the run's labels, and the series follows the steps."""
    selector = '{job="training",project="p",run="scraped",rank="0"}'
    began = time.time()
    with Monitor(["prometheus"], project="p", name="scraped", log_dir=tmp_path,
                 prometheus={"port": scrape_port}) as monitor:
        step = 0
        monitor.log({"train/loss": 1.0, "perf/samples_per_second": 100.0}, step=step)
        monitor.flush()
        prometheus.wait_for(f"training_train_loss{selector}")
        for step in range(1, 4):  # each value lives at least two scrapes
            time.sleep(2.5 * SCRAPE_SECONDS)
            monitor.log({"train/loss": 1.0 / (step + 1), "perf/samples_per_second": 100.0},
                        step=10 * step)
        monitor.flush()
        want = 1.0 / 4
        found = prometheus.wait_for(f"training_train_loss{selector} == {want!r}")
        assert found[0]["metric"]["host"] == socket.gethostname()
        (step_sample,) = prometheus.wait_for(
            'training_step{tag="train/loss",metric="training_train_loss",run="scraped"} == 30')
        assert float(step_sample["value"][1]) == 30
    history = prometheus.query_range(f"training_train_loss{selector}", began, time.time() + 2)
    seen = [float(value) for _, value in history[0]["values"]]
    assert sorted(set(seen), reverse=True) == [1.0, 0.5, 1 / 3, 0.25], seen
    assert seen == sorted(seen, reverse=True)  # sampled in the order logged


def test_prometheus_finds_a_free_port_through_the_runs_targets_file(tmp_path: Path) -> None:
    """port=0: Prometheus's file_sd reads targets.json (the format it documents) and scrapes the
    port the run picked."""
    run = RunInfo(project="p", name="found", log_dir=tmp_path / "logs")
    sd_file = run_dir(run) / TARGETS  # type: ignore[operator]
    root = tmp_path / "prometheus"
    root.mkdir()
    server = Prometheus(root, [], None, file_sd=[sd_file])
    try:
        with Monitor(["prometheus"], project="p", name="found", log_dir=run.log_dir) as monitor:
            monitor.log({"train/loss": 0.75}, step=12)
            monitor.flush()
            (sample,) = server.wait_for('training_train_loss{job="discovered",run="found"}')
            assert float(sample["value"][1]) == 0.75
            assert sample["metric"]["instance"] == json.loads(sd_file.read_text())[0][
                "targets"][0]
    finally:
        server.stop()


def test_a_job_shorter_than_a_scrape_reaches_prometheus_through_the_pushgateway(
        tmp_path: Path, prometheus: Prometheus, pushgateway: Pushgateway) -> None:
    """No endpoint at all (port=None): three steps and close within one scrape interval; the
    close's push holds them, and Prometheus scrapes them from the Pushgateway."""
    with Monitor(["prometheus"], project="p", name="short", log_dir=tmp_path,
                 prometheus={"port": None, "pushgateway": pushgateway.address}) as monitor:
        for step in range(3):
            monitor.log({"train/loss": 2.0 - step, "tokens_total": 1000.0 * step}, step=step)
    assert parse_rows(pushgateway.metrics(), monitor.run) == [("tokens_total", 2, 2000.0),
                                                             ("train/loss", 2, 0.0)]
    groups = pushgateway.groups()
    assert [group["labels"] for group in groups] == [
        {"job": "training", "project": "p", "run": "short", "rank": "0"}], groups
    found = prometheus.wait_for('training_train_loss{job="training",run="short"}')
    assert [float(sample["value"][1]) for sample in found] == [0.0]
    (tokens,) = prometheus.wait_for('training_tokens{run="short"}')
    assert float(tokens["value"][1]) == 2000.0


def test_every_flush_pushes_the_run(tmp_path: Path, pushgateway: Pushgateway) -> None:
    with Monitor(["prometheus"], project="p", name="flushed", log_dir=tmp_path,
                 prometheus={"port": None, "pushgateway": pushgateway.address}) as monitor:
        monitor.log({"loss": 3.0}, step=7)
        monitor.flush()
        assert parse_rows(pushgateway.metrics(), monitor.run) == [("loss", 7, 3.0)]
        monitor.log({"loss": 2.0}, step=8)
        monitor.flush()
        assert parse_rows(pushgateway.metrics(), monitor.run) == [("loss", 8, 2.0)]


def test_a_crash_is_an_info_metric_an_alert_can_match(tmp_path: Path) -> None:
    """``monitor_crash`` adds ``training_crash_info{..., reason=...} 1`` (Prometheus's info
    metric convention) to what is served, written and pushed; a run closed normally has none."""
    run = RunInfo(project="p", name="r", log_dir=tmp_path)
    backend = PrometheusMonitor(run, port=None)
    backend.monitor_write([])
    backend.monitor_flush()
    assert read_crash(run) is None
    backend.monitor_crash('the training process (pid 7) raised ValueError: "x" is bad')
    backend.monitor_close()
    text = (run_dir(run) / "metrics.prom").read_text()
    assert 'training_crash_info{' in text and 'reason="the training process' in text
    assert read_crash(run) == 'the training process (pid 7) raised ValueError: "x" is bad'
    assert parse_crash(text, RunInfo(project="p", name="other", log_dir=tmp_path)) is None

