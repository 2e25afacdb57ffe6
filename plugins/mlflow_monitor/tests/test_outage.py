"""A tracking server that blinks never ends the run in MLflow (issue 41): a real ``mlflow
server`` whose backend store is a real PostgreSQL, killed and restarted mid-run, down when the
monitor starts, down at close, and its PostgreSQL stopped under it. Every row is read back
through ``MlflowClient`` (``read_rows``, ``find_run``): every step exactly once, in order.

The backend runs in its writer process (the users' default), where it does the waiting: the
training process's ``log()`` only writes into a pipe.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter

import pytest

pytest.importorskip("mlflow_monitor")

from core_monitor import BackendWarning, Monitor, RunInfo
from mlflow_monitor import find_run, read_rows

#: Short limits, so that the outages below are seen within seconds: an attempt waits 1 s, a
#: retry comes at most 1 s after the last, a flush waits 10 s (a server just started on a
#: loaded machine is slow to take its first rows), a close 60 s (the server comes back
#: meanwhile in the tests that expect it to).
OPTIONS = {"request_timeout": 1.0, "retry_max_delay": 1.0, "flush_wait": 10.0,
           "close_wait": 60.0, "flush_secs": 0.0}

pytestmark = pytest.mark.process


def log_steps(monitor: Monitor, steps: range) -> float:
    """Log two scalars per step; the longest ``log()`` in seconds."""
    longest = 0.0
    for step in steps:
        began = time.monotonic()
        monitor.log({"loss": 1 / (step + 1), "acc": step / 1000}, step=step)
        longest = max(longest, time.monotonic() - began)
    return longest


def assert_every_step_once(run: RunInfo, uri: str, steps: range) -> None:
    rows = read_rows(run, tracking_uri=uri)
    counts = Counter((tag, step) for tag, step, _ in rows)
    expected = {(tag, step) for tag in ("loss", "acc") for step in steps}
    assert set(counts) == expected, sorted(set(counts) ^ expected)[:10]
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:10]
    for tag in ("loss", "acc"):  # in order, at its step
        assert [step for t, step, _ in rows if t == tag] == list(steps)
    assert dict(((t, s), v) for t, s, v in rows)[("loss", steps[-1])] == 1 / (steps[-1] + 1)


def failure_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, BackendWarning)]


def test_server_killed_and_restarted_mid_run_loses_nothing(tmp_path, mlflow_pg_server):
    server = mlflow_pg_server
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = Monitor(["mlflow"], project="outage", name="killed", log_dir=tmp_path,
                          dispatch="process", wait=True,
                          mlflow={"tracking_uri": server.uri, **OPTIONS})
        log_steps(monitor, range(0, 100))
        monitor.flush()
        server.kill()
        try:
            longest = log_steps(monitor, range(100, 200))
            monitor.flush()  # the writer's flush waits 2 s, then says what is kept
            log_steps(monitor, range(200, 300))
        finally:
            server.start()
        log_steps(monitor, range(300, 400))
        monitor.close()
    messages = failure_messages(caught)
    assert any("backend 'mlflow' failed in monitor_flush" in m and "not yet taken by" in m
               and "scalars" in m for m in messages), messages
    assert not any("were not delivered" in m for m in messages), messages
    assert longest < 5.0  # log() never waited on the server (generous for a loaded machine)
    assert_every_step_once(monitor.run, server.uri, range(400))
    assert find_run(monitor.run, tracking_uri=server.uri).info.status == "FINISHED"


def test_server_down_at_start_creates_the_run_when_it_answers(tmp_path, mlflow_pg_server):
    server = mlflow_pg_server
    server.kill()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            monitor = Monitor(["mlflow"], project="outage", name="down-at-start",
                              log_dir=tmp_path, dispatch="process", wait=True,
                              config={"lr": 0.001},
                              mlflow={"tracking_uri": server.uri, **OPTIONS})
            assert monitor.backends == ["mlflow"]  # started anyway
            log_steps(monitor, range(50))
    finally:
        server.start()
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        log_steps(monitor, range(50, 60))
        monitor.close()
    messages = failure_messages(caught + later)
    assert any("did not take a request" in m for m in messages), messages
    assert not any("were not delivered" in m for m in messages), messages
    assert_every_step_once(monitor.run, server.uri, range(60))
    found = find_run(monitor.run, tracking_uri=server.uri)
    assert found.info.status == "FINISHED"
    assert found.data.params == {"lr": "0.001"}


def test_server_down_at_close_flush_raises_and_close_warns_naming_what_is_kept(
        tmp_path, mlflow_pg_server):
    server = mlflow_pg_server
    monitor = Monitor(["mlflow"], project="outage", name="down-at-close", log_dir=tmp_path,
                      dispatch="process", wait=True,
                      mlflow={"tracking_uri": server.uri, **OPTIONS, "close_wait": 2.0})
    log_steps(monitor, range(10))
    monitor.flush()
    server.kill()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log_steps(monitor, range(10, 30))
            monitor.flush()
            flushed = failure_messages(caught)
            began = time.monotonic()
            monitor.close()
            closing = time.monotonic() - began
    finally:
        server.start()
    assert any("failed in monitor_flush" in m and "40 scalars" in m for m in flushed), flushed
    closed = failure_messages(caught)[len(flushed):]
    assert any("40 scalar(s)" in m and "close_wait=2" in m and "RUNNING" in m
               for m in closed), closed
    assert closing < 60  # close_wait (2 s) plus one attempt and the writer's exit
    rows = read_rows(monitor.run, tracking_uri=server.uri)
    assert sorted({step for _, step, _ in rows}) == list(range(10))  # what MLflow confirmed
    assert find_run(monitor.run, tracking_uri=server.uri).info.status == "RUNNING"


def test_postgres_stopped_under_a_running_server_loses_nothing(tmp_path, mlflow_pg_server):
    server = mlflow_pg_server
    if not server.healthy():
        server.start()
    monitor = Monitor(["mlflow"], project="outage", name="database-down", log_dir=tmp_path,
                      dispatch="process", wait=True,
                      mlflow={"tracking_uri": server.uri, **OPTIONS})
    log_steps(monitor, range(50))
    monitor.flush()
    server.postgres.stop()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log_steps(monitor, range(50, 150))
            monitor.flush()
    finally:
        server.postgres.start()
    messages = failure_messages(caught)
    assert any("failed in monitor_flush" in m for m in messages), messages
    log_steps(monitor, range(150, 200))
    monitor.close()
    assert_every_step_once(monitor.run, server.uri, range(200))
    assert find_run(monitor.run, tracking_uri=server.uri).info.status == "FINISHED"
