"""Starting a local Trackio run without Trackio's process-wide current run."""

from __future__ import annotations

from typing import Any

from core_monitor.resume import NoRunToResume

from . import _compat


def start_local(project: str, name: str, config: dict[str, Any], *, group: str | None,
                 resume: str, auto_log_gpu: bool | None, auto_log_cpu: bool | None) -> Any:
    """Start a local run the way ``trackio.init`` does, without touching Trackio's globals."""
    run_id = None
    if resume != "never":
        record = _compat.sqlite_storage().get_latest_run_record_by_name(project, name)
        if record is None and resume == "must":
            raise NoRunToResume(
                f"trackio: resume='must' but project {project!r} has no run named {name!r} in "
                f"{_compat.trackio_home()}; use resume='allow' to start it when missing"
            )
        run_id = None if record is None else record["id"]
    if auto_log_gpu is None or auto_log_cpu is None:
        gpu, cpu = _compat.system_metrics_available()
        auto_log_gpu = gpu if auto_log_gpu is None else auto_log_gpu
        auto_log_cpu = cpu if auto_log_cpu is None else auto_log_cpu
    return _compat.new_local_run(
        project=project, name=name, run_id=run_id, group=group, config=config,
        auto_log_gpu=auto_log_gpu, auto_log_cpu=auto_log_cpu,
    )
