"""The Trainer's own ``report_to`` callbacks for DVCLive, SwanLab, Comet and ClearML beside
``MonitorCallback`` with the same backend: what each stored, read back.

One seeded tiny-GPT-2 ``train()`` with ``report_to=[<tracker>]`` and
``MonitorCallback([<backend>])`` (ClearML: two identical seeded runs, see its test). The
built-in callback's storage is read with the SDK's own files and readers, ours through the
plugin's reader; the Trainer's
``state.log_history`` is the oracle for both. Where the two differ, the difference is the one
``docs/frameworks/transformers.md`` names, asserted as named there.

Offline, as each callback is configured (read in transformers' ``integration_utils``):
DVCLive's ``Live()`` in a fresh current folder under ``tmp_path`` (no Git repository: it would
``dvc init`` there) without DVC Studio; SwanLab ``SWANLAB_MODE=offline`` with
``SWANLAB_LOG_DIR`` under ``tmp_path``; Comet ``COMET_START_ONLINE=0`` (``comet_ml.start``
reads it) with ``COMET_OFFLINE_DIRECTORY`` under ``tmp_path``; ClearML
``CLEARML_OFFLINE_MODE=1`` with ``CLEARML_CACHE_DIR`` under ``tmp_path``.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
import readback
from test_transformers import make_trainer, numeric_history
from transformers.integrations import rewrite_logs

from core_monitor.integrations.transformers import MonitorCallback

#: What the Trainer logs at the end of training, which the SwanLab and ClearML callbacks store
#: as single values (transformers' ``single_value_scalars``).
END_VALUES = ("train_runtime", "train_samples_per_second", "train_steps_per_second",
              "train_loss", "total_flos")


def builtin_callback(trainer, name: str) -> Any:
    (found,) = [cb for cb in trainer.callback_handler.callbacks if type(cb).__name__ == name]
    return found


def same_rows(got: list[tuple[str, int, float]], want: list[tuple[str, int, float]]) -> None:
    got, want = sorted(got), sorted(want)
    assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in want], (got, want)
    for (tag, step, value), (_, _, wanted) in zip(got, want, strict=True):
        assert math.isclose(value, wanted, rel_tol=1e-9), (tag, step, value, wanted)


# --- DVCLive --------------------------------------------------------------------------------

def test_dvclive_callback_and_monitor_callback(tmp_path, log_dir, dvc_work_dir):
    """``DVCLiveCallback`` counts its own steps (``Live.next_step()`` after each ``on_log``:
    0, 1, 2, ...) under DVCLive's names (``loss``, ``eval/loss``, ``train/runtime``); ours
    stores ``state.global_step`` under the Trainer's tags (``train/loss``), the same values
    (documented). Both store the training arguments as ``params.yaml``."""
    from dvclive.serialize import load_yaml
    from dvclive.utils import standardize_metric_name

    from dvclive_monitor.reader import read_rows_in

    callback = MonitorCallback(["dvclive"], project="hf", name="beside", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], report_to=["dvclive"], eval_strategy="steps",
                           eval_steps=4)
    trainer.train()
    callback.close()
    live = builtin_callback(trainer, "DVCLiveCallback").live
    history = trainer.state.log_history

    theirs = read_rows_in(Path(live.dir))
    expected_theirs = [(standardize_metric_name(key, "dvclive.huggingface"), index, float(value))
                       for index, entry in enumerate(history) for key, value in entry.items()
                       if key != "step" and isinstance(value, (int, float))]
    same_rows(theirs, expected_theirs)
    same_rows(readback.rows("dvclive", callback.monitor.run), numeric_history(history))
    assert {s for _, s, _ in theirs} == set(range(len(history)))

    params = load_yaml(live.params_file)
    ours = readback.config("dvclive", callback.monitor.run)
    for key in ("learning_rate", "max_steps", "logging_steps", "run_name", "seed"):
        assert ours[key] == params[key], key


# --- SwanLab --------------------------------------------------------------------------------

def first_per_step(rows: list[tuple[str, int, float]]) -> list[tuple[str, int, float]]:
    """``rows`` as SwanLab keeps them: the first value of each tag and step."""
    kept: dict[tuple[str, int], float] = {}
    for tag, step, value in rows:
        kept.setdefault((tag, step), value)
    return [(tag, step, value) for (tag, step), value in kept.items()]


def swanlab_rows(run_dir: Path) -> list[tuple[str, int, float]]:
    from swanlab_monitor import _compat

    (file,) = run_dir.glob("run-*.swanlab")
    return [(r.scalar.key, int(r.scalar.step), float(r.scalar.value.number))
            for r in _compat.read_records(file) if r.HasField("scalar")]


def test_swanlab_callback_fails_to_start_without_a_run(tmp_path, work_dir):
    """``SwanLabCallback`` with SwanLab 0.10 and no run made beforehand: ``train()`` fails at
    its start (``swanlab.get_run()`` raises), offline and online alike (documented)."""
    trainer = make_trainer(tmp_path, [], report_to=["swanlab"])
    with pytest.raises(RuntimeError, match="No active Run"):
        trainer.train()


# SwanLab keeps one current run per process: ours in a writer process (the users' default).
@pytest.mark.process
def test_swanlab_callback_and_monitor_callback(tmp_path, log_dir, work_dir):
    """Both store every ``on_log`` at ``state.global_step`` under the Trainer's tags; the
    ``SwanLabCallback`` also logs ``train/global_step`` at each step and puts the end-of-training
    values under ``single_value/<key>``, where ours stores them as ``train/train_runtime``, ...
    (the Trainer's ``rewrite_logs``, as ``TensorBoardCallback``; documented)."""
    import swanlab

    # SwanLab 0.10's get_run() raises where it returned None, so SwanLabCallback fails at the
    # start of training unless a run exists: one made first, which the callback then uses
    # (its documented way for a run made by hand; documented on the transformers page).
    swanlab.init(project="hf", experiment_name="builtin", mode="offline")
    callback = MonitorCallback(["swanlab"], project="hf", name="beside", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], report_to=["swanlab"])
    # the last training log and the end-of-training log are both at the last step, each with
    # `epoch`: SwanLab keeps one value per tag and step (the first), in both; ours says so once
    with pytest.warns(RuntimeWarning, match="'train/epoch' is not stored"):
        trainer.train()
        callback.close()
    swanlab.finish()  # the callback leaves the run open for what the Trainer does next
    history = trainer.state.log_history

    (run_dir,) = Path(os.environ["SWANLAB_LOG_DIR"]).glob("run-*")
    expected_theirs = []
    for entry in history:
        step = entry["step"]
        logs = {k: v for k, v in entry.items() if k != "step"}
        expected_theirs += [(f"single_value/{k}", step, float(v)) for k, v in logs.items()
                            if k in END_VALUES]
        rest = rewrite_logs({k: v for k, v in logs.items() if k not in END_VALUES})
        expected_theirs += [(k, step, float(v)) for k, v in rest.items()]
        expected_theirs.append(("train/global_step", step, float(step)))
    same_rows(swanlab_rows(run_dir), first_per_step(expected_theirs))
    same_rows(readback.rows("swanlab", callback.monitor.run),
              first_per_step(numeric_history(history)))
    assert {f"train/{k}" for k in END_VALUES} <= {t for t, _, _ in numeric_history(history)}


# --- Comet ----------------------------------------------------------------------------------

def comet_payloads(folder: Path) -> list[dict[str, Any]]:
    (archive,) = folder.glob("*.zip")
    with zipfile.ZipFile(archive) as opened:
        lines = opened.read("messages.json").decode("utf-8").splitlines()
    return [json.loads(line)["payload"] for line in lines if line.strip()]


def test_comet_callback_and_monitor_callback(tmp_path, log_dir, work_dir, monkeypatch):
    """Both store every ``on_log`` at ``state.global_step`` under the Trainer's tags. The
    config differs in its names: ``CometCallback`` logs the parameters ``args|<name>`` and
    ``config|<name>`` (flattened), ours the keys themselves, the training arguments over the
    model's config (documented)."""
    monkeypatch.setenv("COMET_START_ONLINE", "0")
    callback = MonitorCallback(["comet"], project="hf", name="beside", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], report_to=["comet_ml"])
    trainer.train()
    callback.close()
    import comet_ml

    comet_ml.end()  # the callback leaves its experiment open for what the Trainer does next
    history = trainer.state.log_history

    payloads = comet_payloads(Path(os.environ["COMET_OFFLINE_DIRECTORY"]))
    theirs = [(p["metric"]["metricName"], int(p["metric"]["step"]),
               float(p["metric"]["metricValue"])) for p in payloads if "metric" in p
              and not p["metric"]["metricName"].startswith("sys.")
              and p["metric"]["metricName"] != "process duration"]
    same_rows(theirs, numeric_history(history))
    same_rows(readback.rows("comet", callback.monitor.run), numeric_history(history))

    params = {p["param"]["paramName"]: p["param"]["paramValue"] for p in payloads
              if "param" in p and p["param"].get("source") == "manual"}
    ours = readback.config("comet", callback.monitor.run)
    for key in ("learning_rate", "max_steps", "seed"):
        assert float(params[f"args|{key}"]) == float(ours[key]), key
    for key in ("n_embd", "vocab_size"):
        assert float(params[f"config|{key}"]) == float(ours[key]), key
    assert "learning_rate" not in params and "args|learning_rate" not in ours


# --- ClearML --------------------------------------------------------------------------------

def clearml_events(session: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in (session / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        events.extend(json.loads(line))
    return events


# ClearML allows one task per process and the suite runs ours in this process (thread
# dispatch; beside a task, writer processes are the clearml plugin's tests' concern): the two
# callbacks run in two identical seeded runs, one after the other.
def test_clearml_callback_and_monitor_callback(tmp_path, log_dir, work_dir, monkeypatch,
                                               clearml_task_here):
    """``ClearMLCallback`` titles scalars ``train``/``eval`` with the key as the series
    (``train`` / ``loss``) and stores the end-of-training values and ``epoch`` as single
    values; ours keeps the Trainer's tag whole as the series (``train/loss``, plot ``train``)
    and stores every value at its step (documented). The same steps and values otherwise.
    Config: ``ClearMLCallback``'s hyperparameter section ``Transformers`` and configuration
    object ``Model Configuration``; ours the section ``General`` (documented)."""
    from clearml import Task

    monkeypatch.setenv("CLEARML_CACHE_DIR", str(tmp_path / "clearml-builtin"))
    # The task made first, as ClearMLCallback's own (its project, name and frameworks), but
    # without repository detection (its thread reads the Git checkout around the test, e.g.
    # this one with .nox/, and close() waits for it: minutes) and machine monitoring; the
    # callback takes a task that exists for its own ("External ClearML Task has been
    # connected") and stores the same.
    Task.set_offline(True)
    task = Task.init(project_name="HuggingFace Transformers", task_name="Trainer",
                     auto_connect_frameworks={"tensorboard": False, "pytorch": False,
                                              "detect_repository": False},
                     auto_resource_monitoring=False)
    trainer = make_trainer(tmp_path / "builtin", [], report_to=["clearml"])
    trainer.train()
    task.close()
    builtin_history = trainer.state.log_history
    monkeypatch.delenv("CLEARML_CACHE_DIR")
    (task_file,) = (tmp_path / "clearml-builtin" / "offline").glob("*/task.json")

    callback = MonitorCallback(["clearml"], project="hf", name="after", log_dir=log_dir)
    trainer = make_trainer(tmp_path / "ours", [callback])
    trainer.train()
    callback.close()
    history = trainer.state.log_history
    assert [sorted(e) for e in history] == [sorted(e) for e in builtin_history]

    expected_theirs, singles = [], {}
    for entry in builtin_history:
        for key, value in entry.items():
            if key == "step" or not isinstance(value, (int, float)):
                continue
            if key in (*END_VALUES, "epoch"):
                singles[key] = value
            elif key.startswith("eval_"):
                expected_theirs.append(("eval", key[5:], entry["step"], float(value)))
            else:
                expected_theirs.append(("train", key, entry["step"], float(value)))
    events = clearml_events(task_file.parent)
    theirs = sorted((e["metric"], e["variant"], e["iter"], e["value"]) for e in events
                    if e["metric"] != "Summary")
    assert [(m, v, s) for m, v, s, _ in theirs] == sorted(
        (m, v, s) for m, v, s, _ in expected_theirs)
    assert {e["variant"] for e in events if e["metric"] == "Summary"} == set(singles)

    ours = numeric_history(history)
    assert {t for t, _, _ in ours} >= {"train/loss", "train/epoch", "train/train_runtime"}
    import clearml_monitor

    assert sorted(readback.rows("clearml", callback.monitor.run)) == sorted(
        (t, s, v) for t, s, v in ours)
    ours_events = clearml_events(clearml_monitor.find_session(callback.monitor.run))
    assert {(e["metric"], e["variant"]) for e in ours_events} == {
        (t.rpartition("/")[0] or t, t) for t, _, _ in ours}

    task = json.loads(task_file.read_text(encoding="utf-8"))
    assert float(task["hyperparams"]["Transformers"]["learning_rate"]["value"]) == 1e-3
    assert "Model Configuration" in task["configuration"]
    assert readback.config("clearml", callback.monitor.run)["learning_rate"] == 1e-3
