"""Each framework integration reaches every backend of tests/trackers.py by name (a backend
joins when it is added there), each proven on one real CPU run: a DeepSpeed
``experiment_monitors`` section, accelerate's ``MonitorTracker([...])``, Lightning's
``MonitorLogger([...])`` and the Trainer's ``MonitorCallback([...])``. Every backend's own
storage, read through its plugin's reader, holds exactly the (tag, step, value) the framework's
own record holds: DeepSpeed's ``csv_monitor`` files, accelerate's TensorBoard tracker,
Lightning's ``CSVLogger``, the Trainer's ``state.log_history``.

The other modules of this folder prove each integration in depth on three backends; this one
is their breadth, one short run per framework."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from _run import load, run_script
from accelerate import Accelerator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_accelerate import expected_rows, train
from test_lightning import csv_rows, fit
from test_transformers import make_trainer, numeric_history
from trackers import BACKENDS, READERS

import csv_monitor
from core_monitor import Capabilities, RunInfo, discovery
from core_monitor.integrations.accelerate import MonitorTracker
from core_monitor.integrations.transformers import MonitorCallback
from core_monitor.readers import same_value

Rows = list[tuple[str, int, float]]


#: SwanLab keeps one value per tag and step (``repeated_steps="first"``, declared) and says so
#: once per tag; Lightning logs ``epoch`` and the Trainer ``train/epoch`` twice at one step.
#: (``.`` for the colon after "swanlab": a filter's fields are separated by colons)
REPEATED_STEP_WARNING = "ignore:swanlab. a point of tag .* is not stored:RuntimeWarning"


def first_per_step(rows: Rows) -> Rows:
    """``rows`` (in logging order) keeping the first value of each tag and step."""
    seen: set[tuple[str, int]] = set()
    kept = []
    for tag, step, value in rows:
        if (tag, step) not in seen:
            seen.add((tag, step))
            kept.append((tag, step, value))
    return kept


def assert_every_backend_holds(run: RunInfo, expected: Rows,
                               backends: list[str] = BACKENDS) -> None:
    """Each backend of ``BACKENDS`` stores exactly ``expected`` (in logging order) for ``run``
    (any row order), values equal at the precision it stores (TensorBoard: float32); a backend
    declaring ``repeated_steps="first"`` the first value of each tag and step."""
    for backend in backends:
        capabilities = Capabilities.of(
            discovery.load_backend(discovery.find_backend(backend)))
        dtype = capabilities.value_dtype
        want = sorted(first_per_step(expected) if capabilities.repeated_steps == "first"
                      else expected)
        got = sorted(READERS[backend](run))
        assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in want], (
            f"{backend}: stored {got}\nexpected {want}")
        for (tag, step, value), (_, _, wanted) in zip(got, want, strict=True):
            assert same_value(value, wanted, dtype), f"{backend}: {tag}@{step} {value} {wanted}"


def deepspeed_csv(folder: Path) -> Rows:
    """Every engine event in DeepSpeed's ``csv_monitor`` layout (written by the ``csv`` backend
    through that section): one file per tag, named after it with ``/`` as ``_`` (the engine's
    tags are ``Train/Samples/<name>``, which gives them back)."""
    rows = []
    for path in sorted(folder.glob("Train_Samples_*.csv")):
        tag = "Train/Samples/" + path.stem[len("Train_Samples_"):]
        with path.open(newline="") as file:
            rows += [(tag, int(step), float(value)) for step, value in list(csv.reader(file))[1:]]
    return rows


def test_a_deepspeed_experiment_monitors_section_naming_every_backend(log_dir, tmp_path):
    out = tmp_path / "out.json"
    done = run_script("ds_train.py", log_dir, out, "section", ",".join(BACKENDS), nproc=1)
    # Shown by pytest when the test fails (how ClearML's missing session, issue 43, was found:
    # a ClearML test of this worker had left CLEARML_PROC_MASTER_ID behind).
    print(f"--- the training script's output (the last 8000 characters of each)\n"
          f"{done.stdout[-8000:]}\n--- stderr\n{done.stderr[-8000:]}\n--- {log_dir}/clearml:")
    for path in sorted((log_dir / "clearml").rglob("*")):
        print(path.relative_to(log_dir), path.stat().st_size if path.is_file() else "/")
        if path.name == "task.json":
            print(path.read_text()[:600])
    result = load(out)
    print(f"--- failures {result['failures']}, undelivered {result['undelivered']}")
    assert sorted(result["backends"]) == sorted(BACKENDS) and result["enabled"] is True
    theirs = deepspeed_csv(log_dir / "csv" / "dsrun")
    samples = [s["global_samples"] for s in result["steps"]]
    assert samples == [2, 4, 6, 8]
    # the csv_monitor section's files (our csv backend, DeepSpeed's layout) hold the engine's lr
    assert sorted((t, s, v) for t, s, v in theirs if t == "Train/Samples/lr") == [
        ("Train/Samples/lr", s["global_samples"], s["lr"]) for s in result["steps"]]
    mine = [("train/loss", s["global_samples"], s["loss"]) for s in result["steps"]]
    # csv came through the csv_monitor section: DeepSpeed's layout in its own folder
    assert sorted(csv_monitor.read_rows_in(log_dir / "csv" / "dsrun")) == sorted(theirs + mine)
    assert_every_backend_holds(RunInfo(project="ds", name="dsrun", log_dir=log_dir),
                               theirs + mine, [b for b in BACKENDS if b != "csv"])


def test_accelerate_monitor_tracker_naming_every_backend(log_dir):
    tracker = MonitorTracker(BACKENDS, run_name="every")
    accelerator = Accelerator(log_with=["tensorboard", tracker], cpu=True, project_dir=log_dir)
    accelerator.init_trackers("acc")
    logged = train(accelerator, steps=3)
    accelerator.end_training()
    assert sorted(tracker.monitor.backends) == sorted(BACKENDS)
    # accelerate's own TensorBoard tracker: event files directly in <project_dir>/<project>
    theirs = EventAccumulator(str(log_dir / "acc"), size_guidance={"scalars": 0}).Reload()
    scalars = [(tag, e.step, e.value) for tag in theirs.Tags()["scalars"]
               for e in theirs.Scalars(tag)]
    assert sorted((t, s) for t, s, _ in scalars) == sorted(
        (t, s) for t, s, _ in expected_rows(logged))
    assert_every_backend_holds(tracker.monitor.run, expected_rows(logged))


@pytest.mark.filterwarnings(REPEATED_STEP_WARNING)
def test_lightning_monitor_logger_naming_every_backend(log_dir):
    monitor_logger, csv_logger, trainer = fit(log_dir, name="every", backends=BACKENDS)
    oracle = csv_rows(Path(csv_logger.log_dir) / "metrics.csv")
    assert len([r for r in oracle if r[0] == "train_loss"]) == 12  # 6 batches x 2 epochs
    assert max(step for _, step, _ in oracle) == trainer.global_step - 1
    monitor_logger.close()
    assert sorted(monitor_logger.monitor.backends) == sorted(BACKENDS)
    assert_every_backend_holds(monitor_logger.monitor.run, oracle)


@pytest.mark.filterwarnings(REPEATED_STEP_WARNING)
def test_trainer_monitor_callback_naming_every_backend(tmp_path, log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", name="every", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], max_steps=4)
    trainer.train()
    callback.close()
    expected = numeric_history(trainer.state.log_history)
    assert {step for _, step, _ in expected} == {2, 4}
    assert sorted(callback.monitor.backends) == sorted(BACKENDS)
    assert_every_backend_holds(callback.monitor.run, expected)
