"""Fixtures for a real PostgreSQL server, and a real ``mlflow server`` whose backend store it
is, on 127.0.0.1, each started and stopped by PID (the servers themselves: ``pg_servers.py``,
which the benchmarks share). Where PostgreSQL or ``psycopg2`` is absent the fixtures skip,
naming what is missing.

Use: ``from postgres_server import postgres, mlflow_pg_server`` in a test module (pytest takes
fixtures from its namespace).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_servers import MlflowPgServer, PostgresServer, postgres_bin

__all__ = ["MlflowPgServer", "PostgresServer", "mlflow_pg_server", "postgres"]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for this module; skipped where PostgreSQL or psycopg2
    is absent (``.ci/run`` installs both, so CI never skips)."""
    pytest.importorskip("psycopg2", reason="psycopg2-binary is not installed (pip install "
                                           "psycopg2-binary)")
    binaries = postgres_bin()
    if binaries is None:
        pytest.skip("PostgreSQL is not installed (initdb and postgres not found; on Debian or "
                    "Ubuntu: apt-get install postgresql)")
    server = PostgresServer(binaries)
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="module")
def mlflow_pg_server(postgres: PostgresServer,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowPgServer]:
    """An ``mlflow server`` backed by ``postgres``, running; a test may kill and restart it
    (it is killed at the end, whatever its state)."""
    server = MlflowPgServer(tmp_path_factory.mktemp("mlflow-pg"), postgres)
    try:
        server.start()
        yield server
    finally:
        server.kill()
