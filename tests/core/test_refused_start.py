"""A backend that cannot start never makes a later call hang (issue 43): ``flush()`` and
``close()`` return whatever state each backend is in (failed to start, starting, dead), in every
dispatch mode, and the backends that started store every row. The refusals are real ones: the
csv backend in DeepSpeed's layout refusing a run name already used (the Lightning layout replaces
the earlier run instead, as Lightning's CSVLogger does), and a ``log_dir`` that is a file."""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from jsonl_monitor import read_rows

import csv_monitor
from core_monitor import BackendWarning, ConfigError, Monitor

#: Seconds a flush or close may take here before it counts as a hang (a loaded machine starts
#: a writer process, its SDK import included, in well under this).
HANG_SECONDS = 90.0


def returns_within(call: Callable[[], Any], seconds: float = HANG_SECONDS) -> Any:
    """Run ``call`` on a daemon thread; its result, or a test failure when it has not returned
    within ``seconds`` (a hang: the thread is left behind, never joined)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # re-raised on the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{call} did not return within {seconds:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


#: csv refuses to start in a run folder that holds a run in its other layout (it would mix
#: the two layouts' files); a run of the same layout is replaced with a warning instead.
REFUSING = {"layout": "deepspeed"}
REFUSAL = "csv: .* holds a run in the lightning layout"


def csv_run_used(tmp_path: Any) -> None:
    """A first run ``r`` of project ``p`` under ``tmp_path`` in the Lightning layout,
    finished: ``REFUSING`` cannot start there."""
    with Monitor(["csv"], project="p", name="r", log_dir=tmp_path, dispatch="sync") as first:
        first.log({"x": 1.0}, step=0)


def log_steps(monitor: Monitor, count: int) -> None:
    for step in range(count):
        monitor.log({"x": float(step)}, step=step)


@pytest.mark.process
def test_csv_refusing_a_used_run_name_in_its_writer_lets_flush_and_close_return(tmp_path):
    csv_run_used(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        monitor = Monitor(["csv", "jsonl"], project="p", name="r", log_dir=tmp_path,
                          csv=REFUSING)
        log_steps(monitor, 5)
        returns_within(monitor.flush)  # Lightning's MonitorLogger.save() calls this
        log_steps(monitor, 0)
        returns_within(monitor.close)
    refusals = [str(w.message) for w in seen if issubclass(w.category, BackendWarning)]
    assert any(re.search(f"'csv' failed in start: ConfigError: {REFUSAL}", text)
               for text in refusals), refusals
    assert [step for _, step, _ in read_rows(monitor.run)] == list(range(5))
    # The first run is untouched: one row, step 0.
    assert [step for _, step, _ in csv_monitor.read_rows(monitor.run)] == [0]


@pytest.mark.process
def test_a_refused_start_lets_a_flush_with_a_timeout_return_without_raising(tmp_path):
    csv_run_used(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BackendWarning)
        monitor = Monitor(["csv"], project="p", name="r", log_dir=tmp_path, csv=REFUSING)
        log_steps(monitor, 3)
        returns_within(lambda: monitor.flush(timeout=HANG_SECONDS / 2))  # no FlushTimeout
        returns_within(lambda: monitor.close(timeout=HANG_SECONDS / 2))
    assert monitor.undelivered == {}  # its start failure is reported as that, not as a loss
    assert monitor.failures == {"csv": 1}


@pytest.mark.parametrize("dispatch", ["thread", "sync"])
def test_csv_refusing_a_used_run_name_in_this_process_raises_at_monitor(tmp_path, dispatch):
    csv_run_used(tmp_path)
    with pytest.raises(ConfigError, match=REFUSAL):
        returns_within(lambda: Monitor(["csv", "jsonl"], project="p", name="r",
                                       log_dir=tmp_path, dispatch=dispatch, csv=REFUSING))


@pytest.mark.parametrize("dispatch", ["process", "thread", "sync"])
def test_a_backend_failing_to_start_lets_flush_and_close_return_in_every_mode(tmp_path,
                                                                             dispatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        monitor = Monitor(["csv"], project="p", name="r", log_dir=blocker, dispatch=dispatch)
        log_steps(monitor, 4)
        returns_within(monitor.flush)
        returns_within(lambda: monitor.flush(timeout=HANG_SECONDS / 2))
        returns_within(monitor.close)
    assert any("'csv' failed in start" in str(w.message) for w in seen
               if issubclass(w.category, BackendWarning))
    assert monitor.failures == {"csv": 1}


@pytest.mark.process
def test_a_writer_that_died_lets_flush_without_a_timeout_return(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BackendWarning)
        monitor = Monitor(["faulty", "jsonl"], project="p", name="r", log_dir=tmp_path,
                          faulty={"exit_at": 2})
        log_steps(monitor, 5)
        returns_within(monitor.flush)
        returns_within(monitor.close)
    assert [step for _, step, _ in read_rows(monitor.run)] == list(range(5))
    assert "faulty" in monitor.undelivered
