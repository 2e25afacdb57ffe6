"""``ClearmlMonitor``: a run's scalars, media and config as a ClearML task.

ClearML is imported when the first ``ClearmlMonitor`` is constructed (or by ``check_sdk``),
never at import of this module.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import signal
import threading
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl
from core_monitor.media import Histogram, Image, MediaItem, Text
from core_monitor.options import NonBlank
from core_monitor.output import hidden
from core_monitor.run import training_pid

from . import _compat
from .storage import (
    CAPTION_CHUNK,
    CRASH_PREFIX,
    CRASH_TAG,
    HISTOGRAM_EDGES,
    IMAGE_EXTENSION,
    SECTION,
    TEXT_EXTENSION,
    cache_dir,
    title_of,
    with_group_tag,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from core_monitor.hookspecs import MediaBackend

#: The variable ``Task.init`` sets in ``os.environ`` (``<pid>:<task id>``), under both of its
#: names (ClearML's ``PROC_MASTER_ID_ENV_VAR``; ``TRAINS_`` is the name before ClearML): ClearML
#: takes a process that inherits either for a subprocess of that task, so a ``Task.init`` there
#: (a writer process of a later ``Monitor``) would not start a task of its own. ``close``
#: restores both, as ClearML's own pipeline controller pops both before starting a step.
MASTER_VARIABLES = ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID")
#: The variables that bind a process to a task it did not create, which a writer process
#: inherits from the training process: ``MASTER_VARIABLES`` (set by the user's ``Task.init``,
#: by accelerate's or the HF Trainer's ClearML tracker beside this backend), and what
#: ``clearml-agent`` sets for the task it runs (``CLEARML_TASK_ID``: ClearML reads it once, at
#: import, and then takes the process for that remote task; ``CLEARML_LOG_TASK_TO_BACKEND``,
#: ``CLEARML_SIMULATE_REMOTE_TASK``, ``CLEARML_NODE_ID`` go with it). ClearML's
#: ``clearml.config.defs`` names them (both spellings). A writer process drops them before
#: ClearML is imported there, so its ``Task.init`` starts a task of its own.
INHERITED_TASK_VARIABLES = (*MASTER_VARIABLES, "CLEARML_TASK_ID", "TRAINS_TASK_ID",
                            "CLEARML_LOG_TASK_TO_BACKEND", "TRAINS_LOG_TASK_TO_BACKEND",
                            "CLEARML_SIMULATE_REMOTE_TASK", "CLEARML_NODE_ID",
                            "TRAINS_NODE_ID")
#: The warning period given with the NaN and inf values: ClearML would say every 1000th NaN
#: that it reports it as NaN.
QUIET = 2**62
#: Config value types ClearML keeps with the value (``type`` in ``task.json``).
TYPED = (bool, int, float, str)
#: ``max_history`` of ``Logger.report_media``: keep every debug sample. ClearML's default
#: (``sdk.metrics.file_history_size``, 100 in its shipped configuration) names a tag's files by
#: a counter modulo 100, so its 101st sample would replace the first.
EVERY_SAMPLE = -1


class ClearmlMonitor:
    """Log a run as a ClearML task through ClearML's own ``Logger.report_scalar``.

    Constructed by the core as ``ClearmlMonitor(run, **options)``; users select it as
    ``Monitor(["clearml"], project=..., log_dir=..., clearml={"tags": ["baseline"]})``.

    Storage (``clearml_monitor.storage``): ``Task.init(project_name=run.project,
    task_name=run.ranked_name)``; offline (the default) the session folder
    ``<log_dir>/clearml/offline/<task id>/`` (``CLEARML_CACHE_DIR`` is set to
    ``<log_dir>/clearml`` for the ``Task.init``, unless it is set already). Each scalar is
    ``logger.report_scalar(title=<tag up to its last '/'>, series=<tag>, value,
    iteration=<step>)``: ClearML's iteration is the caller's step exactly (0 .. 2**63-1), the
    value a float64 as logged, NaN and +-inf kept (``Logger.set_reporting_nan_value`` and
    ``set_reporting_inf_value`` are set to NaN and inf, and to -inf around a -inf: ClearML's
    default stores them all as 0, a setting of the whole process). Config: the hyperparameter
    section ``General``, one ``task.set_parameter`` per key (merged by ``monitor_config``).
    Media, at ``(title, series, iteration)`` as a scalar (``storage``): an image as a debug
    sample, a PNG (``logger.report_media(stream=<png>, file_extension=".png")``: what ClearML's
    UI shows as a debug image, pixels exact, where ``report_image(image=array)`` would encode
    a JPEG), its caption in the PNG's text chunk ``Description`` (ClearML has no caption field
    and its UI does not show it); a text as a debug sample ``.txt`` of its UTF-8 bytes (ClearML's
    ``report_text`` lines have no iteration); a histogram as ClearML's histogram plot
    (``logger.report_histogram``: counts as bars at the bin centres, of the bins' widths, each
    bin's exact edges kept with it). Every sample is kept (``max_history=-1``). With
    ``rank_zero_only=False`` every rank's task has the tag ``job.group: <RunInfo.group>``
    (``storage.GROUP_TAG_PREFIX``; a ``job.group:`` tag in ``tags`` wins): filter the
    project's tasks by it to see the job's.

    Nothing that samples, patches or scans the process: ``auto_connect_frameworks`` every
    framework and ``detect_repository`` off (``_compat.NOTHING_CONNECTED``),
    ``auto_connect_arg_parser=False``, ``auto_resource_monitoring=False``,
    ``auto_connect_streams=False``; events are written by a thread, not a subprocess forked
    from the trainer; a process forked from the trainer (a DataLoader or ``Pool`` worker) runs
    none of ClearML's code (``Task.init``'s fork hooks are turned off, ``_compat``); and
    ClearML's update check (a request to ``updates.clear.ml`` at every first ``Task.init`` of a
    process, offline too) is not made (``_compat``). The signal
    handlers ``Task.init`` replaces are put back: ClearML's would close the task at SIGTERM,
    before a writer process wrote the rest of its pipe and marked the crash.

    ClearML allows one open task per process. In a writer process (``dispatch="process"``, the
    default) the backend always starts a task of its own, beside the user's (``Task.init`` in
    the training script, accelerate's or the Trainer's ClearML tracker, a ``clearml-agent``
    run): the ClearML variables the writer inherits from the training process
    (``INHERITED_TASK_VARIABLES``) are dropped in the writer before ClearML is imported there.
    In ``dispatch="thread"`` or ``"sync"`` the backend runs in the training process, and a
    task already open there (the user's) makes it raise ``ConfigError`` naming the fix.
    Resume is not supported: an offline session cannot
    be continued.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        tags: task tags, a sequence of non-empty ``str`` (with ``rank_zero_only=False``, and
            the tag ``job.group: <group>``).
        offline: ``True`` (default): an offline session under ``log_dir``, nothing sent;
            ``False``: the server of ClearML's own configuration (``clearml.conf``,
            ``CLEARML_API_HOST``).
        quiet: ``True`` (default): ClearML's lines at ``Task.init`` and ``close`` (the task
            id, the session's folder and ``.zip``), which it writes with ``print()``, go
            nowhere: ``sys.stdout`` is replaced for those two calls (in ``dispatch="thread"``
            or ``"sync"``, the training process's own prints during them too). In a writer
            process this also keeps a training process that died (its end of the writer's
            output pipe closed) from failing ``Task.init`` with ``BrokenPipeError``.

    Raises:
        ConfigError: a ClearML task is already open in this process (``dispatch="thread"`` or
            ``"sync"``); (``check_options``) a blank tag.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        name="clearml",
        rows_readable_after="flush",  # Task.flush(wait_for_uploads=True) writes metrics.jsonl
        value_dtype="float64",
        stores_config=True,  # hyperparameters, section General
        media_kinds=frozenset({"image", "histogram", "text"}),  # debug samples, plots
        supports_resume=False,  # an offline session cannot be continued
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    @staticmethod
    def check_sdk() -> list[str]:
        """What the installed ClearML lacks of what this plugin uses (run by the core, in a
        writer process before the backend is built: it imports ClearML, so the inherited
        task variables go first)."""
        _leave_inherited_task()
        return _compat.problems()

    def __init__(self, run: RunInfo, *, tags: Sequence[NonBlank] | None = None,
                 offline: bool = True, quiet: bool = True) -> None:
        _leave_inherited_task()
        from clearml import Logger, Task

        current: Any = Task.current_task()
        if current is not None:  # only in the training process: a writer left the user's task
            raise ConfigError(
                f"clearml: a ClearML task ({current.name!r}, id {current.id}) is already open "
                "in the training process, and ClearML allows one task per process, so with "
                "dispatch='thread' or 'sync' this backend would log into that task; use "
                "Monitor(..., dispatch='process') (the default), where the clearml backend "
                "writes a task of its own beside that one, or close that task first "
                "(task.close())")
        self._info = run
        self._quiet = quiet
        self._master_before = {name: os.environ.get(name) for name in MASTER_VARIABLES}
        _leave_closed_parent_task()
        _compat.use_report_thread()
        _compat.no_update_check()  # Task.init would ask updates.clear.ml, offline too
        if offline:
            Task.set_offline(True)
        Logger.set_reporting_nan_value(math.nan, warn_period=QUIET)
        Logger.set_reporting_inf_value(math.inf, warn_period=QUIET)
        self._logger_class = Logger
        with _cache_dir(run), self._silenced(), _own_signal_handlers():
            self._task: Any = Task.init(
                project_name=run.project, task_name=run.ranked_name,
                tags=with_group_tag(tags or (), run.group) or None, reuse_last_task_id=False,
                auto_connect_frameworks=dict(_compat.NOTHING_CONNECTED),
                auto_connect_arg_parser=False, auto_resource_monitoring=False,
                auto_connect_streams=False)
            self._task.get_offline_mode_folder()  # resolved (and kept) under this cache dir
        _compat.no_fork_hooks()  # a forked child (a DataLoader worker) does not join the task
        self._logger: Any = self._task.get_logger()
        self._set_config(dict(run.config))

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """``report_scalar`` each event at its step (``iteration``)."""
        for event in events:
            if event.value == -math.inf:  # ClearML turns every infinity into one value
                self._logger_class.set_reporting_inf_value(-math.inf, warn_period=QUIET)
            try:
                self._logger.report_scalar(title=title_of(event.tag), series=event.tag,
                                           value=event.value, iteration=event.step)
            finally:
                if event.value == -math.inf:
                    self._logger_class.set_reporting_inf_value(math.inf, warn_period=QUIET)

    @hookimpl
    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """Report each item at its step (``iteration``): an image or a text as a debug sample
        (``report_media``), a histogram as a plot (``report_histogram``)."""
        for item in items:
            value = item.value
            title = title_of(item.tag)
            if isinstance(value, Histogram):
                self._report_histogram(title, item.tag, item.step, value)
                continue
            if isinstance(value, Image):
                stream, extension = _png(value), IMAGE_EXTENSION
            elif isinstance(value, Text):
                stream, extension = io.BytesIO(value.text.encode("utf-8")), TEXT_EXTENSION
            else:  # the core sends only the declared kinds
                continue
            self._logger.report_media(title=title, series=item.tag, iteration=item.step,
                                      stream=stream, file_extension=extension,
                                      max_history=EVERY_SAMPLE)

    def _report_histogram(self, title: str, series: str, step: int,
                          histogram: Histogram) -> None:
        """One bar per bin: at its centre, as wide as the bin, its edges in ``customdata``."""
        counts, edges = histogram.binned()
        left, right = edges[:-1].tolist(), edges[1:].tolist()
        self._logger.report_histogram(
            title=title, series=series, values=counts, iteration=step,
            xlabels=((edges[:-1] + edges[1:]) / 2).tolist(), xaxis=series, yaxis="count",
            data_args={"width": (edges[1:] - edges[:-1]).tolist(),
                       HISTOGRAM_EDGES: [list(pair) for pair in zip(left, right, strict=True)],
                       "hovertemplate": "[%{customdata[0]}, %{customdata[1]}]: %{y}"
                                        "<extra></extra>"})

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge late hyperparameters into the section ``General``."""
        self._set_config(dict(config))

    def _set_config(self, config: dict[str, Any]) -> None:
        for key, value in config.items():
            typed = type(value) if type(value) in TYPED else None
            self._task.set_parameter(f"{SECTION}/{key}", value if typed else str(value),
                                     value_type=typed)

    @hookimpl
    def monitor_flush(self) -> None:
        """Write every reported event (``task.flush(wait_for_uploads=True)``)."""
        self._task.flush(wait_for_uploads=True)

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Mark the task: an error line ``core-monitor crash: <reason>`` in its log, the tag
        ``crashed`` and, on a server, the status failed (``mark_failed``) with the reason."""
        self._logger.report_text(f"{CRASH_PREFIX}{reason}", level=logging.ERROR,
                                 print_console=False)
        self._task.add_tags([CRASH_TAG])
        self._task.mark_failed(status_reason=reason[:255], status_message=reason)
        self._task.flush(wait_for_uploads=True)

    @hookimpl
    def monitor_close(self) -> None:
        """Close the task (offline: the session's ``.zip`` is written beside its folder) and put
        back ``CLEARML_PROC_MASTER_ID`` and ``TRAINS_PROC_MASTER_ID`` as they were before
        ``Task.init``."""
        with self._silenced():
            self._task.close()
        for name, before in self._master_before.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before

    def _silenced(self) -> contextlib.AbstractContextManager[Any]:
        """``sys.stdout`` to nowhere inside the block when ``quiet``."""
        return hidden(self._quiet, stdout=True)


def _png(image: Image) -> io.BytesIO:
    """``image`` as PNG bytes (grey, RGB or RGBA as given), its caption in the text chunk
    ``storage.CAPTION_CHUNK``."""
    import numpy as np
    from PIL import Image as PILImage
    from PIL.PngImagePlugin import PngInfo

    pixels = np.asarray(image.array)
    info = PngInfo()
    if image.caption is not None:
        info.add_text(CAPTION_CHUNK, image.caption)  # iTXt (UTF-8) when not Latin-1
    stream = io.BytesIO()
    PILImage.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels).save(
        stream, format="PNG", pnginfo=info)
    stream.seek(0)
    return stream


#: The signals whose handlers ``Task.init`` replaces (ClearML's ``ExitHooks``), by name.
HOOKED_SIGNALS = ("SIGINT", "SIGTERM", "SIGSEGV", "SIGABRT", "SIGILL", "SIGFPE", "SIGQUIT")


@contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """Put this process's signal handlers back after ``Task.init``, which replaces them with
    ClearML's: its SIGTERM handler closes the task at once, so under a scheduler's SIGTERM to
    every process of a job (Slurm's preemption) a writer process could neither write what its
    pipe still held nor mark the crash (``monitor_crash``). The process's own handling stays
    in charge: the core's closes the monitor (in a writer: drain, crash mark, close). Only in
    the main thread, the one where handlers can be set (in another, ClearML cannot set its own
    either)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [getattr(signal, name) for name in HOOKED_SIGNALS if hasattr(signal, name)]
    saved = {number: signal.getsignal(number) for number in signals}
    try:
        yield
    finally:
        for number, handler in saved.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)


def _leave_inherited_task() -> None:
    """In a writer process (``core_monitor.run.training_pid()`` is another process), drop the
    ClearML variables inherited from the training process (``INHERITED_TASK_VARIABLES``): with
    them ClearML would take the writer for a subprocess of the user's task (or of the task a
    ``clearml-agent`` runs) and ``Task.init`` would return that task. In the training process
    (``dispatch="thread"`` or ``"sync"``) nothing changes: those variables are the user's."""
    if training_pid() == os.getpid():
        return
    for name in INHERITED_TASK_VARIABLES:
        os.environ.pop(name, None)
    _compat.forget_remote_task()


def _leave_closed_parent_task() -> None:
    """In the training process, drop ``MASTER_VARIABLES`` that name another process and no
    task (``<pid>:``, what ``Task.close()`` leaves in a process that ran ``Task.init``, e.g.
    a launcher or a test runner, inherited by the training script it started). ClearML takes
    such a process for a subprocess of that one and, finding no task to join, makes
    ``Task.init`` return a stub that stores nothing, without a word. ``monitor_close`` puts
    them back. A variable naming a task (``<pid>:<id>``) is kept: ``Task.current_task()`` is
    that task then, and ``__init__`` refuses it."""
    for name in MASTER_VARIABLES:
        pid, _, task = os.environ.get(name, "").partition(":")
        if pid and pid != str(os.getpid()) and not task:
            del os.environ[name]


@contextmanager
def _cache_dir(run: RunInfo) -> Iterator[None]:
    """``CLEARML_CACHE_DIR`` set to the run's cache folder (``storage.cache_dir``) inside the
    block, as it was after it."""
    folder = cache_dir(run)
    before = os.environ.get("CLEARML_CACHE_DIR")
    if folder is None or before:
        yield
        return
    os.environ["CLEARML_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        os.environ.pop("CLEARML_CACHE_DIR", None)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = ClearmlMonitor
