"""The first-party backends, as the cross-backend tests (tests/plugins) name and read them."""

from __future__ import annotations

import importlib
import importlib.util
from collections import Counter
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


#: Backend name -> its plugin's reader module (its ``experiment_monitor_readers`` entry point).
READER_MODULES = {name: importlib.import_module(f"{module.__name__}.reader")
                  for name, module in PLUGINS.items()}
#: The trackers that keep a failed state but no reason (wandb's exit code): ``read_crash``
#: returns ``""`` for them.
NO_CRASH_REASON = {"wandb"}


def assert_crash_marks(run: RunInfo, reason: str) -> None:
    """Every first-party backend reads ``run`` back as ended by a crash whose reason starts
    with ``reason`` (``read_crash``, the reader contract), or as failed without a reason where
    the tracker keeps none."""
    for name in BACKENDS:
        crash = READER_MODULES[name].read_crash(run)
        if name in NO_CRASH_REASON:
            assert crash == "", (name, crash)
        else:
            assert crash is not None and crash.startswith(reason), (name, crash, reason)


def stored(name: str, run: RunInfo) -> Counter[tuple[str, int]]:
    """The ``(tag, step)`` points backend ``name`` holds of ``run``, each as often as stored.
    SwanLab and ClearML cannot continue a run (not ``RESUMABLE``): what a resume or
    ``monitors sync`` delivers to them lands in a new run of the same name, and their readers
    read the newest; here each run is read, newest first, then moved out of the reader's sight
    (into a folder ``read`` beside the runs' folder) so that the next one is."""
    if name in RESUMABLE:
        return Counter((tag, step) for tag, step, _ in READERS[name](run))
    if name == "swanlab":
        from swanlab_monitor.reader import find_run_dir as newest
    else:
        from clearml_monitor.reader import find_session as newest
    points: Counter[tuple[str, int]] = Counter()
    while True:
        try:
            folder = newest(run)
        except LookupError:
            return points
        points.update((tag, step) for tag, step, _ in READERS[name](run))
        aside = folder.parent.parent / "read" / folder.name
        aside.parent.mkdir(exist_ok=True)
        folder.rename(aside)

