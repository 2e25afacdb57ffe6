"""How a run ended, read back: ``read_crash`` after SIGKILL, SIGTERM and an exception in
``with``. Each check runs a training script in a fresh interpreter, its backend in a writer
process (users' default dispatch), and reads the tracker's own storage once it ended."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..plugins import Plugin
from ..readers import check_crash
from ..run import RunInfo
from ._imports import requirement_modules

#: Seconds a writer gets, after its training process ended, to write, mark and close the run.
#: Generous on purpose: a loaded machine starts an SDK slowly, and the check is what is
#: stored, not how fast (a writer's own limit is its drain deadline).
SETTLE_SECONDS = 180.0

TRAIN = """
import os, pickle, signal, sys
from core_monitor import Monitor

with open(sys.argv[1], "rb") as file:
    backend, options, death, out = pickle.load(file)
kwargs = {Monitor.backend_name(backend): options}
monitor = Monitor([backend], project="contract", name="crash", log_dir=out, strict=True,
                  dispatch="process", **kwargs)
with open(os.path.join(out, "run.pickle"), "wb") as file:
    pickle.dump(monitor.run, file)
if death == "exception":
    with monitor:
        for step in range(3):
            monitor.log({"loss": step / 4}, step=step)
        raise RuntimeError("boom in the training loop")
for step in range(3):
    monitor.log({"loss": step / 4}, step=step)
monitor.flush()
os.kill(os.getpid(), signal.SIGKILL if death == "sigkill" else signal.SIGTERM)
"""

#: What the reason the core gives ``monitor_crash`` holds (``dispatch.writer``, ``shutdown``,
#: ``monitor.crash_reason``).
REASONS = {"sigkill": "ended without closing the monitor", "sigterm": "received SIGTERM",
           "exception": "raised RuntimeError: boom in the training loop"}


class CrashChecks:
    """How a run ended, through the reader's ``read_crash``; mixed into ``MonitorContract``."""

    def _end_run(self, death: str, read_crash: Any, backend_class: type,
                 backend_options: dict[str, Any], tmp_path: Path) -> RunInfo:
        if read_crash is None:
            pytest.skip("the test class supplies no read_crash (RunInfo -> the crash reason "
                        "or None, your reader module's read_crash): how a run ended is part "
                        "of the reader contract (core_monitor.readers)")
        if (Plugin.of(backend_class).entry_point is None
                and requirement_modules(backend_class.__module__) is None):
            pytest.skip(f"{backend_class.__module__!r} is not provided by an installed "
                        "distribution, so a writer process may not import it")
        out = tmp_path / f"crash-{death}"
        out.mkdir()
        given = out / "given.pickle"
        given.write_bytes(pickle.dumps((backend_class, backend_options, death, str(out))))
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(TRAIN), str(given)],
                              capture_output=True, text=True, cwd=out, env=os.environ.copy(),
                              timeout=600)
        expected = {"sigkill": -signal.SIGKILL, "sigterm": -signal.SIGTERM, "exception": 1}
        if done.returncode != expected[death]:
            pytest.fail(f"the training script ended with {done.returncode}, expected "
                        f"{expected[death]}; its output:\n{done.stderr[-3000:]}", pytrace=False)
        run: RunInfo = pickle.loads((out / "run.pickle").read_bytes())
        return run

    def _wait_for(self, read: Callable[[RunInfo], Any], run: RunInfo,
                  done: Callable[[Any], bool]) -> Any:
        """``read(run)`` once ``done`` says it holds what is awaited, or at ``SETTLE_SECONDS``."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            try:
                got = read(run)
            except (FileNotFoundError, LookupError):
                got = None
            if done(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.5)

    @staticmethod
    def _logged(capabilities: Any) -> list[tuple[str, int]]:
        """The rows (tag, step) the training script logged, as the backend keeps them: all
        three, or the last one for a ``history="latest"`` backend."""
        logged = [("loss", 0), ("loss", 1), ("loss", 2)]
        return logged[-1:] if capabilities.history == "latest" else logged

    @pytest.mark.parametrize("death", ["sigkill", "sigterm"])
    def test_a_run_whose_training_process_died_reads_back_as_crashed(
        self, death, backend_class, backend_options, read_rows, read_crash, tmp_path,
        capabilities
    ):
        """SIGKILL (nothing runs in the trainer) and SIGTERM (the core closes on it): the
        writer writes every row, calls ``monitor_crash(reason)``, closes; ``read_crash``
        returns the reason (or ``""`` from a tracker that keeps only a failed state)."""
        run = self._end_run(death, read_crash, backend_class, backend_options, tmp_path)
        crash = self._wait_for(read_crash, run, lambda got: got is not None)
        problems = check_crash(crash)
        if problems or crash is None:
            pytest.fail(f"after {death.upper()} of the training process, read_crash returned "
                        f"{crash!r}: {'; '.join(problems) or 'monitor_crash must mark the run'}"
                        " (read_crash returns the reason monitor_crash was given)",
                        pytrace=False)
        start = REASONS[death]
        if crash and start not in crash:
            pytest.fail(f"after {death.upper()}, read_crash returned {crash!r}, which does not "
                        f"hold the reason the core gave monitor_crash (…{start}…): store it "
                        "as given", pytrace=False)
        want = self._logged(capabilities)
        rows = self._wait_for(read_rows, run,
                              lambda got: got is not None and len(got) >= len(want))
        got = sorted((t, s) for t, s, _ in rows or [])
        if got != want:
            pytest.fail(f"after {death.upper()}, expected rows (tag, step) {want}, read_rows "
                        f"returned {got}", pytrace=False)

    def test_a_run_closed_normally_reads_back_as_not_crashed(self, make_monitor, read_crash):
        """``close()`` with no crash: ``read_crash`` returns ``None`` (the kit's monitors, in
        this process)."""
        if read_crash is None:
            pytest.skip("the test class supplies no read_crash (RunInfo -> the crash reason "
                        "or None, your reader module's read_crash)")
        monitor = make_monitor()
        for step in range(3):
            monitor.log({"loss": step / 4}, step=step)
        monitor.close()
        crash = read_crash(monitor.run)
        if crash is not None:
            pytest.fail(f"a run ended by close() reads back as crashed ({crash!r}): read_crash "
                        "must return None for a run monitor_close ended without "
                        "monitor_crash", pytrace=False)

    def test_an_exception_in_with_reads_back_as_crashed(
        self, backend_class, backend_options, read_rows, read_crash, tmp_path, capabilities
    ):
        """An exception that leaves the monitor's ``with`` ends the run as crashed, as
        ``wandb.init()`` and ``mlflow.start_run()`` end theirs: every row is stored, then
        ``monitor_crash`` gets ``"the training process (pid N) raised RuntimeError: boom in
        the training loop"`` and ``read_crash`` returns it (or ``""``)."""
        run = self._end_run("exception", read_crash, backend_class, backend_options, tmp_path)
        crash = self._wait_for(read_crash, run, lambda got: got is not None)
        got = sorted((t, s) for t, s, _ in read_rows(run))
        if got != self._logged(capabilities):
            pytest.fail(f"after an exception in `with`, expected rows (tag, step) "
                        f"{self._logged(capabilities)}, read_rows returned {got}: "
                        "monitor_close must write what monitor_write received", pytrace=False)
        problems = check_crash(crash)
        if problems or crash is None:
            pytest.fail(f"after an exception in `with`, read_crash returned {crash!r}: "
                        f"{'; '.join(problems) or 'monitor_crash must mark the run'}",
                        pytrace=False)
        if crash and REASONS["exception"] not in crash:
            pytest.fail(f"after an exception in `with`, read_crash returned {crash!r}, which "
                        f"does not hold the reason the core gave monitor_crash "
                        f"(…{REASONS['exception']}…): store it as given", pytrace=False)
