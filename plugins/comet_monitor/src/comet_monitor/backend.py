"""``CometMonitor``: a run as a Comet experiment, offline (an archive under ``log_dir``) unless
the user asks for online. comet_ml is imported when the first ``CometMonitor`` is constructed
(or by ``check_sdk``), never at import of this module."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step
from core_monitor.media import MediaItem
from core_monitor.options import NonBlank
from core_monitor.output import hidden
from core_monitor.resume import NoRunToResume

from . import _compat, media, reader
from .media import MEDIA_KINDS
from .storage import CRASH_OTHER, CRASH_TAG, GROUP_OTHER, STAGING, run_dir

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend

#: What ``quiet`` hides (``core_monitor.output.hidden``): comet_ml logs through its
#: ``comet_ml`` logger (``COMET INFO:`` lines): at ``end()`` an offline run prints that it is
#: archiving and the ``comet upload <zip>`` command, an online run its URL. Its summary is off
#: (``display_summary_level=0``); warnings and errors still show.
QUIET_LOGGERS = ("comet_ml",)
#: What Comet accepts as an experiment key (``comet_ml.is_valid_experiment_key``).
EXPERIMENT_KEY = re.compile(r"[a-zA-Z0-9]{32,50}")
#: Every automatic logging and environment probe of a Comet experiment off, its summary
#: silent: the experiment holds what the caller logs and nothing else, and nothing is read
#: from the machine (with ``log_env_details`` on, Comet asks the cloud metadata address
#: 169.254.169.254 which cloud it runs on, even offline).
QUIET_EXPERIMENT = {
    "log_code": False, "log_graph": False, "auto_param_logging": False,
    "auto_metric_logging": False, "parse_args": False, "auto_output_logging": False,
    "log_env_details": False, "log_git_metadata": False, "log_git_patch": False,
    "log_env_gpu": False, "log_env_host": False, "log_env_cpu": False, "log_env_disk": False,
    "display_summary_level": 0,
}


class CometMonitor:
    """Log a run to Comet with its SDK (``comet_ml``): offline by default, into an archive that
    Comet's own ``comet upload`` sends later; online when asked (``online=True``).

    Constructed by the core as ``CometMonitor(run, **options)``; users select it as
    ``Monitor(["comet"], ..., comet={"workspace": "my-team"})``.

    Storage (offline): ``<log_dir>/comet/<project>/<run name>/<experiment key>.zip``
    (``storage.run_dir``). Comet keeps an open experiment's messages in a temporary folder
    (``$TMPDIR/tmp*``) and writes the archive at ``Experiment.end()``; ``monitor_flush``
    writes it as it stands (``_compat.checkpoint``), and ``monitor_close`` lets Comet write
    the final one in ``<run folder>/.ending`` and moves it over, so a reader sees a whole
    archive at any time. In it: each scalar a Comet metric at the caller's step exactly (values
    as JSON numbers, NaN and +-inf as Comet's strings), the config as Comet parameters (late
    config, ``monitor_config``, logged again: the last value wins), the run name as the
    experiment name (``set_name``: ``<name>-rank<r>`` above rank 0; with ``rank_zero_only=False``
    every rank's experiment has the ``log_other`` ``job.group`` = ``RunInfo.group``, the column
    Comet's project view groups the job's experiments by), ``tags`` as Comet tags,
    images (PNG, caption in the upload's metadata) and text (Comet text samples, the tag in
    their metadata) at their steps. ``reader`` reads it back.

    Resume (``run.resume``, offline): ``"allow"``/``"must"`` continue the latest experiment in
    the run's folder with Comet's ``ExistingOfflineExperiment`` (a second archive,
    ``<key>-<random>.zip``, that ``comet upload`` adds to the same experiment); ``last_step``
    is the largest step its archives hold. Online, only an ``experiment_key`` names what to
    continue (``ExistingExperiment``); ``last_step`` is then ``None``.

    After a crash (``monitor_crash``) the experiment gets the ``log_other``
    ``crash_reason = <reason>`` and the tag ``crashed``, and is archived.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        online: ``False`` (default): an ``OfflineExperiment`` archive, nothing sent. ``True``:
            a live ``Experiment`` on Comet's server, with the API key from Comet's own
            configuration (``COMET_API_KEY`` or ``~/.comet.config``).
        project: Comet's project name; default ``run.project``.
        comet_project: ``True``: without ``project``, the project Comet's own configuration
            names (``COMET_PROJECT_NAME``, ``project_name`` in ``.comet.config``), else Comet's
            default, as ``comet_ml.start(project=None)`` chooses it; the DeepSpeed integration
            sets it for a ``comet`` section without ``project``, as DeepSpeed's own writer
            leaves the project to Comet. ``False`` (default): ``run.project``.
        workspace: Comet's workspace; default Comet's own (the API key's default workspace).
        experiment_key: the experiment's key (32 to 50 letters and digits) instead of a
            random one, on rank 0 (other ranks' runs are experiments of their own). With
            ``resume`` it names the experiment to continue.
        tags: Comet tags of the experiment.
        api_key: online only: the Comet API key; ``None`` (default): Comet's own configuration
            (``COMET_API_KEY``, ``~/.comet.config``). Offline runs need none (``comet upload``
            reads Comet's configuration).
        quiet: ``True`` (default) hides comet_ml's ``COMET INFO`` lines while the plugin starts
            and ends the experiment (``QUIET_LOGGERS``); ``False`` shows them.

    Raises:
        NoRunToResume: ``resume="must"`` with nothing to continue (nothing created).
        ConfigError: an archive of ``experiment_key`` is already in the run's folder and
            ``resume="never"``; option values are checked before, at ``Monitor()``
            (``check_options``).
        ImportError, core_monitor.BackendLoadError: comet_ml is missing or of an unsupported
            shape.
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="comet",
        rows_readable_after="flush",  # monitor_flush writes the archive as it stands
        value_dtype="float64",  # metric values are JSON numbers in the archive: exact
        stores_config=True,  # Comet parameters (``reader.read_config``)
        media_kinds=MEDIA_KINDS,  # images and text (``media``); no histograms
        supports_resume=True,  # ExistingOfflineExperiment ("Resume" above)
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """What the annotations cannot say, for the options given; run by the core at
        ``Monitor()`` before comet_ml is imported.

        Raises:
            ConfigError: ``experiment_key`` is not 32 to 50 letters and digits (blank
                ``project``, ``workspace`` and tags: refused by the core, from ``NonBlank``).
        """
        key = options.get("experiment_key")
        if key is not None and not EXPERIMENT_KEY.fullmatch(key):
            raise ConfigError(f"comet: option experiment_key={key!r} is not a Comet experiment "
                              "key: use 32 to 50 letters and digits, e.g. uuid.uuid4().hex")

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(self, run: RunInfo, *, online: bool = False, project: NonBlank | None = None,
                 comet_project: bool = False, workspace: NonBlank | None = None,
                 experiment_key: str | None = None,
                 tags: Sequence[NonBlank] = (), api_key: str | None = None,
                 quiet: bool = True) -> None:
        self.run = run
        self.online = online
        self.quiet = quiet
        self.folder = run_dir(run)
        key = experiment_key if run.rank == 0 else None
        continued, self.last_step = self._earlier(key)
        #: Whether an earlier experiment was continued.
        self.resumed = continued is not None
        comet_ml = _compat.import_comet()
        settings: dict[str, Any] = {
            **QUIET_EXPERIMENT, "workspace": workspace,
            # None: Comet's own configuration decides (COMET_PROJECT_NAME, .comet.config)
            "project_name": project or (None if comet_project else run.project),
        }
        with hidden(quiet, loggers=QUIET_LOGGERS), _compat.beside_current_experiment(comet_ml):
            if online:
                kind = comet_ml.ExistingExperiment if continued else comet_ml.Experiment
                if api_key is not None:
                    settings["api_key"] = api_key
            else:
                (self.folder / STAGING).mkdir(parents=True, exist_ok=True)
                settings["offline_directory"] = str(self.folder / STAGING)
                kind = (comet_ml.ExistingOfflineExperiment if continued
                        else comet_ml.OfflineExperiment)
            if continued:
                settings["previous_experiment"] = continued
            elif key is not None:
                settings["experiment_key"] = key
            self._experiment = kind(**settings)
            self._experiment.set_name(run.ranked_name)
            if run.group is not None:  # every rank's experiment: the job's, as an "Other"
                self._experiment.log_other(GROUP_OTHER, run.group)
            if tags:
                self._experiment.add_tags(list(tags))
            if run.config:
                self._experiment.log_parameters(dict(run.config))
        #: The Comet experiment key.
        self.experiment_key: str = self._experiment.get_key()

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """One ``log_metrics`` call per step of the batch, at that step exactly."""
        for step, _, row in rows_by_step(events):
            self._experiment.log_metrics(row, step=step)

    @hookimpl
    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """Each image and text at its step, as ``media`` says."""
        for item in items:
            media.write(self._experiment, item)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Log the keys again as Comet parameters: Comet (and ``read_config``) keep the last
        value of a parameter."""
        self._experiment.log_parameters(dict(config))

    @hookimpl
    def monitor_flush(self) -> None:
        """Offline: write the run's archive as it stands (``_compat.checkpoint``: the whole
        archive again, atomically), so every row so far is readable and survives the writer
        process being killed. Online: ``Experiment.flush()``, which waits until Comet's server
        has everything logged so far."""
        if self.online:
            self._experiment.flush()
        else:
            _compat.checkpoint(self._experiment, self.folder / _compat.archive_name(
                self._experiment))

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Mark the experiment: ``log_other("crash_reason", reason)`` and the tag ``crashed``
        (Comet's crashed status comes from its server's heartbeat, which an offline run has
        not got); ``monitor_close`` then archives it."""
        self._experiment.log_other(CRASH_OTHER, reason)
        self._experiment.add_tag(CRASH_TAG)

    @hookimpl
    def monitor_close(self) -> None:
        """End the experiment (offline: write its archive)."""
        with hidden(self.quiet, loggers=QUIET_LOGGERS):
            self._experiment.end()
        if not self.online:  # Comet wrote the archive in place: move it over the checkpoint
            name = _compat.archive_name(self._experiment)
            written = Path(self._experiment.offline_directory) / name
            os.replace(written, self.folder / name)
            with contextlib.suppress(OSError):  # another process of this run is ending too
                (self.folder / STAGING).rmdir()

    def _earlier(self, key: str | None) -> tuple[str | None, int | None]:
        """``(key of the experiment to continue, its largest step)``; ``(None, None)``: start a
        new one. Raises ``NoRunToResume``/``ConfigError`` as the class says."""
        resume = self.run.resume
        if self.online:
            if resume == "must" and key is None:
                raise NoRunToResume("comet: resume='must' online needs the experiment_key of "
                                    "the experiment to continue")
            return (key if resume != "never" else None), None
        archives = reader.read_archives(self.run)
        if key is not None:
            archives = [a for a in reader.read_archives_in(self.folder) if a.key == key]
            if archives and resume == "never":
                raise ConfigError(f"comet: an archive of experiment {key} is already in "
                                  f"{str(self.folder)!r}; pass resume='allow' to continue it, "
                                  "or another experiment_key")
        if resume == "never" or not archives:
            if resume == "must":
                raise NoRunToResume(f"comet: no offline experiment in {str(self.folder)!r}")
            return None, None
        steps = [step for _, step, _ in reader.rows_of(archives)]
        return archives[0].key, max(steps, default=None)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = CometMonitor
