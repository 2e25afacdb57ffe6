"""A user's plain script prints nothing of the SDKs by default; ``quiet=False`` shows it.

Run in a fresh interpreter of the test environment (every plugin installed), with the
offline environment minus the variables that silence wandb by themselves (``WANDB_SILENT``,
``WANDB_CONSOLE``), as a new user's shell has them; and with the whole offline environment of
the nox sessions (tests/sdk_env.py), which must not make an SDK warn either (``WANDB_ANONYMOUS``
did: "The anonymous setting has no effect", in the demo and the release smoke test).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    from core_monitor import Monitor, Text

    quiet = sys.argv[1] == "quiet"
    backends = ["trackio", "tensorboard", "wandb", "mlflow", "comet"]
    options = {} if quiet else {name: {"quiet": False} for name in backends}
    with Monitor(backends, project="p", name="r", log_dir="logs", config={"lr": 0.1},
                 **options) as monitor:
        for step in range(3):
            monitor.log({"loss": 1.0 / (step + 1), "note": Text("ok")}, step=step)
""")


def run(mode: str, cwd: Path, silenced: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if (silenced or k not in ("WANDB_SILENT", "WANDB_CONSOLE"))
           and not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_a_plain_script_logging_to_every_backend_prints_nothing(tmp_path):
    done = run("quiet", tmp_path)
    assert done.stdout == ""
    assert done.stderr == ""  # was: wandb's banner and summary, MLflow's table creation


def test_the_sessions_offline_environment_makes_no_sdk_warn(tmp_path):
    """What the demo and the release smoke test run in (tests/sdk_env.py's OFFLINE_ENV)."""
    done = run("quiet", tmp_path, silenced=True)
    assert "WANDB_SILENT" in os.environ  # the suite's conftest set the offline environment
    assert (done.stdout, done.stderr) == ("", "")


def test_quiet_false_shows_what_each_sdk_prints_itself(tmp_path):
    done = run("verbose", tmp_path)
    output = done.stdout + done.stderr
    assert "wandb: Run summary:" in output and "wandb sync" in output  # wandb's own footer
    assert "Creating initial MLflow database tables" in output
    assert "trackio show" in output  # the plugin's two Trackio lines
    assert "COMET INFO:" in output and "comet upload" in output  # comet_ml's archive hint
