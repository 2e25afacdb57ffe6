"""Keep every test away from the user's home and the network.

The SDKs read their folders from the environment, some of them once at import (Trackio reads
``TRACKIO_DIR`` when first imported), so the session-wide values are set here, at import, before
any test module imports an SDK; each test then gets its own folders under ``tmp_path``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]  # tests/core/test_contract_kit.py runs the kit on broken backends

_SESSION_HOME = Path(tempfile.mkdtemp(prefix="monitors-tests-"))

OFFLINE_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_CONSOLE": "off",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
FOLDER_ENV = (
    "WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR",
    "TRACKIO_DIR", "HF_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR",
)


def _folders(root: Path) -> dict[str, str]:
    paths = {name: root / name.lower() for name in FOLDER_ENV}
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    return {name: str(path) for name, path in paths.items()}


os.environ.update(OFFLINE_ENV)
os.environ.update(_folders(_SESSION_HOME))
for _var in ("WANDB_API_KEY", "HF_TOKEN", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
             "EXPERIMENT_MONITORS_DISABLE", "MLFLOW_TRACKING_URI"):
    os.environ.pop(_var, None)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every SDK folder under this test's ``tmp_path/env``; offline; no rank variables."""
    env = {**OFFLINE_ENV, **_folders(tmp_path / "env")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
