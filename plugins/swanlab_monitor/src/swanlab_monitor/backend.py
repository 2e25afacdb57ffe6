"""``SwanlabMonitor``: the hooks that log a run to SwanLab, each point at the caller's step."""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step
from core_monitor.media import MediaItem

from . import _compat, media
from .steps import StepSet
from .storage import STEP_LIMIT, key_of, swanlab_dir

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend


class SwanlabMonitor:
    """Log a run's scalars and config to one SwanLab run, each point at the caller's step.

    Constructed by the core as ``SwanlabMonitor(run, **options)``; users select it as
    ``Monitor(["swanlab"], ..., swanlab={"mode": "offline", "tags": ["baseline"]})``. One
    ``swanlab.init`` per ``Monitor``, written through its own ``Run`` (``run.log(...,
    step=<the caller's step>)``), never the global ``swanlab.log``: the run never becomes
    ``swanlab.get_run()``, and a run the user started keeps being theirs (``_compat.detached``).
    SwanLab is imported here, never when ``swanlab_monitor`` is imported.

    Storage: the run is ``swanlab.init(project=run.project, name=<run.ranked_name>,
    config=run.config, log_dir=<log_dir>/swanlog, tags=..., group=..., ...)``, a folder
    ``run-<time>-<id>/`` with SwanLab's record file ``run-<id>.swanlab``. Every point is a
    SwanLab scalar at the caller's step, SwanLab's own step field: its charts' x axis. Values
    are float64; NaN and +-inf are kept. SwanLab keeps one value per tag and step, the first,
    and refuses steps of ``2**48`` and above: a later value at a step its tag already holds,
    or a step that large, is not sent (SwanLab would drop it) and is reported once per tag
    (``RuntimeWarning``). A tag SwanLab would change or refuse as a key (``.``, ``/`` or a
    space at an end, a control character, over 255 characters) or that starts with ``%`` is
    stored escaped (``storage.key_of``). ``Monitor.log_config`` merges into SwanLab's config.
    Images and text are SwanLab media at the caller's step (``media``: a lossless PNG with its
    caption; a UTF-8 text), under the same one-value-per-tag-and-step rule; histograms are not
    stored (the core skips them and says so once).

    SwanLab has no flush: the record file is complete once the run finishes, so rows are read
    back after close (``capabilities.rows_readable_after="close"``). ``monitor_crash``
    finishes the run as SwanLab's ``crashed`` state with the reason as its error. Resume is not
    supported: SwanLab continues a run only on its cloud (``resume`` with a run id online);
    ``resume="allow"`` starts a new run (the core warns), ``"must"`` is refused by the core.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        mode: ``"online"`` (SwanLab's cloud, after ``swanlab login``), ``"offline"`` (only the
            local record file; ``swanlab sync <run folder>`` uploads it later), ``"local"``
            (also the files of SwanLab's local dashboard, ``swanlab watch``; needs
            ``swanlab[dashboard]``) or ``"disabled"``; ``None`` (default) follows SwanLab's
            own settings (``SWANLAB_MODE``, else online).
        workspace: the SwanLab workspace (user or organisation) online; ``None``: the user's.
        tags: the run's tags, a sequence of ``str``.
        description: the run's description.
        group: the run's group, e.g. one per sweep. ``None`` (default): SwanLab's own
            (``SWANLAB_GROUP``, its settings files), else the job's (``RunInfo.group``) when
            every rank writes its own run (``rank_zero_only=False``), else none.
        job_type: the run's job type, e.g. ``"train"``.
        quiet: ``True`` (default) keeps SwanLab's banner and its ``swanlab sync`` hint off the
            terminal (its warnings and errors still show); ``False`` prints them.

    SwanLab's console capture (``Settings.terminal.proxy_type``) is off: the run records no
    terminal output. With ``Monitor(system_metrics=...)`` its hardware monitor is off
    (``Settings.probe.monitor``): the core's samples of the job are the run's ``system/``
    charts. Its other settings (the hardware monitor otherwise, environment probes, cloud
    host) follow SwanLab's own configuration (``SWANLAB_*`` variables, ``~/.swanlab``).

    Raises:
        RuntimeError: SwanLab refused to start the run, e.g. online without an API key
            (SwanLab's message; it never prompts: ``interactive=False``).
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="swanlab",
        rows_readable_after="close",  # SwanLab has no flush; the record file is whole at finish
        # ... and its thread writes records up to 0.5 s after log(): a flush confirms nothing
        durable_after="close",
        value_dtype="float64",  # ScalarRecord holds a double
        stores_config=True,  # the run's config (files/config.yaml), merged on monitor_config
        media_kinds=media.KINDS,  # swanlab.Image (PNG) and swanlab.Text
        supports_resume=False,  # SwanLab resumes only on its cloud
        tested_sdk=_compat.TESTED,
        repeated_steps="first",  # one value per tag and step: a later one is reported, not sent
        max_step=STEP_LIMIT - 1,  # SwanLab refuses a larger step: reported, not sent
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse ``mode="local"`` (given, or ``SWANLAB_MODE=local`` with no ``mode``) when
        SwanLab's dashboard package is missing: SwanLab would start the run and fail only when
        it finishes. Run by the core at ``Monitor()``, before SwanLab is imported.

        Raises:
            ConfigError: naming the mode and ``pip install "swanlab[dashboard]"``.
        """
        problem = local_mode_problem(options.get("mode"))
        if problem is not None:
            raise ConfigError(f"swanlab: {problem}")

    @classmethod
    def check_sdk(cls) -> list[str]:
        """What this SwanLab lacks of the internals the plugin uses (``_compat.problems``),
        and of the dashboard package when ``SWANLAB_MODE=local``; run by the core before the
        backend is first constructed and by ``monitors list --check``.

        Raises:
            ImportError: SwanLab is not installed.
        """
        problem = local_mode_problem(None)
        return [*_compat.problems(), *([problem] if problem is not None else [])]

    def __init__(self, run: RunInfo, *,
                 mode: Literal["online", "offline", "local", "disabled"] | None = None,
                 workspace: str | None = None, tags: Sequence[str] = (),
                 description: str | None = None, group: str | None = None,
                 job_type: str | None = None, quiet: bool = True) -> None:
        import swanlab

        self._quiet = quiet
        extra = {}
        if run.system_metrics is not None:  # Monitor(system_metrics=...) samples the job
            extra["probe"] = swanlab.Settings.Probe(monitor=False)
        settings = swanlab.Settings(interactive=False,
                                    terminal=swanlab.Settings.Terminal(proxy_type="none"),
                                    **extra)
        if group is None and settings.experiment.group is None:  # no group of the user's
            group = run.group  # every rank's run: the job's
        folder = swanlab_dir(run)
        with _compat.quiet_info(quiet), _compat.detached():
            self._run = swanlab.init(
                project=run.project, name=run.ranked_name, config=dict(run.config),
                log_dir=str(folder) if folder is not None else None, mode=mode,
                workspace=workspace, tags=list(tags) or None, description=description,
                group=group, job_type=job_type, settings=settings)
        self._steps: dict[str, StepSet] = {}
        self._reported: set[str] = set()
        #: The run got SwanLab's finish record: ``monitor_crash`` finishes it as crashed, and
        #: ``monitor_close``, which the core calls right after, must not finish it again.
        self._finished = False

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """One ``Run.log(row, step=step)`` per step of the batch (``rows_by_step``)."""
        for step, _, row in rows_by_step(events):
            kept = {key_of(tag): value for tag, value in row.items() if self._new(tag, step)}
            if kept:
                self._run.log(kept, step=step)

    @hookimpl
    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """One ``Run.log({key: swanlab.Image | swanlab.Text}, step=step)`` per step."""
        by_step: dict[int, dict[str, Any]] = {}
        for item in items:
            if self._new(item.tag, item.step):
                by_step.setdefault(item.step, {})[key_of(item.tag)] = media.to_swanlab(item.value)
        for step, row in by_step.items():
            self._run.log(row, step=step)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge late config into the run's config; a key given again takes the new value."""
        self._run.config.update(dict(config))

    @hookimpl
    def monitor_flush(self) -> None:
        """Nothing to do: SwanLab has no flush (rows are readable after close)."""

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Finish the run in SwanLab's ``crashed`` state, ``reason`` as its error."""
        self._finish(state="crashed", error=reason)

    @hookimpl
    def monitor_close(self) -> None:
        """Finish the run (SwanLab writes what it holds and the finish record), unless
        ``monitor_crash`` finished it already."""
        self._finish(state="success", error=None)

    def _finish(self, state: Literal["success", "crashed"], error: str | None) -> None:
        if self._finished:
            return
        self._finished = True
        with _compat.quiet_info(self._quiet), _compat.detached():
            self._run.finish(state=state, error=error)

    def _new(self, tag: str, step: int) -> bool:
        """Whether SwanLab will store ``tag`` at ``step``; else report it (once per tag)."""
        if step >= STEP_LIMIT:
            self._report(tag, f"step {step} is beyond SwanLab's largest step 2**48 - 1")
            return False
        if not self._steps.setdefault(tag, StepSet()).add(step):
            self._report(tag, f"SwanLab keeps one value per tag and step, and step {step} "
                              "already has one (the first is kept)")
            return False
        return True

    def _report(self, tag: str, why: str) -> None:
        if tag in self._reported:
            return
        self._reported.add(tag)
        warnings.warn(f"swanlab: a point of tag {tag!r} is not stored: {why}; further such "
                      "points of this tag are dropped without a warning", RuntimeWarning,
                      stacklevel=2)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = SwanlabMonitor


def local_mode_problem(mode: str | None) -> str | None:
    """Why SwanLab's ``"local"`` mode (``mode``, or ``SWANLAB_MODE`` when ``mode`` is ``None``)
    cannot work here: its dashboard package (``swanboard``, the extra ``swanlab[dashboard]``)
    is not installed; ``None`` when it can, or another mode is chosen."""
    chosen = mode if mode is not None else os.environ.get("SWANLAB_MODE")
    if chosen != "local" or importlib.util.find_spec("swanboard") is not None:
        return None
    source = "mode='local'" if mode is not None else "SWANLAB_MODE=local"
    return (f"{source} needs SwanLab's dashboard package, which is not installed (SwanLab "
            "would fail only when the run finishes): pip install \"swanlab[dashboard]\", or "
            "use mode='offline'")
