"""DeepSpeed's own monitor sections, and how each one's keys reach a backend of this project.

DeepSpeed reads four sections (``deepspeed.monitor.config.get_monitor_config``):
``tensorboard``, ``wandb``, ``csv_monitor`` and ``comet``, each a pydantic model with its own
defaults (``TensorBoardConfig``, ``WandbConfig``, ``CSVConfig``, ``CometConfig``). A section is
taken over by the backend ``SECTIONS`` names for it, when that backend is installed.

The ``tensorboard`` and ``wandb`` backends read their section themselves (their class's
``from_deepspeed``); the two sections whose backend has another name or no such reader are read
here, in one table each: ``csv_monitor`` (``read_csv_monitor``) and ``comet`` (``COMET_OPTIONS``,
``read_comet``). Imports no framework and no SDK.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError

#: DeepSpeed's monitor sections -> the backend of this project that takes each one over.
SECTIONS = {"tensorboard": "tensorboard", "wandb": "wandb", "csv_monitor": "csv",
            "comet": "comet"}
#: DeepSpeed's default ``job_name`` (``TensorBoardConfig``, ``CSVConfig``); its default
#: ``output_path`` is ``""``: the files go to ``./DeepSpeedJobName``.
DEFAULT_JOB_NAME = "DeepSpeedJobName"
#: DeepSpeed's ``CometConfig`` keys -> the ``comet`` backend's options (comet-monitor names
#: them as Comet's own ``comet_ml.start`` does). A key set to ``None`` (DeepSpeed's default) is
#: left out: the backend's default, which is Comet's own configuration.
COMET_OPTIONS = {"project": "project", "workspace": "workspace",
                 "experiment_key": "experiment_key", "online": "online", "api_key": "api_key"}
#: ``CometConfig.mode`` (``comet_ml.start``'s ``mode``) -> the run's ``resume``: ``"get"``
#: continues the experiment (it must exist), ``"get_or_create"`` continues it if there is one,
#: ``"create"`` always starts a new one.
COMET_MODES = {"get": "must", "get_or_create": "allow", "create": "never"}
#: ``CometConfig.samples_log_interval``'s default.
COMET_SAMPLES_LOG_INTERVAL = 100

#: ``(Monitor keyword arguments, backend options)`` read from one section.
Read = tuple[dict[str, Any], dict[str, Any]]


def read_csv_monitor(section: Mapping[str, Any]) -> Read:
    """DeepSpeed's ``csv_monitor`` section (``CSVConfig``, ``enabled`` removed) for the ``csv``
    backend: DeepSpeed's one-file-per-tag layout (``layout="deepspeed"``) in the folder
    DeepSpeed's ``csvMonitor`` writes, ``<output_path>/<job_name>`` (defaults ``""`` and
    ``"DeepSpeedJobName"``), as the ``run_dir`` option. A ``job_name`` given is also the run's
    name for every backend. Other keys are passed on as the backend's options."""
    options = dict(section)
    output_path = options.pop("output_path", "") or ""
    job_name = options.pop("job_name", None)
    options = {"layout": "deepspeed",
               "run_dir": os.path.join(output_path, job_name or DEFAULT_JOB_NAME), **options}
    return ({"name": job_name} if job_name else {}), options


def read_comet(section: Mapping[str, Any]) -> Read:
    """DeepSpeed's ``comet`` section (``CometConfig``, ``enabled`` removed) for the ``comet``
    backend.

    ``project``, ``workspace``, ``experiment_key``, ``api_key`` and ``online`` become the
    backend's options of those names (``COMET_OPTIONS``); ``online`` not given (``None``) is
    ``True``, DeepSpeed's default (its ``comet_ml.start`` runs online unless told otherwise).
    ``project`` not given: the backend's ``comet_project=True``, so Comet's own configuration
    (``COMET_PROJECT_NAME``, ``.comet.config``) names the project, as with DeepSpeed's writer,
    rather than the run's project.
    ``experiment_name`` is the run's name (the experiment's name in Comet); ``mode`` the run's
    ``resume`` (``COMET_MODES``). ``samples_log_interval`` is checked as DeepSpeed reads it (an
    integer) but not applied: every event reaches Comet, as it reaches every other backend.

    Raises:
        ConfigError: a key ``CometConfig`` does not have, a ``mode`` it does not know, or a
            ``samples_log_interval`` that is not an integer; the message names key and value.
    """
    options: dict[str, Any] = {}
    monitor: dict[str, Any] = {}
    for key, value in section.items():
        if key in COMET_OPTIONS:
            if value is not None:
                options[COMET_OPTIONS[key]] = value
        elif key == "experiment_name":
            if value is not None:
                monitor["name"] = value
        elif key == "mode":
            if value is not None and value not in COMET_MODES:
                raise ConfigError(f"DeepSpeed config: section 'comet' has \"mode\": {value!r}; "
                                  f"use one of {', '.join(map(repr, COMET_MODES))} or leave "
                                  "it out")
            if value is not None:
                monitor["resume"] = COMET_MODES[value]
        elif key == "samples_log_interval":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"DeepSpeed config: section 'comet' has "
                                  f"\"samples_log_interval\": {value!r}; use an integer "
                                  f"(DeepSpeed's default {COMET_SAMPLES_LOG_INTERVAL})")
        else:
            known = sorted([*COMET_OPTIONS, "experiment_name", "mode", "samples_log_interval"])
            raise ConfigError(f"DeepSpeed config: section 'comet' has the key {key!r}, which "
                              f"DeepSpeed's CometConfig does not know (it knows {known}); "
                              "give other comet options in the 'experiment_monitors' section")
    options.setdefault("online", True)
    if "project" not in options:  # DeepSpeed's CometMonitor: comet_ml.start(project=None)
        options["comet_project"] = True
    return monitor, options


#: The readers of DeepSpeed's own sections whose backend does not read them itself.
READERS: dict[str, Callable[[Mapping[str, Any]], Read]] = {
    "csv_monitor": read_csv_monitor, "comet": read_comet}
