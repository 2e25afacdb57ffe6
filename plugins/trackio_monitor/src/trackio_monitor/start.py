"""Starting a local Trackio run without Trackio's process-wide current run, and the config as
Trackio accepts it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core_monitor import ConfigError

from . import _compat
from .reader import CONFIG_PREFIX


def trackio_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config as Trackio accepts it: Trackio refuses keys starting with ``_`` (its own
    ``_Username``, ``_Created``, ``_Group``), so such a key ``_k`` is stored as ``config._k``."""
    return {(CONFIG_PREFIX + key if key.startswith("_") else key): value
            for key, value in config.items()}


def start_local(project: str, name: str, config: dict[str, Any], *, group: str | None,
                 resume: str, auto_log_gpu: bool | None, auto_log_cpu: bool | None) -> Any:
    """Start a local run the way ``trackio.init`` does, without touching Trackio's globals."""
    from trackio.apple_gpu import apple_gpu_available
    from trackio.cpu import cpu_available
    from trackio.gpu import gpu_available
    from trackio.sqlite_storage import SQLiteStorage

    run_id = None
    if resume != "never":
        record = SQLiteStorage.get_latest_run_record_by_name(project, name)
        if record is None and resume == "must":
            raise ConfigError(
                f"trackio: resume='must' but project {project!r} has no run named {name!r} in "
                f"{_compat.trackio_home()}; use resume='allow' to start it when missing"
            )
        run_id = None if record is None else record["id"]
    if auto_log_gpu is None:
        auto_log_gpu = gpu_available() or apple_gpu_available()
    if auto_log_cpu is None:
        auto_log_cpu = cpu_available()
    return _compat.new_local_run(
        project=project, name=name, run_id=run_id, group=group, config=config,
        auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
    )
