"""Lifecycle: close once, in reverse start order, also on errors, at exit and on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from jsonl_monitor import read_rows

from core_monitor import Event, Monitor, RunInfo, hookimpl

# A backend that keeps rows in memory and writes them only in monitor_flush, as SDKs without a
# durable write path do: nothing of it survives unless the core flushes or closes it.
BUFFERED_BACKEND = '''
import contextlib
import json
from pathlib import Path
from core_monitor import hookimpl

class Buffered:
    name = "buffered"

    def __init__(self, run):
        self.path = Path(run.log_dir) / "buffered.json"
        self.rows = []

    @hookimpl
    def monitor_write(self, events):
        self.rows.extend((e.tag, e.step, e.value) for e in events)

    @hookimpl
    def monitor_flush(self):
        self.path.write_text(json.dumps(self.rows))

    @hookimpl
    def monitor_close(self):
        self.monitor_flush()
        Path(str(self.path) + ".closed").write_text("closed")
'''


def child_script(body: str) -> str:
    return BUFFERED_BACKEND + textwrap.dedent(body)


def run_child(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", child_script(body), str(tmp_path / "logs")],
        cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=120,
    )


def jsonl_run(tmp_path: Path, project: str, name: str) -> RunInfo:
    return RunInfo(project=project, name=name, log_dir=tmp_path / "logs")


def make_backend(name: str, journal: list[tuple[str, str]]) -> type:
    """A backend class recording ``(hook, name)`` in ``journal``; passed to Monitor as a class."""

    class Recording:
        def __init__(self, run: RunInfo) -> None:
            self.events: list[Event] = []
            journal.append(("start", name))

        @hookimpl
        def monitor_write(self, events: Sequence[Event]) -> None:
            self.events.extend(events)
            journal.append(("write", name))

        @hookimpl
        def monitor_flush(self) -> None:
            journal.append(("flush", name))

        @hookimpl
        def monitor_close(self) -> None:
            journal.append(("close", name))

    Recording.name = name  # type: ignore[attr-defined]
    return Recording


def count(journal: list[tuple[str, str]], hook: str, name: str) -> int:
    return journal.count((hook, name))


# The process ends without close() -------------------------------------------------------


def test_rows_logged_by_a_dropped_monitor_survive_a_normal_exit(tmp_path):
    proc = run_child(
        """
        import gc, sys
        from core_monitor import Monitor

        def train():
            monitor = Monitor([Buffered, "jsonl"], project="c3", name="run", log_dir=sys.argv[1])
            for step in range(3):
                monitor.log({"loss": 1.0 / (step + 1)}, step=step * 10)

        train()  # the monitor object is dropped here, never closed
        gc.collect()
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    expected = [("loss", 0, 1.0), ("loss", 10, 0.5), ("loss", 20, 1.0 / 3)]
    assert read_rows(jsonl_run(tmp_path, "c3", "run")) == expected
    buffered = json.loads((tmp_path / "logs" / "buffered.json").read_text())
    assert [tuple(row) for row in buffered] == expected
    assert (tmp_path / "logs" / "buffered.json.closed").exists()


# SIGTERM --------------------------------------------------------------------------------------

SIGTERM_CHILD = """
import sys, time
from core_monitor import Monitor

monitor = Monitor([Buffered, "jsonl"], project="term", name="run", log_dir=sys.argv[1])
monitor.log({"loss": 0.5}, step=0)
monitor.log({"loss": 0.25}, step=1)
print("ready", flush=True)
time.sleep(60)
raise SystemExit("SIGTERM did not arrive")
"""

USER_HANDLER = """
import signal, sys
from pathlib import Path

def on_term(signum, frame):
    Path(sys.argv[1]).parent.joinpath("user-handler-ran").write_text(str(signum))
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
"""


def terminate_child(body: str, tmp_path: Path) -> tuple[int, str]:
    """Start the child, wait for its "ready", send SIGTERM; return (returncode, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", child_script(body), str(tmp_path / "logs")],
        cwd=tmp_path, env=dict(os.environ),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"child did not get ready: {line!r}\n{err}")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_keeps_logged_rows_and_still_kills_the_process(tmp_path):
    returncode, err = terminate_child(SIGTERM_CHILD, tmp_path)
    assert returncode == -signal.SIGTERM, err
    expected = [("loss", 0, 0.5), ("loss", 1, 0.25)]
    assert read_rows(jsonl_run(tmp_path, "term", "run")) == expected
    buffered = json.loads((tmp_path / "logs" / "buffered.json").read_text())
    assert [tuple(row) for row in buffered] == expected


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_runs_the_users_own_handler_installed_before_the_monitor(tmp_path):
    returncode, err = terminate_child(USER_HANDLER + SIGTERM_CHILD, tmp_path)
    assert returncode == 0, err
    assert (tmp_path / "user-handler-ran").read_text() == str(int(signal.SIGTERM))
    expected = [("loss", 0, 0.5), ("loss", 1, 0.25)]
    assert read_rows(jsonl_run(tmp_path, "term", "run")) == expected


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("dispatch", ["thread", "sync"])
def test_sigterm_marks_the_run_crashed_in_this_processs_backends(tmp_path, dispatch):
    from faulty_monitor import read_calls

    body = SIGTERM_CHILD.replace('[Buffered, "jsonl"]', '["faulty"]').replace(
        'log_dir=sys.argv[1]', f'log_dir=sys.argv[1], dispatch="{dispatch}"')
    returncode, err = terminate_child(body, tmp_path)
    assert returncode == -signal.SIGTERM, err
    calls = read_calls(RunInfo(project="term", name="run", log_dir=tmp_path / "logs"))
    assert [hook for hook, _ in calls][-2:] == ["crash", "close"], calls
    assert "received SIGTERM" in calls[-2][1]


# An exception inside `with` -------------------------------------------------------------


def test_error_in_with_block_propagates_and_closes_every_backend_once(tmp_path):
    journal: list[tuple[str, str]] = []
    counting = make_backend("counting", journal)
    with pytest.raises(RuntimeError, match="training diverged"):  # noqa: SIM117
        with Monitor([counting, "jsonl"], project="c4", name="run", log_dir=tmp_path) as monitor:
            monitor.log({"loss": 0.5}, step=0)
            monitor.log({"loss": 0.25}, step=1)
            raise RuntimeError("training diverged")
    assert monitor.closed
    assert count(journal, "close", "counting") == 1
    assert count(journal, "write", "counting") == 2
    assert read_rows(monitor.run) == [("loss", 0, 0.5), ("loss", 1, 0.25)]
    monitor.close()
    assert count(journal, "close", "counting") == 1


def test_close_twice_closes_each_backend_once(tmp_path):
    journal: list[tuple[str, str]] = []
    monitor = Monitor([make_backend("a", journal)], project="twice", log_dir=tmp_path)
    monitor.close()
    monitor.close()
    assert count(journal, "close", "a") == 1
    assert count(journal, "flush", "a") == 1


def test_close_flushes_then_closes_in_reverse_start_order(tmp_path, monitor_factory):
    journal: list[tuple[str, str]] = []
    names = ["first", "second", "third"]
    monitor = Monitor([make_backend(n, journal) for n in names], project="order", log_dir=tmp_path)
    monitor_factory.add(monitor)
    assert monitor.backends == names
    assert [n for hook, n in journal if hook == "start"] == names
    monitor.log({"x": 1.0})
    monitor.close()
    assert [n for hook, n in journal if hook == "close"] == names[::-1]
    for name in names:
        assert journal.index(("flush", name)) < journal.index(("close", name))


def test_closed_monitor_refuses_to_log(tmp_path):
    journal: list[tuple[str, str]] = []
    monitor = Monitor([make_backend("a", journal)], project="closed", log_dir=tmp_path)
    monitor.log({"x": 1.0}, step=0)
    monitor.close()
    with pytest.raises(RuntimeError, match="closed"):
        monitor.log({"x": 2.0}, step=1)
    with pytest.raises(RuntimeError, match="closed"):
        monitor.write_events([("x", 2.0, 1)])
    assert count(journal, "write", "a") == 1


@pytest.mark.parametrize("dispatch", ["process", "thread", "sync"])
def test_an_exception_leaving_with_ends_the_run_as_crashed_in_every_mode(tmp_path, dispatch):
    """As ``wandb.init()`` and ``mlflow.start_run()`` do: the backend writes every row, is told
    why (``monitor_crash``) and closed; the exception propagates unchanged."""
    from faulty_monitor import read_calls, read_steps

    with pytest.raises(KeyError, match="'lr'"):  # noqa: SIM117 (the monitor's own with)
        with Monitor(["faulty"], project="p", name="r", log_dir=tmp_path,
                     dispatch=dispatch) as monitor:
            for step in range(3):
                monitor.log({"loss": 1.0}, step=step)
            raise KeyError("lr")
    assert read_steps(monitor.run) == [0, 1, 2]
    hooks = [call for call in read_calls(monitor.run) if call[0] != "start"]
    reason = f"the training process (pid {os.getpid()}) raised KeyError: 'lr'"
    assert hooks[-2:] == [["crash", reason], ["close", None]], hooks


@pytest.mark.parametrize("ending", [None, 0])
def test_leaving_with_normally_or_by_sys_exit_0_is_no_crash(tmp_path, ending):
    from faulty_monitor import read_calls

    with pytest.raises(SystemExit) if ending is not None else contextlib.nullcontext():  # noqa: SIM117
        with Monitor(["faulty"], project="p", name="r", log_dir=tmp_path,
                     dispatch="thread") as monitor:
            monitor.log({"loss": 1.0}, step=0)
            if ending is not None:
                sys.exit(ending)
    hooks = [call[0] for call in read_calls(monitor.run)]
    assert "crash" not in hooks and hooks[-1] == "close", hooks
