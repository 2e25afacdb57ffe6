"""The first-party backends, as the cross-backend tests (tests/plugins) name and read them."""

from __future__ import annotations

import aim_monitor
import comet_monitor
import csv_monitor
import dvclive_monitor
import mlflow_monitor
import swanlab_monitor
import tensorboard_monitor
import trackio_monitor
import wandb_monitor
from core_monitor import RunInfo

#: The first-party backends, in the order the tests select them.
BACKENDS = ["trackio", "tensorboard", "wandb", "mlflow", "csv", "comet", "aim", "dvclive",
            "swanlab"]
#: The backends that continue a run (``supports_resume``): the resume tests select these.
#: SwanLab resumes only on its cloud.
RESUMABLE = [name for name in BACKENDS if name != "swanlab"]
#: Backend name -> its plugin's ``read_rows(run)``: ``[(tag, step, value)]`` from its storage.
READERS = {
    "trackio": trackio_monitor.read_rows,
    "tensorboard": tensorboard_monitor.read_rows,
    "wandb": wandb_monitor.read_rows,
    "mlflow": mlflow_monitor.read_rows,
    "csv": csv_monitor.read_rows,
    "comet": comet_monitor.read_rows,
    "aim": aim_monitor.read_rows,
    "dvclive": dvclive_monitor.read_rows,
    "swanlab": swanlab_monitor.read_rows,
}


def assert_crash_marks(run: RunInfo, reason: str, last_step: int, *, wandb: bool = True) -> None:
    """Every first-party backend that has a place for it shows that ``run`` ended by a crash
    whose reason starts with ``reason``, marked at ``last_step`` where the mark has a step
    (wandb's exit code has no reason; ``wandb=False`` skips it, for a run whose wandb service
    died before its exit record)."""
    if wandb:
        assert wandb_monitor.read_exit_code(run) == wandb_monitor.CRASH_EXIT_CODE == 1
    found = mlflow_monitor.find_run(run)
    assert found.info.status == "FAILED"
    assert found.data.tags[mlflow_monitor.CRASH_TAG].startswith(reason)
    alerts = trackio_monitor.read_alerts(run)
    assert [(level, title, step) for level, title, _, step in alerts] == [
        ("error", trackio_monitor.CRASH_ALERT_TITLE, last_step)]
    assert alerts[0][2].startswith(reason)
    texts = [(tag, step, value.text) for tag, step, value in tensorboard_monitor.read_media(run)]
    assert [(tag, step) for tag, step, _ in texts] == [(tensorboard_monitor.CRASH_TAG, last_step)]
    assert texts[0][2].startswith(reason)
    status = csv_monitor.read_status(csv_monitor.run_dir(run))
    assert status is not None and status.startswith(f"crashed: {reason}")
    assert (comet_monitor.read_crash(run) or "").startswith(reason)
    assert comet_monitor.CRASH_TAG in comet_monitor.read_tags(run)
    aim_crash = aim_monitor.read_crash(run)
    assert aim_crash is not None and aim_crash.startswith(reason)
    status = dvclive_monitor.status_of(run)
    assert status is not None and status.startswith(f"crashed: {reason}")
    state, error = swanlab_monitor.read_finish(run) or ("no finish record", "")
    assert state == "RUN_STATE_CRASHED" and error.startswith(reason)
