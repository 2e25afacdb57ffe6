"""Hugging Face Trainer: a real ``train()`` of a tiny GPT-2 built from a config (no download)."""

from __future__ import annotations

import math
import warnings

import pytest
import readback
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from core_monitor.integrations.transformers import MonitorCallback

BACKENDS = list(readback.BACKENDS)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 32) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 8), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def make_trainer(tmp_path, callback: MonitorCallback, max_steps: int = 6) -> Trainer:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1,
                                       n_head=2))
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=max_steps, logging_steps=2,
        per_device_train_batch_size=4, learning_rate=1e-3, report_to="none", use_cpu=True,
        save_strategy="no", disable_tqdm=True, run_name="tiny-gpt2", seed=0,
    )
    return Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback])


def numeric_history(log_history: list[dict]) -> list[tuple[str, int, float]]:
    return [(key, entry["step"], float(value)) for entry in log_history
            for key, value in entry.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)]


def test_every_backend_holds_the_numeric_log_history_at_its_step(tmp_path, log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", log_dir=log_dir)
    trainer = make_trainer(tmp_path, callback)
    trainer.train()
    expected = numeric_history(trainer.state.log_history)
    assert {step for _, step, _ in expected} == {2, 4, 6}
    assert {"loss", "learning_rate", "train_runtime"} <= {tag for tag, _, _ in expected}
    monitor = callback.monitor
    assert monitor.closed and monitor.run.name == "tiny-gpt2"  # args.run_name
    for backend in BACKENDS:
        assert readback.runs(backend, monitor.run) == 1, backend
        readback.assert_rows(backend, monitor.run, expected)


def test_training_arguments_are_the_run_config(tmp_path, log_dir):
    callback = MonitorCallback(BACKENDS, project="hf", name="cfg", log_dir=log_dir)
    trainer = make_trainer(tmp_path, callback, max_steps=2)
    trainer.train()
    sanitized = trainer.args.to_sanitized_dict()
    expected = {k: sanitized[k] for k in ("learning_rate", "max_steps", "logging_steps",
                                          "per_device_train_batch_size", "seed")}
    assert expected["learning_rate"] == 1e-3
    assert {k: callback.monitor.run.config[k] for k in expected} == expected
    for backend in BACKENDS:
        readback.assert_config(backend, callback.monitor.run, expected)


def test_a_second_train_starts_a_second_run_and_says_so(tmp_path, log_dir):
    callback = MonitorCallback(["tensorboard"], project="hf", name="again", log_dir=log_dir)
    trainer = make_trainer(tmp_path, callback, max_steps=2)
    trainer.train()
    first = callback.monitor.run
    with pytest.warns(UserWarning, match="new run 'again-2'"):
        trainer.train()
    second = callback.monitor.run
    assert (first.name, second.name) == ("again", "again-2")
    for run in (first, second):
        stored = readback.rows("tensorboard", run)
        assert [(t, s) for t, s, _ in stored if t == "loss"] == [("loss", 2)]
        assert all(math.isfinite(v) for _, _, v in stored)


def test_non_numeric_log_entries_are_skipped_with_one_warning(tmp_path, log_dir):
    callback = MonitorCallback(["tensorboard"], project="hf", name="str", log_dir=log_dir)
    trainer = make_trainer(tmp_path, callback, max_steps=2)
    trainer.train()  # the run is closed: logging again must start the next run
    with pytest.warns(UserWarning, match="new run 'str-2'"), \
            pytest.warns(UserWarning, match="'note'"):
        trainer.log({"note": "text", "eval_loss": 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.log({"note": "more", "eval_loss": 0.25})
    callback.on_train_end(trainer.args, trainer.state, trainer.control)
    readback.assert_rows("tensorboard", callback.monitor.run,
                         [("eval_loss", 2, 0.5), ("epoch", 2, trainer.state.epoch),
                          ("eval_loss", 2, 0.25), ("epoch", 2, trainer.state.epoch)])
