"""Hugging Face Trainer: a real ``train()`` of a tiny GPT-2 built from a config (no download);
the Trainer's own ``TensorBoardCallback`` and ``state.log_history`` are the oracles."""

from __future__ import annotations

import math
import warnings

import pytest
import readback
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.integrations import TensorBoardCallback, rewrite_logs

from core_monitor.integrations.transformers import MonitorCallback

BACKENDS = list(readback.BACKENDS)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 32, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 64, (n, 8), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def make_trainer(tmp_path, callbacks, max_steps: int = 6, **arguments) -> Trainer:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1,
                                       n_head=2))
    args = TrainingArguments(**{
        "output_dir": str(tmp_path / "out"), "max_steps": max_steps, "logging_steps": 2,
        "per_device_train_batch_size": 4, "learning_rate": 1e-3, "report_to": "none",
        "use_cpu": True, "save_strategy": "no", "disable_tqdm": True, "run_name": "tiny-gpt2",
        "seed": 0, **arguments})
    return Trainer(model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens(8, 1),
                   callbacks=list(callbacks))


def numeric_history(log_history: list[dict], rewrite: bool = True) -> list[tuple[str, int, float]]:
    """``log_history`` as ``(tag, step, value)``, tags as the Trainer's callbacks name them."""
    rows = []
    for entry in log_history:
        logs = {k: v for k, v in entry.items() if k != "step"}
        for key, value in (rewrite_logs(logs) if rewrite else logs).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append((key, entry["step"], float(value)))
    return rows


def event_scalars(folder) -> list[tuple[str, int, float]]:
    """Every scalar of the TensorBoard event files in ``folder`` (all files: one run)."""
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return sorted((tag, e.step, e.value) for tag in accumulator.Tags()["scalars"]
                  for e in accumulator.Scalars(tag))


# What users get (writer processes): this framework's one run in the users' default dispatch.
@pytest.mark.process
def test_every_backend_holds_the_log_history_under_the_trainers_own_tags(tmp_path, log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback])
    trainer.train()
    expected = numeric_history(trainer.state.log_history)
    assert {step for _, step, _ in expected} == {2, 4, 6}
    assert {"train/loss", "train/learning_rate", "train/train_runtime"} <= {
        tag for tag, _, _ in expected}
    monitor = callback.monitor
    assert not monitor.closed and monitor.run.name == "tiny-gpt2"  # args.run_name
    callback.close()
    for backend in BACKENDS:
        assert readback.runs(backend, monitor.run) == 1, backend
        readback.assert_rows(backend, monitor.run, expected)


def test_tensorboard_callback_and_monitor_callback_store_the_same_tags_steps_and_values(
        tmp_path, log_dir, monkeypatch):
    """One seeded run with both callbacks; train() then evaluate(): the Trainer's own
    TensorBoard folder and every backend hold the same (tag, step, value)."""
    tb_folder = tmp_path / "tb-callback"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tb_folder))
    callback = MonitorCallback(BACKENDS, project="hf", name="parity", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [TensorBoardCallback(), callback])
    trainer.train()
    trainer.evaluate()
    callback.close()
    theirs = event_scalars(tb_folder)
    assert {"train/loss", "train/learning_rate", "train/grad_norm", "train/epoch", "eval/loss",
            "eval/runtime", "train/train_runtime"} <= {tag for tag, _, _ in theirs}
    assert [s for t, s, _ in theirs if t == "eval/loss"] == [6]
    for backend in BACKENDS:
        assert readback.runs(backend, callback.monitor.run) == 1, backend
        ours = sorted(readback.rows(backend, callback.monitor.run))
        assert [(t, s) for t, s, _ in ours] == [(t, s) for t, s, _ in theirs], backend
        for (tag, step, value), (_, _, their) in zip(ours, theirs, strict=True):
            assert math.isclose(value, their, rel_tol=1e-6), (backend, tag, step, value, their)


def test_train_then_evaluate_then_predict_is_one_run(tmp_path, log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", name="stages", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], max_steps=2)
    trainer.train()
    metrics = trainer.evaluate()
    predicted = trainer.predict(Tokens(8, 2)).metrics
    callback.close()
    expected = numeric_history(trainer.state.log_history) + [
        ("test/" + k[len("test_"):], 2, float(v)) for k, v in predicted.items()]
    assert ("eval/loss", 2, metrics["eval_loss"]) in expected
    assert {"test/loss", "test/runtime"} <= {tag for tag, _, _ in expected}
    for backend in BACKENDS:
        assert readback.runs(backend, callback.monitor.run) == 1, backend
        readback.assert_rows(backend, callback.monitor.run, expected)


def test_training_arguments_and_the_model_config_are_the_run_config(tmp_path, log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", name="cfg", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], max_steps=2)
    trainer.train()
    callback.close()
    sanitized = trainer.args.to_sanitized_dict()
    expected = {k: sanitized[k] for k in ("learning_rate", "max_steps", "logging_steps",
                                          "per_device_train_batch_size", "seed")}
    expected.update({"n_embd": 16, "vocab_size": 64,  # the model's config, as wandb/Trackio
                     "model/num_parameters": trainer.model.num_parameters()})
    assert expected["learning_rate"] == 1e-3
    assert {k: callback.monitor.run.config[k] for k in expected} == expected
    for backend in BACKENDS:
        readback.assert_config(backend, callback.monitor.run, expected)


def test_a_second_train_writes_into_the_same_run(tmp_path, log_dir):
    callback = MonitorCallback(["tensorboard"], project="hf", name="again", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], max_steps=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "new run" warning
        trainer.train()
        trainer.train()
    callback.close()
    stored = readback.rows("tensorboard", callback.monitor.run)
    assert [(t, s) for t, s, _ in stored if t == "train/loss"] == [("train/loss", 2)] * 2
    assert all(math.isfinite(v) for _, _, v in stored)


def test_the_class_itself_can_be_passed_as_the_trainer_accepts_its_own(tmp_path, log_dir,
                                                                        monkeypatch):
    monkeypatch.setenv("EXPERIMENT_MONITORS", "tensorboard")
    trainer = make_trainer(tmp_path, [MonitorCallback], max_steps=2)
    (callback,) = [c for c in trainer.callback_handler.callbacks
                   if isinstance(c, MonitorCallback)]
    monkeypatch.chdir(log_dir)  # tensorboard's own default folder, ./runs, under log_dir
    trainer.train()
    callback.close()
    run = callback.monitor.run
    assert (run.project, run.name) == ("huggingface", "tiny-gpt2")  # args.project, .run_name
    assert ("train/loss", 2) in [(t, s) for t, s, _ in readback.rows("tensorboard", run)]


def test_strings_are_stored_as_text_and_other_values_skipped_with_one_warning(tmp_path,
                                                                             log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", name="str", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], max_steps=2)
    trainer.train()
    with pytest.warns(UserWarning, match="'train/ids'"):
        trainer.log({"note": "text", "eval_loss": 0.5, "ids": [1, 2]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.log({"note": "more", "eval_loss": 0.25, "ids": [3]})
    callback.close()
    expected = numeric_history(trainer.state.log_history)  # no list, no str
    assert ("eval/loss", 2, 0.25) in expected
    for backend in BACKENDS:
        readback.assert_rows(backend, callback.monitor.run, expected)
        assert readback.texts(backend, callback.monitor.run) == [
            ("train/note", 2, "more"), ("train/note", 2, "text")], backend


def test_rewrite_logs_false_keeps_the_keys_of_log_history(tmp_path, log_dir):
    callback = MonitorCallback(["tensorboard"], project="hf", name="raw", log_dir=log_dir,
                               rewrite_logs=False)
    trainer = make_trainer(tmp_path, [callback], max_steps=2)
    trainer.train()
    callback.close()
    readback.assert_rows("tensorboard", callback.monitor.run,
                         numeric_history(trainer.state.log_history, rewrite=False))


def wandb_run_ids(run) -> set[str]:
    """The run ids of every wandb folder of ``run`` (a resumed offline run: one id)."""
    from wandb_monitor import find_run_dirs
    from wandb_monitor._compat import read_records

    return {next(r.run.run_id for r in read_records(f) if r.HasField("run"))
            for f in find_run_dirs(run.log_dir, project=run.project, name=run.name)}


def test_resume_from_checkpoint_continues_the_same_run(tmp_path, log_dir):
    """Train to step 4 (checkpoints at 2 and 4), close the run as a process ending would, then
    resume from the OLDER checkpoint: the same run in every backend, step 4 logged twice."""
    callback = MonitorCallback(BACKENDS, project="hf", name="resumed", log_dir=log_dir)
    make_trainer(tmp_path, [callback], max_steps=4, save_strategy="steps", save_steps=2).train()
    callback.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "starts a new run" warning
        trainer = make_trainer(tmp_path, [callback], max_steps=6, save_strategy="steps",
                               save_steps=2)
        trainer.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    callback.close()
    run = callback.monitor.run
    assert (run.name, run.resumed, run.last_step) == ("resumed", True, 4)
    for backend in BACKENDS:
        steps = sorted(s for t, s, _ in readback.rows(backend, run) if t == "train/loss")
        assert steps == [2, 4, 4, 6], backend
    assert readback.runs("trackio", run) == readback.runs("tensorboard", run) == 1
    assert len(wandb_run_ids(run)) == 1
