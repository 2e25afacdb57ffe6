"""The wandb service process (``wandb-core``): started by ``wandb.init``, stopped by the plugin
only when the plugin started it and nothing else uses it.

A service this plugin started, and that no one else's run uses yet, is torn down when the
plugin's last run closes, so no ``wandb-core`` process outlives the monitor; a service someone
else started (the script's own ``wandb.init()``) is left alone. A service that died under a run
(``_compat.service_lost()``) is forgotten (``forget_lost``) and the backend raises
``core_monitor.TrackerLost``: its writer starts it again, on a new service.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from . import _compat

#: Seconds ``finish_run`` waits for the run's exit record to reach the ``.wandb`` file.
FINISH_TIMEOUT = 60.0
#: The same wait after a crash (``WandbMonitor.monitor_crash``): shorter, so that it ends
#: well within the writer process's own limit (``core_monitor.dispatch.wire.DRAIN_SECONDS``).
CRASH_FINISH_TIMEOUT = 10.0
#: The exit code a run finishes with after the training process died: wandb shows a run
#: finished with a nonzero code as "failed".
CRASH_EXIT_CODE = 1

_lock = threading.Lock()
_owned_service_pid: int | None = None
_open_runs = 0


def start_run(init: dict[str, Any]) -> Any:
    """``wandb.init(**init)``, noting whether that started this process's service."""
    global _owned_service_pid, _open_runs
    import wandb

    with _lock:
        starts_service = _compat.service_running() is False
        run = wandb.init(**init)
        if starts_service and _compat.service_running():
            _owned_service_pid = os.getpid()
        _open_runs += 1
    return run


def finish_run(run: Any, file: Path | None, *, exit_code: int | None = None,
               timeout: float = FINISH_TIMEOUT) -> None:
    """Finish ``run``; stop the service if this plugin started it and nothing else uses it;
    return once ``file`` (the run's ``.wandb`` log, ``None`` when disabled) holds the exit record.

    ``Run.finish()`` offline has been seen to return before wandb-core wrote the exit record
    (about 1 run in 100), so this polls the file's tail for it, up to ``timeout`` seconds.

    Args:
        run: the ``wandb.Run`` to finish.
        file: its ``.wandb`` file, or ``None`` (mode ``"disabled"``: nothing to wait for).
        exit_code: passed to ``Run.finish(exit_code=...)``: ``None`` or 0 is a finished run,
            any other value a failed one (``CRASH_EXIT_CODE`` after a crash).
        timeout: seconds to wait for the exit record once ``Run.finish`` returned.

    Raises:
        TimeoutError: the exit record did not reach the file in time.
    """
    try:
        run.finish(exit_code=exit_code)
    except Exception:
        if _compat.service_lost():
            raise  # the backend raises TrackerLost: its writer starts it again
        _release()
        # Someone called wandb.teardown() first: the service closed the run's file on its way
        # down (every row is in it, but no exit record), and finish() cannot reach it.
        if _compat.service_running() is not False:
            raise
        return
    _release()
    if file is None:
        return
    deadline = time.monotonic() + timeout
    delay = 0.001
    while not _compat.exit_record_written(file):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"wandb: the run's exit record did not reach {str(file)!r} within "
                f"{timeout:g} s of finish(); the file may be incomplete"
            )
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def _release() -> None:
    """One run fewer; stop the service if this plugin started it and nothing else uses it."""
    global _owned_service_pid, _open_runs
    import wandb

    with _lock:
        _open_runs -= 1
        if (
            _owned_service_pid == os.getpid()
            and _open_runs == 0
            and _compat.service_running()
            and not _compat.other_runs_active()
        ):
            _owned_service_pid = None
            wandb.teardown()


def forget_lost() -> None:
    """The service died under a run (``_compat.service_lost()``): forget that run and the
    service, so that the next ``start_run`` starts a new one. ``wandb.teardown()`` (public)
    drops this process's connection to the dead service before it fails on it."""
    global _owned_service_pid, _open_runs
    import wandb

    with _lock:
        _open_runs = max(0, _open_runs - 1)
        _owned_service_pid = None
        with contextlib.suppress(Exception):  # it reports the dead connection it dropped
            wandb.teardown()
