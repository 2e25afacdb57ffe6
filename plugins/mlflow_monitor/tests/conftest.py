"""The PostgreSQL and MLflow server fixtures of ``tests/postgres_server.py`` (``postgres``,
``mlflow_pg_server``), for test_outage.py."""

from postgres_server import mlflow_pg_server, postgres  # noqa: F401  (fixtures)
