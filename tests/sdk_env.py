"""The offline SDK environment every test, benchmark and nox session runs in: one definition.

The SDKs read their folders and modes from environment variables; pointing every folder under a
temporary root and every SDK offline keeps runs away from the user's home and off the network.
Used by the repository's ``conftest.py``, ``tests/integration/conftest.py``,
``benchmarks/harness.py`` and ``noxfile.py`` (which loads this file by path, before any package
is installed: standard library only).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: Keeps every SDK offline and quiet (wandb offline, no Hugging Face Hub, no telemetry).
OFFLINE_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_CONSOLE": "off",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_ERROR_REPORTING": "false",  # wandb-core's crash reports (on by default, even offline)
    # How long wandb waits for its service (wandb-core) to start, and for init to answer:
    # 30 s and 90 s by default, which a loaded machine (a CPU hog on every core) misses. The
    # tests assert what is stored, not how fast an SDK starts (speed: benchmarks/).
    "WANDB__SERVICE_WAIT": "300",
    "WANDB_INIT_TIMEOUT": "600",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # read_media downloads: no tqdm lines
    "COMET_DISABLE_AUTO_LOGGING": "1",  # comet_ml's import hooks (torch, TensorBoard, ...)
    "COMET_ERROR_TRACKING_ENABLE": "false",  # comet_ml's Sentry reports
    "DVC_NO_ANALYTICS": "true",  # DVC's usage reports (its CLI's; dvclive runs none of it)
    "DVC_STUDIO_OFFLINE": "true",  # dvc-studio-client: never post live metrics to DVC Studio
    "SWANLAB_MODE": "offline",  # SwanLab's default is its cloud (online)
    "SWANLAB_PROBE_MONITOR": "false",  # SwanLab's hardware monitor thread (every 10 s)
    "SWANLAB_PROBE_REQUIREMENTS": "false",  # SwanLab runs `uv pip list`/`pip list` at init
    "CLEARML_OFFLINE_MODE": "1",  # ClearML: an offline session whatever Task.set_offline says
}
#: Folders the SDKs (and the caches they use) read from the environment.
FOLDER_ENV = (
    "WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR",
    "TRACKIO_DIR", "HF_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR",
    "XDG_STATE_HOME",  # the run journal of a Monitor without log_dir (core_monitor.journal)
    "COMET_OFFLINE_DIRECTORY", "COMET_CONFIG",  # COMET_CONFIG: a folder with .comet.config
    "SWANLAB_ROOT", "SWANLAB_LOG_DIR",
    # ClearML writes ~/.clearml (its session cache) whatever its variables say; its config
    # file: none there (CLEARML_CONFIG_FILE is a file, dropped below)
    "HOME",
)
#: Variables that would change what a ``Monitor`` does (credentials, rank, disabled backends).
DROP_ENV = ("WANDB_API_KEY", "HF_TOKEN", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
            "EXPERIMENT_MONITORS_DISPATCH", "EXPERIMENT_MONITORS_JOURNAL_DIR",
            "EXPERIMENT_MONITORS", "EXPERIMENT_MONITORS_DISABLE", "MLFLOW_TRACKING_URI",
            # Aim: a tracking thread (asynchronous writes), another metadata database, another
            # name for the repository's .aim folder
            "AIM_ENABLE_TRACKING_THREAD", "AIM_RUN_META_DATA_DB_URL", "AIM_REPO_NAME",
            "DVC_STUDIO_TOKEN", "STUDIO_TOKEN", "DVCLIVE_TEST", "DVCLIVE_RESUME", "DVC_ROOT",
            "DVC_EXP_BASELINE_REV", "DVC_EXP_NAME", "SWANLAB_API_KEY", "SWANLAB_WEBHOOK",
            "SWANLAB_SAVE_DIR", "SWANLAB_GROUP", "SWANLAB_EXPERIMENT_GROUP",  # a group of its own
            "COMET_API_KEY", "COMET_WORKSPACE", "COMET_PROJECT_NAME", "COMET_EXPERIMENT_KEY",
            "COMET_START_MODE", "COMET_START_ONLINE", "COMET_START_EXPERIMENT_KEY",
            "COMET_START_EXPERIMENT_NAME",
            # ClearML: another cache folder (the sessions' place), config file or server
            "CLEARML_CACHE_DIR", "CLEARML_CONFIG_FILE", "CLEARML_API_HOST")


def sdk_folders(root: Path) -> dict[str, str]:
    """Each ``FOLDER_ENV`` variable -> ``root/<variable in lower case>``, created."""
    folders = {name: root / name.lower() for name in FOLDER_ENV}
    for path in folders.values():
        path.mkdir(parents=True, exist_ok=True)
    return {name: str(path) for name, path in folders.items()}


def offline_env(root: Path) -> dict[str, str]:
    """The variables to set: ``OFFLINE_ENV`` and every SDK folder under ``root`` (created)."""
    return {**OFFLINE_ENV, **sdk_folders(root)}


def sandbox_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A whole process environment: ``base`` (default ``os.environ``) without ``DROP_ENV``,
    plus ``offline_env(root)``."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in DROP_ENV}
    env.update(offline_env(root))
    return env
