"""A real Prometheus and a real Pushgateway (the binaries of Debian's ``prometheus`` and
``prometheus-pushgateway`` packages), each a process on 127.0.0.1 started by a fixture with a
free port and a temporary folder, stopped by its PID. Tests that need one are skipped, naming
the missing binary, where it is not installed; ``.ci/run`` installs both so CI never skips.

Neither server sends anything anywhere: both bind 127.0.0.1 only, Prometheus scrapes only the
targets of the config written here, and neither has an update check or telemetry.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT = 60.0
#: Prometheus's scrape interval in the tests, in seconds.
SCRAPE_SECONDS = 1


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def binary(name: str) -> str:
    """The path of ``name``, or a skip naming the Debian package that has it."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                   else None)
    if found is None:
        package = "prometheus-pushgateway" if "pushgateway" in name else "prometheus"
        pytest.skip(f"{name} is not installed (apt-get install {package}); .ci/run installs it")
    return found


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        body: bytes = answer.read()
        return body


class Server:
    """One server process on 127.0.0.1:``port``, its output in ``root/server.log``."""

    def __init__(self, root: Path, command: list[str], port: int) -> None:
        self.root, self.port = root, port
        self.url = f"http://127.0.0.1:{port}"
        log = (root / "server.log").open("ab")
        self.process = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        began = time.monotonic()
        while time.monotonic() - began < START_TIMEOUT:
            if self.process.poll() is not None:
                pytest.fail(f"{command[0]} exited with {self.process.returncode}:\n"
                            f"{self.log()[-4000:]}")
            try:
                get(f"{self.url}/-/ready", timeout=2)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"{command[0]} not ready after {START_TIMEOUT} s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to the process by its PID; SIGKILL after 20 s."""
        if self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Pushgateway(Server):
    """``prometheus-pushgateway`` in memory: Debian's build persists to
    ``/var/lib/prometheus/pushgateway.data`` by default, shared by every process, which
    ``--persistence.file=`` turns off."""

    def __init__(self, root: Path) -> None:
        port = free_port()
        super().__init__(root, [binary("prometheus-pushgateway"), "--persistence.file=",
                                f"--web.listen-address=127.0.0.1:{port}"], port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def metrics(self) -> str:
        """The Pushgateway's ``/metrics`` page: every group pushed, in the text format."""
        return get(f"{self.url}/metrics").decode()

    def groups(self) -> list[dict[str, Any]]:
        """``/api/v1/metrics``: one entry per group pushed, with its labels."""
        found: list[dict[str, Any]] = json.loads(get(f"{self.url}/api/v1/metrics"))["data"]
        return found


class Prometheus(Server):
    """``prometheus`` scraping ``targets`` every ``SCRAPE_SECONDS`` (job ``training``), the
    targets listed in the ``file_sd`` files (job ``discovered``, reread every second) and the
    Pushgateway's ``pushgateway`` target (job ``pushgateway``, ``honor_labels``), its TSDB under
    ``root``."""

    def __init__(self, root: Path, targets: list[str], pushgateway: str | None,
                 file_sd: Sequence[Path] = ()) -> None:
        jobs: list[dict[str, Any]] = [
            {"job_name": "training", "static_configs": [{"targets": targets}]}]
        if file_sd:
            jobs.append({"job_name": "discovered", "file_sd_configs": [
                {"files": [str(path) for path in file_sd], "refresh_interval": "1s"}]})
        if pushgateway is not None:
            jobs.append({"job_name": "pushgateway", "honor_labels": True,
                         "static_configs": [{"targets": [pushgateway]}]})
        config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s",
                             "evaluation_interval": "60s"},
                  "scrape_configs": jobs}
        (root / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        port = free_port()
        super().__init__(root, [
            binary("prometheus"), f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        ], port)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """``/api/v1/query``: the instant vector's samples, each ``{"metric": labels,
        "value": [t, v]}``."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        answer = json.loads(get(url))
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def query_range(self, promql: str, start: float, end: float) -> list[dict[str, Any]]:
        """``/api/v1/query_range`` at a 1 s resolution: ``{"metric", "values": [[t, v], ...]}``."""
        url = f"{self.url}/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": promql, "start": start, "end": end, "step": "1s"})
        answer = json.loads(get(url))
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The first non-empty answer to ``promql``; fails after ``timeout`` seconds."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            found = self.query(promql)
            if found:
                return found
            time.sleep(0.25)
        pytest.fail(f"Prometheus has no answer to {promql!r} after {timeout} s; its targets: "
                    f"{get(f'{self.url}/api/v1/targets').decode()[:2000]}")


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Pushgateway]:
    root = tmp_path / "pushgateway"
    root.mkdir()
    server = Pushgateway(root)
    yield server
    server.stop()


@pytest.fixture
def scrape_port() -> int:
    """The port the backend under test serves on, which Prometheus scrapes."""
    return free_port()


@pytest.fixture
def prometheus(tmp_path: Path, scrape_port: int,
               pushgateway: Pushgateway) -> Iterator[Prometheus]:
    root = tmp_path / "prometheus"
    root.mkdir()
    server = Prometheus(root, [f"127.0.0.1:{scrape_port}"], pushgateway.address)
    yield server
    server.stop()
