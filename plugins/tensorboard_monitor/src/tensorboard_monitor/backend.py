"""``TensorBoardMonitor``: the hooks that write a run's scalars and HParams to event files."""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import Capabilities, ConfigError, Event, RunInfo, hookimpl
from core_monitor.events import rows_by_step
from core_monitor.media import MEDIA_KINDS, MediaItem
from core_monitor.resume import NoRunToResume

from . import _compat, media, reader
from .storage import CRASH_TAG, event_files, event_folder, hparam_value, remove
from .storage import run_dir as _run_dir

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend


class TensorBoardMonitor:
    """Write a run's scalars (and its config as HParams) to TensorBoard event files.

    Constructed by the core as ``TensorBoardMonitor(run, **options)``; users select it as
    ``Monitor(["tensorboard"], ..., tensorboard={"flush_secs": 30})``. TensorBoard is imported
    here, in the constructor, never when ``tensorboard_monitor`` is imported.

    Media (``monitor_write_media``): images, histograms and text as TensorBoard's Images,
    Histograms and Text dashboards read them (``tensorboard_monitor.media``).

    Storage: one ``Event`` protobuf per step row of a ``log`` call (all scalars of that row as
    ``Summary.Value(tag=..., simple_value=...)``), ``Event.step`` = the caller's step exactly
    (int64: lower and repeated steps are kept in file order), ``Event.wall_time`` = the time of
    the ``log`` call (``core_monitor.Event.wall_time``, seconds since the epoch). Values are
    float32 (TensorBoard's ``simple_value``): about 7 significant digits; NaN and +-inf are
    kept; finite values beyond +-3.4e38 become +-inf.

    HParams: the config (``run.config`` merged with every ``Monitor.log_config`` call) is
    written as one ``session_start_info`` summary on rank 0, at the first flush or close.
    TensorBoard's HParams plugin keeps the first ``session_start_info`` of a run and ignores
    later ones, so config given after that point cannot reach the HParams tab: it raises a
    ``RuntimeWarning`` naming the keys.

    Resume (``run.resume``, ``Monitor(resume=...)``): with ``"allow"`` or ``"must"`` and event
    files already in the run's folder, the run continues there: a new event file beside the
    old ones (how TensorBoard itself continues a run; it reads a folder's files in name order as
    one run), no second HParams session (TensorBoard keeps the first; later config is not
    written and not warned about). ``last_step`` is the largest step stored before. A step
    logged again appears twice in the run: TensorBoard's scalar charts draw both points in
    file order (a line going back), ``read_rows`` returns both. ``"must"`` with no event file
    raises ``NoRunToResume`` before any folder or file is created. With ``"never"`` (the
    default), event files already in ``<log_dir>/<project>/<name>`` (a re-run of the same name)
    are deleted after a ``UserWarning`` naming the folder and ``resume="allow"``: the new run
    never mixes its rows with the old one's (``TensorBoardLogger`` would add its file beside
    them, and TensorBoard's UI show the old points up to the new run's first step). A folder
    given exactly (``run_dir``) keeps ``SummaryWriter(log_dir=...)``'s meaning: a new event
    file beside what is there (DeepSpeed's own writer may share it), nothing deleted.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        flush_secs: seconds (> 0) between the writer thread's periodic flushes; TensorBoard's
            and PyTorch's default is 120. ``Monitor.flush()`` and ``close()`` flush regardless.
        max_queue: events (>= 1) the writer's queue holds before ``log`` waits for its thread;
            PyTorch's ``SummaryWriter`` default is 10.
        filename_suffix: text appended to the event file name (no path separators).
        hparams: write the config as HParams data so it shows in TensorBoard's HParams tab;
            ``False`` writes scalars only.
        run_dir: the folder the event files go to, exactly (``str`` or path, relative to the
            current directory), instead of ``<log_dir>/<project>/<name>``: PyTorch
            ``SummaryWriter(log_dir=...)``'s meaning, and where DeepSpeed's own writer puts a
            run (``<output_path>/<job_name>``, see ``from_deepspeed``). A rank above 0
            (``rank_zero_only=False``) adds ``rank<rank>``. Read it back with
            ``read_rows(run, run_dir=...)``. An fsspec URL (``s3://bucket/runs/r``,
            ``memory://runs/r``) is written through TensorBoard's own file layer, which uses
            fsspec for it, as ``TensorBoardLogger(save_dir=<URL>)`` writes there (``fsspec``
            and the filesystem's package must be installed).
        quiet: accepted as by every first-party backend (``False`` shows the SDK's own
            output); TensorBoard's writer prints nothing either way.

    Raises:
        ConfigError: the project / run name cannot be a folder name (see ``run_dir``); the
            options' types and values are checked before, at ``Monitor()`` (``check_options``).
        OSError: the run folder cannot be created.
        BackendLoadError: the installed TensorBoard changed shape (see ``check_sdk``).
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="tensorboard",
        rows_readable_after="flush",  # EventAccumulator sees every event after monitor_flush
        value_dtype="float32",  # Summary.Value.simple_value is a float32
        stores_config=True,  # monitor_config merges late config into the run's HParams
        media_kinds=MEDIA_KINDS,  # images, histograms and text (see ``media``)
        supports_resume=True,  # run.resume continues the run's folder ("Resume" above)
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    @classmethod
    def from_deepspeed(cls, section: Mapping[str, Any]) -> dict[str, Any]:
        """DeepSpeed's ``"tensorboard"`` section (``deepspeed.monitor.config.TensorBoardConfig``,
        ``enabled`` removed) in this backend's terms, for ``core_monitor.integrations.deepspeed``.

        The events go where DeepSpeed's own writer puts them, ``<output_path>/<job_name>``
        (DeepSpeed's defaults ``""`` and ``"DeepSpeedJobName"``: ``./DeepSpeedJobName``), as the
        ``run_dir`` option; a ``job_name`` given is also the run's name (``name``) for every
        backend. Other keys are passed on as they are.
        """
        options = dict(section)
        output_path = options.pop("output_path", "") or ""
        job_name = options.pop("job_name", None)
        options["run_dir"] = os.path.join(output_path, job_name or "DeepSpeedJobName")
        if job_name:
            options["name"] = job_name
        return options

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """What the annotations cannot say (ranges, path separators, an empty ``run_dir``), for
        the options given; run by the core in the training process at ``Monitor()``, before
        TensorBoard is imported (``core_monitor.hookspecs.Backend.check_options``).

        Raises:
            ConfigError: an option has a wrong value; the message names the option, the value
                and an example of a valid one.
        """
        _check_options(options)

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(
        self,
        run: RunInfo,
        *,
        flush_secs: float = 120.0,
        max_queue: int = 10,
        filename_suffix: str = "",
        hparams: bool = True,
        run_dir: str | os.PathLike[str] | None = None,
        quiet: bool = True,
    ) -> None:
        folder = (event_folder(run_dir, rank=run.rank) if run_dir is not None
                  else _run_dir(run.project, run.name, run.log_dir, rank=run.rank))
        sdk = _compat.sdk()
        #: Whether an earlier run was continued; the largest step it held (``None``: none).
        self.resumed, self.last_step = _earlier_run(run, folder, run_dir)
        if not self.resumed and run_dir is None:  # the run-named folder: one run in it
            _replace_earlier(folder)
        self.run = run
        #: The folder this run's event file is in (absolute).
        self.log_dir = folder
        self._Event = sdk.Event
        self._hparams_pb = sdk.hparams_pb
        self._writer = sdk.EventFileWriter(
            str(self.log_dir),
            max_queue_size=max_queue,
            flush_secs=flush_secs,
            filename_suffix=filename_suffix,
        )
        self._add_event = self._writer.add_event
        self._last_step = self.last_step or 0  # the largest step written (the crash text's)
        self._start_time = time.time()
        self._config = dict(run.config)
        # HParams are written on rank 0 only, once per run (a resumed run has them)
        self._hparams = hparams and run.rank == 0 and not self.resumed
        self._hparams_pending = self._hparams  # False once written

    def _write_hparams(self) -> None:
        # Only the session is written: the HParams plugin derives the experiment (hparam
        # columns, metric columns from scalar tags) from all sessions under --logdir, whereas
        # one experiment summary per run would hide every other run's hparams.
        self._hparams_pending = False
        if not self._config:
            return
        values = {key: hparam_value(value) for key, value in self._config.items()}
        # One HParams row per run (as PyTorch's add_hparams), labelled with the run's path
        # under --logdir; summary_v2's default, a hash of the values, would merge equal configs.
        trial_id = f"{self.run.project}/{self.run.name}"
        summary = self._hparams_pb(values, trial_id=trial_id, start_time_secs=self._start_time)
        self._add_event(self._Event(wall_time=self._start_time, step=0, summary=summary))

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """Write one TensorBoard ``Event`` per step row of the batch (see the class docstring).

        Raises:
            OSError: the writer is closed, or its thread failed to write (e.g. disk full).
        """
        new_event = self._Event
        add_event = self._add_event
        last = self._last_step
        for step, wall_time, row in rows_by_step(events):
            event = new_event(wall_time=wall_time, step=step)
            add_value = event.summary.value.add
            for tag, value in row.items():
                add_value(tag=tag, simple_value=value)
            add_event(event)
            if step > last:
                last = step
        self._last_step = last

    @hookimpl
    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """One ``Event`` per image, histogram or text, at its step (see ``media``).

        Raises:
            OSError: as ``monitor_write``.
        """
        media.write_media(self._add_event, items)
        self._last_step = max(self._last_step, max((item.step for item in items), default=0))

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge ``config`` into the run's HParams, if they are not written yet."""
        self._config.update(config)
        if self._hparams_pending or not self._hparams:
            return
        warnings.warn(
            f"tensorboard: the config keys {sorted(config)} arrived after the run's HParams were "
            "written (at its first flush or close); TensorBoard shows the first HParams of "
            "a run only, so they are not in its HParams tab. Call Monitor.log_config() before "
            "the first flush() to have them there.",
            RuntimeWarning,
            stacklevel=2,
        )

    @hookimpl
    def monitor_flush(self) -> None:
        """Block until every event written so far is in the event file."""
        if self._hparams_pending:
            self._write_hparams()
        self._writer.flush()

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """The training process died: TensorBoard has no run status, so write one text summary,
        tag ``storage.CRASH_TAG`` (``core_monitor/crash``), ``reason`` as its text, at the
        largest step written (its Text dashboard shows it; ``reader.read_media`` reads it
        back). ``monitor_close`` (called next) flushes it.

        Raises:
            OSError: as ``monitor_write``.
        """
        sdk = _compat.sdk()
        self._add_event(self._Event(wall_time=time.time(), step=self._last_step,
                                    summary=sdk.text_pb(CRASH_TAG, reason)))

    @hookimpl
    def monitor_close(self) -> None:
        """Flush, stop the writer thread and close the event file."""
        if self._hparams_pending:
            self._write_hparams()
        self._writer.close()


def _replace_earlier(folder: Any) -> None:
    """A run already in ``folder`` and no resume (a re-run of the same name): warn, then delete
    its event files, so that the new run's rows never mix with the old ones (TensorBoard's UI
    would show the union, cut at the new run's first step)."""
    earlier = event_files(folder)
    if not earlier:
        return
    warnings.warn(f"tensorboard: a run is already in {str(folder)!r}; its {len(earlier)} event "
                  "file(s) are deleted and this run written in its place (a re-run of the same "
                  "name). Pass resume='allow' to continue it instead, or give another run name "
                  "to keep it", UserWarning, stacklevel=3)
    for path in earlier:
        remove(path)


def _earlier_run(run: RunInfo, folder: Any, run_dir: Any) -> tuple[bool, int | None]:
    """``(resumed, last_step)`` for ``run.resume``; raise ``NoRunToResume`` for ``"must"``
    when the folder holds no event file (nothing is created before)."""
    if run.resume == "never":
        return False, None
    if event_files(folder):
        return True, reader.last_step(run, run_dir=run_dir)
    if run.resume == "must":
        raise NoRunToResume(f"no TensorBoard event file in {str(folder)!r}")
    return False, None


def _check_options(options: Mapping[str, Any]) -> None:
    flush_secs = options.get("flush_secs", 120.0)
    if (
        isinstance(flush_secs, bool)
        or not isinstance(flush_secs, (int, float))
        or not (math.isfinite(flush_secs) and flush_secs > 0)
    ):
        raise ConfigError(
            f"tensorboard: option flush_secs={flush_secs!r} must be a number of seconds > 0, "
            "e.g. flush_secs=120"
        )
    max_queue = options.get("max_queue", 10)
    if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
        raise ConfigError(
            f"tensorboard: option max_queue={max_queue!r} must be an integer >= 1, "
            "e.g. max_queue=10"
        )
    filename_suffix = options.get("filename_suffix", "")
    if not isinstance(filename_suffix, str) or any(
        sep in filename_suffix for sep in ("/", "\\", "\0")
    ):
        raise ConfigError(
            f"tensorboard: option filename_suffix={filename_suffix!r} must be a str without "
            "path separators, e.g. filename_suffix='.v2'"
        )
    hparams = options.get("hparams", True)
    if not isinstance(hparams, bool):
        raise ConfigError(
            f"tensorboard: option hparams={hparams!r} must be True or False"
        )
    if options.get("run_dir") is not None:
        event_folder(options["run_dir"])  # empty or holding a NUL: ConfigError naming run_dir


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = TensorBoardMonitor
