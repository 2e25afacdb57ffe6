"""Every first-party backend's option VALUE checks run in the training process at ``Monitor()``
(the class's ``check_options``), so they raise there even with writer processes, whose start
``Monitor()`` no longer waits for (``wait=False``, the default)."""

from __future__ import annotations

import pytest

from core_monitor import ConfigError, Monitor

# Writer processes, as users get them: a ConfigError from a writer's constructor would come at
# the next call, not from Monitor().
pytestmark = pytest.mark.process


@pytest.mark.parametrize(("backend", "options", "words"), [
    ("tensorboard", {"flush_secs": 0}, ["flush_secs=0", "> 0"]),
    ("tensorboard", {"max_queue": 0}, ["max_queue=0", ">= 1"]),
    ("tensorboard", {"filename_suffix": "a/b"}, ["filename_suffix='a/b'", "path separators"]),
    ("tensorboard", {"run_dir": ""}, ["run_dir=''", "non-empty folder path"]),
    ("wandb", {"mode": "dryrun"}, ["mode='dryrun'", "offline"]),
    ("wandb", {"step_metric": "a.b"}, ["step_metric='a.b'", "nesting"]),
    ("wandb", {"tags": ["ok", ""]}, ["tags=", "a list of non-blank str"]),
    ("trackio", {"group": " "}, ["group=' '", "a non-blank str or None"]),
    ("mlflow", {"batch_size": 0}, ["batch_size=0", "from 1 to 1000"]),
    ("mlflow", {"request_timeout": 0}, ["request_timeout=0", "> 0"]),
    ("mlflow", {"tags": {"a//b": 1}}, ["'a//b'", "MLflow refuses"]),
    ("trackio", {"server_url": "ftp://host"}, ["server_url='ftp://host'", "http://"]),
    ("prometheus", {"port": 70000}, ["port=70000", "from 0 to 65535"]),
    ("prometheus", {"prefix": "ml-train"}, ["prefix='ml-train'", "[a-zA-Z_][a-zA-Z0-9_]*"]),
])
def test_a_bad_option_value_raises_in_monitor_with_writer_processes(
    backend, options, words, tmp_path
):
    logs = tmp_path / "logs"
    with pytest.raises(ConfigError) as raised:
        Monitor([backend], project="p", log_dir=logs, dispatch="process",
                **{backend: options})
    for word in words:
        assert word in str(raised.value)
    assert not logs.exists()  # no writer started: nothing was created
