"""A real Aim remote tracking server (``aim server``, Aim's own, from the installed ``aim``) on
127.0.0.1, its repository in a temporary folder, started by a fixture on a free port and
stopped by its PID (its process group: ``aim server`` runs uvicorn in a child process). It
sends nothing anywhere: it binds 127.0.0.1 and Aim 3.29 has no telemetry.

Use: ``from aim_servers import aim_server`` in a test module or conftest (pytest takes fixtures
from its namespace).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Seconds the server gets to answer ``/status/`` after its start (``import aim`` on a loaded
#: 2-core machine).
START_TIMEOUT = 240.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class AimServer:
    """``aim server --repo <root>/repo`` on 127.0.0.1, started, killed and started again by PID
    on the same port.

    Attributes:
        repo: the folder of the repository the server writes (``repo/.aim``).
        uri: the repository as a client names it, ``aim://127.0.0.1:<port>``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo = root / "repo"
        self.repo.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.uri = f"aim://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        cli = Path(sys.executable).with_name("aim")
        self.cli = str(cli) if cli.exists() else "aim"
        subprocess.run([self.cli, "init", "--repo", str(self.repo)], check=True,
                       capture_output=True, cwd=root)

    def start(self) -> None:
        """Start the server and wait until it answers ``/status/``."""
        log = (self.root / "server.log").open("ab")
        self.process = subprocess.Popen(
            [self.cli, "server", "--repo", str(self.repo), "--host", "127.0.0.1", "--port",
             str(self.port), "--yes"],
            cwd=self.root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        began = time.monotonic()
        while time.monotonic() - began < START_TIMEOUT:
            if self.process.poll() is not None:
                pytest.fail(f"aim server exited with {self.process.returncode}:\n{self.log()}")
            if self.healthy():
                return
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"aim server not answering after {START_TIMEOUT} s:\n{self.log()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status/",
                                        timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server's process group and reap it."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@pytest.fixture
def aim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AimServer]:
    """An ``aim server`` on 127.0.0.1, running; a test may kill and restart it (it is killed
    at the end, whatever its state)."""
    pytest.importorskip("aim", reason="aim is not installed (pip install 'aim>=3.29.1,<3.30')")
    server = AimServer(tmp_path_factory.mktemp("aim-server"))
    try:
        server.start()
        yield server
    finally:
        server.kill()
