"""A real PostgreSQL server, and a real ``mlflow server`` whose backend store it is, on
127.0.0.1, each started and stopped by PID: the starting code the tests' fixtures
(``tests/postgres_server.py``) and the benchmarks (``benchmarks/p_outage.py``) share. Standard
library and ``psycopg2`` only (no pytest): a server that does not start raises ``ServerError``
with the end of its log.

PostgreSQL comes from the distribution's packages (``initdb``, ``postgres``; ``.ci/run``
installs them): ``initdb`` into a temporary folder (as the ``postgres`` user when this runs
as root, which ``initdb`` refuses), trust authentication on 127.0.0.1 only, a free port, the
socket in the data folder.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


class ServerError(RuntimeError):
    """A server exited or did not answer within ``START_TIMEOUT``; the message holds the end
    of its log."""


#: Seconds a server gets to answer after its start (a loaded 2-core machine runs MLflow's
#: database migrations on the first start).
START_TIMEOUT = 240.0
#: What the MLflow server process sees besides this process's (offline, no telemetry).
MLFLOW_SERVER_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bin() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: on ``PATH``, else the newest
    ``/usr/lib/postgresql/<version>/bin`` (Debian and Ubuntu keep them there)."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                     key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit()
                     else 0)
    for folder in reversed(folders):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "postgres").exists():
            return Path(folder)
    return None


def _as_postgres() -> dict[str, object]:
    """``subprocess`` arguments that run a command as the ``postgres`` user when this process
    is root (``initdb`` and ``postgres`` refuse root), else as this user."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, its server started and stopped by PID.

    Attributes:
        port: the TCP port on 127.0.0.1.
        uri: a SQLAlchemy URI of its ``postgres`` database, e.g. for ``mlflow server``.
        process: the ``postgres`` process while it runs.
    """

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.root = Path(tempfile.mkdtemp(prefix="monitors-postgres-"))
        os.chmod(self.root, 0o755)
        self.data = self.root / "data"
        self.port = free_port()
        self.uri = f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            [str(binaries / "initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth=trust", "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, cwd=self.root, **_as_postgres(),  # type: ignore[arg-type]
        )

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        log = (self.root / "postgres.log").open("ab")
        self.process = subprocess.Popen(
            [str(self.binaries / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
             "-c", "fsync=off"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True,
            **_as_postgres(),  # type: ignore[arg-type]
        )
        log.close()
        began = time.monotonic()
        while time.monotonic() - began < START_TIMEOUT:
            if self.process.poll() is not None:
                raise ServerError(f"postgres exited with {self.process.returncode}:\n{self.log()}")
            if self.ready():
                return
            time.sleep(0.2)
        self.stop()
        raise ServerError(f"postgres not ready after {START_TIMEOUT} s:\n{self.log()}")

    def ready(self) -> bool:
        import psycopg2

        try:
            psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", connect_timeout=2).close()
        except psycopg2.OperationalError:
            return False
        return True

    def stop(self) -> None:
        """Stop the server by its PID (SIGINT: PostgreSQL's fast shutdown), SIGKILL after 30 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "postgres.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


class MlflowPgServer:
    """A real ``mlflow server`` on 127.0.0.1 whose backend store is ``postgres``; started,
    killed and restarted by PID (its process group) on the same port.

    Attributes:
        uri: the tracking URI, ``http://127.0.0.1:<port>``.
        postgres: the PostgreSQL server holding its store.
    """

    def __init__(self, root: Path, postgres: PostgresServer) -> None:
        self.root = root
        self.postgres = postgres
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> None:
        """Start the server; with ``wait``, until ``/health`` answers ``OK``."""
        (self.root / "artifacts").mkdir(parents=True, exist_ok=True)
        cli = Path(sys.executable).with_name("mlflow")
        log = (self.root / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(cli) if cli.exists() else "mlflow", "server", "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", self.postgres.uri,
             "--default-artifact-root", (self.root / "artifacts").as_uri(),
             "--no-serve-artifacts"],
            cwd=self.root, env={**os.environ, **MLFLOW_SERVER_ENV}, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        began = time.monotonic()
        while time.monotonic() - began < START_TIMEOUT:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ServerError(f"mlflow server exited with {self.process.returncode}:\n"
                            f"{self.log()}")
            if self.healthy():
                return
            time.sleep(0.2)
        self.kill()
        raise ServerError(f"mlflow server not healthy after {START_TIMEOUT} s:\n{self.log()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                return bool(answer.read().strip() == b"OK")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server's process group (its workers too) and reap it."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""
