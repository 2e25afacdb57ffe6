"""The Trainer's own callback tests, run with ``MonitorCallback``.

Restated from transformers 5's ``tests/trainer/test_trainer_callback.py``: each test names the
one it restates. The construction changes (our tiny GPT-2 and ``MonitorCallback`` instead of
the regression model and the recording ``MyTestTrainerCallback``) and so does the read-back:
where the recorder listed events, the backends' own storage must hold exactly the
Trainer's ``log_history`` (every ``on_log``) at its steps. Not restated: the stateful-callback
tests (``ExportableState``, which ``MonitorCallback`` does not implement: a run's state lives in
the trackers) and the duplicate-callback warning (the Trainer's own logic).
"""

from __future__ import annotations

import pytest
import readback
from test_transformers import make_trainer, numeric_history
from transformers import DefaultFlowCallback, PrinterCallback, ProgressCallback
from transformers.trainer import DEFAULT_CALLBACKS

from core_monitor.integrations.transformers import MonitorCallback


def callback_classes(trainer) -> list[str]:
    return sorted(type(cb).__name__ for cb in trainer.callback_handler.callbacks)


def names(classes) -> list[str]:
    return sorted(c.__name__ for c in classes)


def test_init_callback(tmp_path):
    """``test_init_callback``: a callback class passed at init is added to the defaults."""
    trainer = make_trainer(tmp_path, [], disable_tqdm=False)
    expected = [*DEFAULT_CALLBACKS, ProgressCallback]
    assert callback_classes(trainer) == names(expected)

    trainer = make_trainer(tmp_path, [MonitorCallback], disable_tqdm=False)
    expected.append(MonitorCallback)
    assert callback_classes(trainer) == names(expected)

    trainer = make_trainer(tmp_path, [MonitorCallback], disable_tqdm=True)
    assert callback_classes(trainer) == names([*DEFAULT_CALLBACKS, PrinterCallback,
                                               MonitorCallback])


def test_add_remove_callback(tmp_path, log_dir):
    """``test_add_remove_callback``: add, pop and remove by class and by instance."""
    expected = [*DEFAULT_CALLBACKS, PrinterCallback]
    trainer = make_trainer(tmp_path, [])
    trainer.add_callback(MonitorCallback)
    assert callback_classes(trainer) == names([*expected, MonitorCallback])
    popped = trainer.pop_callback(MonitorCallback)
    assert isinstance(popped, MonitorCallback)
    assert callback_classes(trainer) == names(expected)

    instance = MonitorCallback(["tensorboard"], project="hf", name="added", log_dir=log_dir)
    trainer.add_callback(instance)
    assert trainer.pop_callback(instance) is instance
    trainer.add_callback(instance)
    trainer.remove_callback(MonitorCallback)
    assert callback_classes(trainer) == names(expected)
    trainer.remove_callback(DefaultFlowCallback)
    assert callback_classes(trainer) == names([PrinterCallback])


@pytest.mark.parametrize("arguments", [
    {},
    {"logging_steps": 5},
    {"eval_steps": 5, "eval_strategy": "steps"},
    {"eval_strategy": "epoch"},
    {"logging_steps": 3, "eval_steps": 5, "eval_strategy": "steps"},  # a bit of everything
], ids=["default", "log-5", "eval-steps-5", "eval-epoch", "mixed"])
def test_event_flow(tmp_path, log_dir, arguments):
    """``test_event_flow``: for each logging/evaluation schedule, every ``on_log`` the Trainer
    made is in the backend, at its step (the Trainer's ``log_history`` is the oracle)."""
    callback = MonitorCallback(["tensorboard"], project="hf", name="flow", log_dir=log_dir)
    trainer = make_trainer(tmp_path, [callback], max_steps=16, **arguments)
    trainer.train()
    callback.close()
    history = numeric_history(trainer.state.log_history)
    assert history
    if arguments.get("eval_strategy"):
        assert any(tag == "eval/loss" for tag, _, _ in history)
    readback.assert_rows("tensorboard", callback.monitor.run, history)
