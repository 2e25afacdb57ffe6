"""The contract kit against the ``prometheus`` backend, and its own tests: the names it
exposes, the endpoint, and a real Prometheus and Pushgateway reading a run back
(prometheus_servers)."""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
import types
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

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


# A job of two nodes: the system samples as the core names them ------------------------------

GIB = 2**30


def fake_nvml(node: int) -> types.ModuleType:
    """A stand-in for nvidia-ml-py's ``pynvml`` with two GPUs, for the core's ``GpuMeter``:
    on node ``node`` this process holds ``(node + 1) * (i + 1)`` GiB of GPU ``i`` and the
    GPU draws ``100 * (node + 1) + i`` W, so every node's and GPU's figures differ."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def memory(handle: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=float((node + 1) * (handle + 1) * GIB),
                                     total=float(80 * GIB))

    def processes(handle: int) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=memory(handle).used)]

    vars(nvml).update(
        NVMLError=NVMLError, NVML_TEMPERATURE_GPU=0, nvmlInit=lambda: None,
        nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=10 * (node + 1) + h),
        nvmlDeviceGetMemoryInfo=memory, nvmlDeviceGetComputeRunningProcesses=processes,
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
        nvmlDeviceGetPowerUsage=lambda h: 1000 * (100 * (node + 1) + h),  # milliwatts
        nvmlDeviceGetTemperature=lambda h, kind: 40 + node)
    return nvml


def launch_env(monkeypatch: pytest.MonkeyPatch, nodes: int) -> None:
    """The environment torchrun gives rank 0 of a job of ``nodes`` nodes, one process each
    (no rendezvous store: nothing here reaches one)."""
    for name in ("NODE_RANK", "SLURM_NODEID", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
                 "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
                 "CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "SLURM_LOCALID",
                 "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (("WORLD_SIZE", nodes), ("LOCAL_WORLD_SIZE", 1), ("RANK", 0),
                        ("GROUP_RANK", 0)):
        monkeypatch.setenv(name, str(value))


def node_samples(monkeypatch: pytest.MonkeyPatch, node: int) -> list[dict[str, float]]:
    """Two samples of node ``node`` as its sampler reads them: the core's ``Reader`` under the
    core's ``prefix()`` for that node (``GROUP_RANK``), its GPUs through ``fake_nvml``."""
    pytest.importorskip("psutil")
    from core_monitor.system.sampler import Reader, prefix

    monkeypatch.setenv("GROUP_RANK", str(node))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(node))
    reader = Reader(None, os.getpid(), prefix())
    try:
        return [reader.read()[0] for _ in range(2)]
    finally:
        reader.close()
        monkeypatch.setenv("GROUP_RANK", "0")


class DictStore:
    """The four ``TCPStore`` calls ``core_monitor.system.nodes`` makes, in a dict."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value

    def check(self, keys: list[str]) -> bool:
        return all(key in self.data for key in keys)

    def get(self, key: str) -> bytes:
        return self.data[key].encode()

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None


def log_two_nodes(monitor: Monitor, samples: dict[int, list[dict[str, float]]]) -> None:
    """Each node's samples into rank 0's ``monitor`` the way the core takes them: node 0's as
    its sampler logs them, node 1's through ``nodes.forwarder`` and rank 0's
    ``nodes.Collector`` (``SystemMetrics``), over a store in a dict."""
    from core_monitor.system import nodes

    def log(values: dict[str, float], step: int, wall_time: float) -> None:
        monitor.log(values, step=step, advance=False, wall_time=wall_time)

    store = DictStore()
    collector = nodes.Collector(store, None, [1], 3600.0, log)
    forward = nodes.forwarder(store, None, 1)
    for n, (zero, one) in enumerate(zip(samples[0], samples[1], strict=True)):
        log(zero, n, time.time())
        forward(one, n, time.time())
    collector.stop()
    assert store.data == {}  # rank 0 took every sample of node 1


def latest_rows(samples: dict[int, list[dict[str, float]]]) -> list[tuple[str, int, float]]:
    """What a ``history="latest"`` backend holds of ``samples``: each tag's last sample."""
    rows = {}
    for node_samples_ in samples.values():
        for n, values in enumerate(node_samples_):
            rows.update({tag: (tag, n, value) for tag, value in values.items()})
    return sorted(rows.values())


#: The README's Grafana queries of the system samples, for the run ``$run``.
README_QUERIES = {
    "utilization": '{__name__=~"training_system_gpu[0-9]+_utilization_percent", run="$run"}',
    "job memory": 'sum by (node) ({__name__=~"training_system_gpu[0-9]+_memory_job_bytes", '
                  'run="$run"})',
    "power": 'sum({__name__=~"training_system_gpu[0-9]+_power_watts", run="$run"})',
    "cpu": 'training_system_cpu_percent{run="$run"}',
    "samples": 'max by (node) (training_step{metric="training_system_processes", '
               'run="$run"})',
}


def test_the_readmes_queries_of_the_nodes_are_those_tested() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    for query in README_QUERIES.values():
        assert f"`{query}`" in readme, query


def test_two_nodes_samples_are_one_metric_per_reading_labelled_by_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prometheus: Prometheus,
        scrape_port: int) -> None:
    """Issue 42: on a job of two nodes (rank_zero_only=True), rank 0's one run holds both
    nodes' samples, ``system/node0/...`` and ``system/node1/...`` as the core names them.
    Each reading is the metric it is on a single node, one series per node (label ``node``);
    node 0's carry rank 0's host, node 1's none (the core does not send it). The reader reads
    every tag back as logged, and the README's queries read both nodes from Prometheus."""
    launch_env(monkeypatch, nodes=2)
    samples = {node: node_samples(monkeypatch, node) for node in (0, 1)}
    for node in (0, 1):
        assert f"system/node{node}/gpu1/memory_job_bytes" in samples[node][1]
        assert f"system/node{node}/cpu_percent" in samples[node][1]
        assert all(tag.startswith(f"system/node{node}/") for tag in samples[node][1])
    host = socket.gethostname()
    with Monitor(["prometheus"], project="p", name="nodes", log_dir=tmp_path,
                 prometheus={"port": scrape_port}) as monitor:
        assert monitor.run.config["job.node_rank"] == 0
        log_two_nodes(monitor, samples)
        monitor.flush()
        want = latest_rows(samples)
        assert read_rows(monitor.run) == want
        page = (run_dir(monitor.run) / "metrics.prom").read_text()  # type: ignore[operator]
        assert not any(f"training_system_node{node}_" in page for node in (0, 1)), page

        run = '{run="nodes"}'
        prometheus.wait_for(f"count(training_system_processes{run}) == 2")
        query = {key: prometheus.query(promql.replace("$run", "nodes"))
                 for key, promql in README_QUERIES.items()}
        gpus = {(s["metric"]["node"], s["metric"]["__name__"]): float(s["value"][1])
                for s in query["utilization"]}
        assert gpus == {(str(node), f"training_system_gpu{i}_utilization_percent"):
                        10.0 * (node + 1) + i for node in (0, 1) for i in (0, 1)}
        memory = {s["metric"]["node"]: float(s["value"][1]) for s in query["job memory"]}
        assert memory == {"0": 3.0 * GIB, "1": 6.0 * GIB}
        assert [float(s["value"][1]) for s in query["power"]] == [100.0 + 101 + 200 + 201]
        cpu = {s["metric"]["node"]: s for s in query["cpu"]}
        assert sorted(cpu) == ["0", "1"]
        for node in (0, 1):
            assert float(cpu[str(node)]["value"][1]) == samples[node][1][
                f"system/node{node}/cpu_percent"]
        assert cpu["0"]["metric"]["host"] == host
        assert "host" not in cpu["1"]["metric"]  # not known: left out, not rank 0's
        steps = {s["metric"]["node"]: float(s["value"][1]) for s in query["samples"]}
        assert steps == {"0": 1.0, "1": 1.0}
        (count,) = prometheus.query(f"count(training_step{run})")
        assert float(count["value"][1]) == len(want)  # one step series per tag
    assert read_rows(monitor.run) == want


def test_a_single_node_and_a_two_node_run_share_a_pushgateway(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pushgateway: Pushgateway) -> None:
    """A run of one node (``system/...``, no node label) and a run of two nodes push the same
    metric names to one Pushgateway: it takes both groups and reads each back as logged."""
    launch_env(monkeypatch, nodes=1)
    single = {0: node_samples(monkeypatch, 0)}
    assert "system/cpu_percent" in single[0][1]
    options = {"port": None, "pushgateway": pushgateway.address}
    with Monitor(["prometheus"], project="p", name="solo", log_dir=tmp_path,
                 prometheus=options) as solo:
        for n, values in enumerate(single[0]):
            solo.log(values, step=n, advance=False, wall_time=time.time())
    launch_env(monkeypatch, nodes=2)
    samples = {node: node_samples(monkeypatch, node) for node in (0, 1)}
    with Monitor(["prometheus"], project="p", name="nodes", log_dir=tmp_path,
                 prometheus=options) as nodes:
        log_two_nodes(nodes, samples)
    text = pushgateway.metrics()
    assert parse_rows(text, solo.run) == latest_rows(single)
    assert parse_rows(text, nodes.run) == latest_rows(samples)
    assert "training_system_cpu_percent{" in text and 'node="1"' in text
    groups: list[dict[str, Any]] = pushgateway.groups()
    assert sorted(group["labels"]["run"] for group in groups) == ["nodes", "solo"]
    assert "inconsistent" not in pushgateway.log(), pushgateway.log()[-2000:]
