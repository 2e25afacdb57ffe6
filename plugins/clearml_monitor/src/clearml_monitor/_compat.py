"""Every access to ClearML internals, and the check that they still have the expected shape.

Three private dependencies, and one call ClearML documents for tests (``forget_remote_task``).

``clearml.utilities.check_updates.CheckPackageUpdates._package_version_checked``: every
``Task.init`` (2.1, offline too) starts a thread that asks ``https://updates.clear.ml/updates``
whether a newer ClearML exists, sending the installed versions; no variable or config key turns
the request off (``CLEARML_SUPPRESS_UPDATE_MESSAGE`` hides only its message). ClearML asks once
per process, remembered in that class attribute: ``no_update_check`` sets it, so nothing is
sent.

``clearml.Task._report_subprocess_enabled``. ClearML (2.1) reports
events from a *subprocess* it forks from the training process on Linux (its config key
``sdk.development.report_use_subprocess``, which only a ``clearml.conf`` sets; no variable or
``Task.init`` argument does). That subprocess makes ``Task.close()`` wait about 10 s for its
liveness check, and forks the trainer; this plugin sets the class attribute the config key is
read into to ``False`` before ``Task.init``, so events are written by a thread of the writer
instead (``Task.close()`` in 0.1 s).

``clearml.binding.environ_bind.PatchOsFork.patch_fork``: ``Task.init`` (2.1) registers fork
hooks (``os.register_at_fork`` and a patched ``multiprocessing`` ``Process.run``) that make every
process forked from the training process (a DataLoader worker, a ``multiprocessing.Pool``
worker) join the task: the child starts two ClearML threads, replaces ``os._exit`` and runs the
task's exit code before it exits, and takes a lock shared by every process of the tree
(``clearml.utilities.process.mp``). A child that ``Pool.terminate()`` kills while one of its
threads holds that lock leaves it held for good, and every later ClearML call in the training
process that needs it waits its 90 s timeout, ``Task.close()`` among them (seen: a fork pool
beside ``dispatch="sync"``, then ``close()`` hung more than 3 minutes in CI; here 1 pool in 37
beside two busy cores left it held). The hooks are for a child that reports into the task,
which this plugin's children never do; ``no_fork_hooks`` calls ``patch_fork(None)``, the call
``Task.close()`` itself makes to turn them off, right after ``Task.init``.

Public calls whose keyword arguments ``problems()`` checks too: ``Task.init`` and the
``Logger`` reports (``report_media``, ``report_histogram``). The reader depends on no ClearML
name but on the offline session's files (``storage``): ``metrics.jsonl``'s events and the
``data`` folder of the uploaded debug samples, as ClearML 2.1 writes them and its own
``Task.import_offline_session`` reads them.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

#: The ClearML versions this plugin is tested with (``nox -s lowest`` runs the lowest, ``nox -s
#: newest`` the newest on the index). The install requirement names only the lowest; outside
#: this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "clearml>=2.1.12,<2.2"

#: The keyword arguments of ``Task.init`` this plugin passes (nothing patched or sampled).
INIT_ARGUMENTS = ("project_name", "task_name", "tags", "reuse_last_task_id",
                  "auto_connect_frameworks", "auto_connect_arg_parser",
                  "auto_resource_monitoring", "auto_connect_streams")
#: ``Task.init(auto_connect_frameworks=...)``: no framework patched and no repository detected.
#: ``False`` alone leaves ClearML's repository detection on: a thread that parses every Python
#: file under the script's folder for its requirements (minutes under a folder holding venvs;
#: ``Task.close`` waits for it) and records the git state. Only the mapping form turns it off
#: (``"detect_repository": False``), and ClearML connects any framework missing from the
#: mapping, so it names every key ClearML 2.1 documents.
NOTHING_CONNECTED = dict.fromkeys(
    ("matplotlib", "tensorflow", "tensorboard", "pytorch", "xgboost", "scikit", "fastai",
     "lightgbm", "hydra", "detect_repository", "tfdefines", "joblib", "megengine", "catboost",
     "gradio"), False)
#: The keyword arguments of ``Logger.report_media`` (images and text) and
#: ``Logger.report_histogram`` this plugin passes.
MEDIA_ARGUMENTS = ("title", "series", "iteration", "stream", "file_extension", "max_history")
HISTOGRAM_ARGUMENTS = ("title", "series", "values", "iteration", "xlabels", "xaxis", "yaxis",
                       "data_args")
#: The private attribute ``no_update_check`` sets (module, class, attribute).
UPDATE_CHECK = ("clearml.utilities.check_updates", "CheckPackageUpdates",
                "_package_version_checked")
#: The class method ``no_fork_hooks`` calls (module, class, method).
FORK_HOOKS = ("clearml.binding.environ_bind", "PatchOsFork", "patch_fork")
#: The private attribute ``use_report_thread`` sets.
REPORT_SUBPROCESS = "_report_subprocess_enabled"

def problems() -> list[str]:
    """Import ClearML; what it lacks of what this plugin uses (``[]``: nothing)."""
    import clearml

    found = [f"clearml.{name} is missing" for name in ("Task", "Logger")
             if not hasattr(clearml, name)]
    if found:
        return found
    parameters = inspect.signature(clearml.Task.init).parameters
    found += [f"clearml.Task.init() takes no {name!r} argument" for name in INIT_ARGUMENTS
              if name not in parameters]
    found += [f"clearml.{owner}.{name} is missing" for owner, name in (
        ("Task", "set_offline"), ("Task", "get_offline_mode_folder"), ("Task", "set_parameter"),
        ("Task", "mark_failed"), ("Logger", "set_reporting_nan_value"),
        ("Logger", "set_reporting_inf_value"), ("Logger", "report_scalar"),
        ("Logger", "report_media"), ("Logger", "report_histogram"))
        if not hasattr(getattr(clearml, owner), name)]
    if found:
        return found
    for method, names in (("report_media", MEDIA_ARGUMENTS),
                          ("report_histogram", HISTOGRAM_ARGUMENTS)):
        parameters = inspect.signature(getattr(clearml.Logger, method)).parameters
        found += [f"clearml.Logger.{method}() takes no {name!r} argument (tested: {TESTED})"
                  for name in names if name not in parameters]
    if not isinstance(_member(UPDATE_CHECK), bool):
        found.append(f"{'.'.join(UPDATE_CHECK)} is missing (ClearML's update check, which this "
                     f"plugin turns off; tested: {TESTED})")
    if not callable(_member(FORK_HOOKS)):
        found.append(f"{'.'.join(FORK_HOOKS)} is missing (ClearML's fork hooks, which this "
                     f"plugin turns off; tested: {TESTED})")
    if not hasattr(clearml.Task, REPORT_SUBPROCESS):
        found.append(f"clearml.Task.{REPORT_SUBPROCESS} is missing (the report subprocess "
                     f"switch this plugin turns off; tested: {TESTED})")
    return found


def _member(path: tuple[str, ...]) -> Any:
    """The object at ``path`` (a module, then attribute names: ``UPDATE_CHECK``, ``FORK_HOOKS``),
    or ``None`` when the module or any attribute is missing."""
    module, *names = path
    try:
        found: Any = importlib.import_module(module)
    except ImportError:
        return None
    for name in names:
        found = getattr(found, name, None)
    return found


def use_report_thread() -> None:
    """Make tasks created from now on report through a thread, not a forked subprocess."""
    from clearml import Task

    setattr(Task, REPORT_SUBPROCESS, False)


def no_fork_hooks() -> None:
    """Make processes forked from this one from now on run none of ClearML's code (its fork
    hooks off, as ``Task.close()`` turns them off); call it after ``Task.init``."""
    _member(FORK_HOOKS)(None)


def no_update_check() -> None:
    """Make ``Task.init`` skip its request to ClearML's update server in this process."""
    module, owner, attribute = UPDATE_CHECK
    setattr(_member((module, owner)), attribute, True)


def forget_remote_task() -> None:
    """Make an already imported ClearML forget the ``clearml-agent`` task it read at import.

    ClearML reads ``CLEARML_TASK_ID`` once, when ``clearml.config`` is imported, and from then on
    takes the process for that (remote) task. A writer process drops the variable before it
    imports ClearML; should something have imported ClearML there first, this resets the value
    read through ClearML's ``clearml.config.remote.override_current_task_id(None)`` (ClearML's
    documented switch back to local execution, meant for tests). Nothing when ClearML is not
    imported yet or runs no remote task.

    Raises:
        RuntimeError: ClearML is imported, runs a remote task, and has no
            ``override_current_task_id`` (tested: ``TESTED``).
    """
    config = sys.modules.get("clearml.config")
    if config is None or not config.running_remotely():
        return
    remote = importlib.import_module("clearml.config.remote")
    override = getattr(remote, "override_current_task_id", None)
    if override is None:
        raise RuntimeError("clearml.config.remote.override_current_task_id is missing: this "
                           "writer process cannot leave the clearml-agent task it inherited "
                           f"(tested: {TESTED})")
    override(None)
