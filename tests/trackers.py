"""The first-party backends, as the cross-backend tests (tests/plugins) name and read them."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from core_monitor import Capabilities, RunInfo, discovery

#: Every first-party backend -> its plugin's module, in the order the tests select them.
PLUGIN_MODULES = {
    "trackio": "trackio_monitor", "tensorboard": "tensorboard_monitor",
    "wandb": "wandb_monitor", "mlflow": "mlflow_monitor", "csv": "csv_monitor",
    "comet": "comet_monitor", "aim": "aim_monitor", "dvclive": "dvclive_monitor",
    "swanlab": "swanlab_monitor", "clearml": "clearml_monitor",
}
#: The backends installed here, in that order: a plugin whose SDK has no build for this Python
#: (aim-monitor on 3.13, see noxfile.UNSUPPORTED_PYTHONS) is not installed in that session.
PLUGINS: dict[str, ModuleType] = {
    name: importlib.import_module(module) for name, module in PLUGIN_MODULES.items()
    if importlib.util.find_spec(module) is not None
}
BACKENDS = list(PLUGINS)
#: The backends that continue a run (``Capabilities.supports_resume``): the resume tests select
#: these. Not SwanLab (it resumes only on its cloud) nor ClearML (an offline session cannot be
#: continued).
RESUMABLE = [name for name in BACKENDS if Capabilities.of(
    discovery.load_backend(discovery.find_backend(name))).supports_resume]
#: Backend name -> its plugin's ``read_rows(run)``: ``[(tag, step, value)]`` from its storage.
READERS = {name: module.read_rows for name, module in PLUGINS.items()}


def assert_crash_marks(run: RunInfo, reason: str, last_step: int) -> None:
    """Every first-party backend that has a place for it shows that ``run`` ended by a crash
    whose reason starts with ``reason``, marked at ``last_step`` where the mark has a step
    (wandb's exit code has no reason)."""
    for name in BACKENDS:
        globals()[f"_{name}_crash"](PLUGINS[name], run, reason, last_step)


def _wandb_crash(wandb_monitor: ModuleType, run: RunInfo, reason: str, last_step: int) -> None:
    assert wandb_monitor.read_exit_code(run) == wandb_monitor.CRASH_EXIT_CODE == 1


def _mlflow_crash(mlflow_monitor: ModuleType, run: RunInfo, reason: str, last_step: int) -> None:
    found = mlflow_monitor.find_run(run)
    assert found.info.status == "FAILED"
    assert found.data.tags[mlflow_monitor.CRASH_TAG].startswith(reason)


def _trackio_crash(trackio_monitor: ModuleType, run: RunInfo, reason: str,
                   last_step: int) -> None:
    alerts = trackio_monitor.read_alerts(run)
    assert [(level, title, step) for level, title, _, step in alerts] == [
        ("error", trackio_monitor.CRASH_ALERT_TITLE, last_step)]
    assert alerts[0][2].startswith(reason)


def _tensorboard_crash(tensorboard_monitor: ModuleType, run: RunInfo, reason: str,
                       last_step: int) -> None:
    texts = [(tag, step, value.text) for tag, step, value in tensorboard_monitor.read_media(run)
             if value.kind == "text"]
    assert [(tag, step) for tag, step, _ in texts] == [(tensorboard_monitor.CRASH_TAG, last_step)]
    assert texts[0][2].startswith(reason)


def _csv_crash(csv_monitor: ModuleType, run: RunInfo, reason: str, last_step: int) -> None:
    status = csv_monitor.read_status(csv_monitor.run_dir(run))
    assert status is not None and status.startswith(f"crashed: {reason}")


def _comet_crash(comet_monitor: ModuleType, run: RunInfo, reason: str, last_step: int) -> None:
    assert (comet_monitor.read_crash(run) or "").startswith(reason)
    assert comet_monitor.CRASH_TAG in comet_monitor.read_tags(run)


def _aim_crash(aim_monitor: ModuleType, run: RunInfo, reason: str, last_step: int) -> None:
    aim_crash = aim_monitor.read_crash(run)
    assert aim_crash is not None and aim_crash.startswith(reason)


def _dvclive_crash(dvclive_monitor: ModuleType, run: RunInfo, reason: str,
                   last_step: int) -> None:
    status = dvclive_monitor.status_of(run)
    assert status is not None and status.startswith(f"crashed: {reason}")


def _swanlab_crash(swanlab_monitor: ModuleType, run: RunInfo, reason: str,
                   last_step: int) -> None:
    state, error = swanlab_monitor.read_finish(run) or ("no finish record", "")
    assert state == "RUN_STATE_CRASHED" and error.startswith(reason)


def _clearml_crash(clearml_monitor: ModuleType, run: RunInfo, reason: str,
                   last_step: int) -> None:
    crash = clearml_monitor.read_crash(run)
    assert crash is not None and crash.startswith(reason)
