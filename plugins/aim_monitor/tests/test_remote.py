"""Aim's remote tracking server (``aim server``, a real one on 127.0.0.1: ``aim_servers``)
as the repository (``repo="aim://127.0.0.1:<port>"``), the backend in its writer process (the
users' default): the server killed and started again mid-run loses nothing. Aim's own client
keeps the writes it could not send and sends them once it reconnects; ``flush()`` meanwhile
reports what the server has not taken (so the journal's cursor stays before it); every row is
read back once from the server's repository (``read_rows``), through ``aim.Repo``."""

from __future__ import annotations

import time
import warnings
from collections import Counter

import pytest

pytest.importorskip("aim_monitor")

from aim_monitor import read_rows
from core_monitor import BackendWarning, Monitor, RunInfo

pytestmark = pytest.mark.process


def log_steps(monitor: Monitor, steps: range) -> float:
    """Log two scalars per step; the longest ``log()`` in seconds."""
    longest = 0.0
    for step in steps:
        began = time.monotonic()
        monitor.log({"loss": 1 / (step + 1), "acc": step / 1000}, step=step)
        longest = max(longest, time.monotonic() - began)
    return longest


def test_server_killed_and_restarted_mid_run_loses_nothing(tmp_path, aim_server):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = Monitor(["aim"], project="outage", name="remote", log_dir=tmp_path,
                          dispatch="process", wait=True, aim={"repo": aim_server.uri})
        log_steps(monitor, range(0, 100))
        monitor.flush()
        aim_server.kill()
        try:
            longest = log_steps(monitor, range(100, 200))
            began = time.monotonic()
            monitor.flush()  # waits FLUSH_WAIT without a write taken, then says what is kept
            flushing = time.monotonic() - began
        finally:
            aim_server.start()
        log_steps(monitor, range(200, 300))
        monitor.flush()  # the server took everything: no failure
        monitor.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, BackendWarning)]
    # the flush during the outage only (the core reports a backend's first failure)
    assert len(messages) == 1, messages
    assert ("failed in monitor_flush: AimDeliveryError" in messages[0]
            and "not yet taken by the Aim server" in messages[0]), messages
    assert flushing < 120  # FLUSH_WAIT (10 s) and the writer's answer
    assert longest < 5.0  # log() never waited on the server (generous for a loaded machine)
    aim_server.kill()  # read the repository as the server left it
    rows = read_rows(RunInfo(project="outage", name="remote"), repo=str(aim_server.repo))
    counts = Counter((tag, step) for tag, step, _ in rows)
    expected = {(tag, step) for tag in ("loss", "acc") for step in range(300)}
    assert set(counts) == expected, sorted(set(counts) ^ expected)[:10]
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:10]
    values = {(tag, step): value for tag, step, value in rows}
    assert values[("loss", 150)] == 1 / 151 and values[("acc", 299)] == 299 / 1000
