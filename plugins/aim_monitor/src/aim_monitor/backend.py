"""``AimMonitor``: a run's scalars, media and config in an Aim repository.

Aim is imported when the first ``AimMonitor`` is constructed (or by ``check_sdk``), never at
import of this module.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import BackendWarning, Capabilities, Event, RunInfo, hookimpl
from core_monitor.media import Histogram, Image, MediaItem, Text
from core_monitor.options import NonBlank
from core_monitor.resume import NoRunToResume

from . import _compat
from .storage import (
    CRASH_KEY,
    CRASH_TAG,
    EDGES_KEY,
    GROUP_KEY,
    GROUP_PARAM,
    HPARAMS,
    Segments,
    context_of,
    is_remote,
    repo_path,
)

if TYPE_CHECKING:
    from core_monitor.hookspecs import MediaBackend

#: Aim's ``Distribution`` holds at most this many bins.
MAX_BINS = 512


#: Seconds ``monitor_flush`` waits, on an Aim server, without a write taken before it raises.
FLUSH_WAIT = 10.0
#: Seconds between two looks at Aim's client's backlog while ``monitor_flush`` waits.
FLUSH_POLL = 0.05


class AimDeliveryError(ConnectionError):
    """The Aim server took none of the writes Aim's client holds for ``FLUSH_WAIT`` seconds
    (it is down or restarting); the client keeps them and sends them when it reconnects."""


class AimMonitor:
    """Log a run to an Aim repository through ``aim.Run`` (Aim's own logging API).

    Constructed by the core as ``AimMonitor(run, **options)``; users select it as
    ``Monitor(["aim"], project=..., log_dir=..., aim={"tags": ["baseline"]})``.

    Storage (``aim_monitor.storage``): the repository ``<log_dir>/aim`` (or ``repo``),
    experiment = ``experiment`` (default: the project), run name = ``RunInfo.ranked_name``;
    each scalar is ``run.track(value, name=tag, step=step)`` at the caller's step exactly
    (0 .. 2**63-1, the float64 as logged, NaN and +-inf kept), in the tag's first *segment*
    (context ``{"segment": n}``, segment 0 none) whose last step is below it, else a new
    one, because Aim keeps one value per step of a sequence. Config: the run param
    ``hparams``, merged by ``monitor_config``. Media: images as ``aim.Image`` (PNG, caption
    kept), histograms as ``aim.Distribution`` (at most 512 bins; Aim keeps only the range,
    so the edges of a histogram whose bins are not of equal width are kept in the run param
    ``core_monitor_histogram_edges`` and Aim's UI draws it with equal-width bins), text as
    ``aim.Text``. With ``rank_zero_only=False`` every rank's run holds the job's run group
    (``RunInfo.group``) as the run param ``job.group``: Aim's explorers group the job's runs
    by ``run.job.group``.

    Nothing that samples or patches the process: ``system_tracking_interval=None`` (no CPU,
    memory or GPU sampling thread), ``log_system_params=False`` (no packages, environment
    variables or git info copied into the run), ``capture_terminal_logs=False`` (stdout and
    stderr are not captured).

    Resume (``run.resume``): ``"allow"``/``"must"`` continue the newest run of that experiment
    and name, ``aim.Run(run_hash=...)``; ``last_step`` is the largest step it holds. ``"must"``
    without one raises ``NoRunToResume`` before anything is written.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.
        repo: the Aim repository (a folder; Aim creates ``<repo>/.aim``), default
            ``<log_dir>/aim``, else Aim's default (the current directory).
        experiment: the Aim experiment, default ``run.project``.
        tags: run tags (``run.add_tag``), a sequence of non-empty ``str``.

    Raises:
        NoRunToResume: ``resume="must"`` and no run of that experiment and name exists.
        ConfigError: (``check_options``) a blank tag.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        name="aim",
        rows_readable_after="flush",  # every track is in Aim's RocksDB (its log) at once
        value_dtype="float64",
        stores_config=True,  # the run param "hparams"
        media_kinds=frozenset({"image", "histogram", "text"}),
        supports_resume=True,  # aim.Run(run_hash=...) continues the run
        tested_sdk=_compat.TESTED,  # outside this range the core warns once
    )

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(self, run: RunInfo, *, repo: str | None = None,
                 experiment: str | None = None, tags: Sequence[NonBlank] | None = None) -> None:
        from aim import Run

        self._info = run
        self._repo = repo_path(run, repo)
        self._experiment = experiment or run.project
        self._segments = Segments()
        self.resumed = False
        self.last_step: int | None = None
        earlier = None if run.resume == "never" else self._earlier()  # and its segments
        if earlier is None and run.resume == "must":
            raise NoRunToResume(f"aim: no run named {run.ranked_name!r} in experiment "
                                f"{self._experiment!r} of the Aim repository {self._repo!r}")
        arguments = {"repo": self._repo, "system_tracking_interval": None,
                     "log_system_params": False, "capture_terminal_logs": False}
        if earlier is not None:
            self._run = Run(run_hash=earlier, **arguments)
            self.resumed = True
        else:
            self._run = Run(experiment=self._experiment, **arguments)
            self._run.name = run.ranked_name
        for tag in tags or ():
            self._run.add_tag(tag)
        if run.group is not None:  # every rank's run: the job's, for Aim's "Group by"
            self._run[GROUP_PARAM] = {GROUP_KEY: run.group}
        if run.config or earlier is None:
            self._merge_config(dict(run.config))

    def _earlier(self) -> str | None:
        """The hash of the newest run of this experiment and name, if any; records where each
        of its tags' segments stands and ``last_step`` (its largest scalar step)."""
        from .reader import find_run, last_steps

        try:
            with find_run(self._info, repo=self._repo, experiment=self._experiment) as found:
                for name, segment, last, is_scalar in last_steps(found):
                    self._segments.resume(name, segment, last)
                    if is_scalar:
                        self.last_step = max(last, self.last_step or 0)
                return str(found.hash)
        except LookupError:
            return None

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """``run.track`` each event at its step (its tag's segment: ``storage``)."""
        for event in events:
            segment = self._segments.place(event.tag, event.step)
            self._run.track(event.value, name=event.tag, step=event.step,
                            context=context_of(segment))

    @hookimpl
    def monitor_write_media(self, items: Sequence[MediaItem]) -> None:
        """``run.track`` an ``aim.Image``, ``aim.Distribution`` or ``aim.Text`` per item."""
        import aim
        import numpy as np

        for item in items:
            value = item.value
            stored: Any
            edges_kept = None
            if isinstance(value, Image):
                pixels = np.asarray(value.array)
                stored = aim.Image(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels,
                                   caption=value.caption or "", format="png")
            elif isinstance(value, Histogram):
                counts, edges = value.binned()
                if len(counts) > MAX_BINS:
                    warnings.warn(f"aim: histogram {item.tag!r} at step {item.step} has "
                                  f"{len(counts)} bins; Aim keeps at most {MAX_BINS}: skipped",
                                  BackendWarning, stacklevel=2)
                    continue
                stored = aim.Distribution(hist=counts, bin_range=(edges[0], edges[-1]))
                if not np.allclose(np.diff(edges), (edges[-1] - edges[0]) / len(counts),
                                   rtol=1e-9, atol=0):
                    edges_kept = [float(e) for e in edges]
            elif isinstance(value, Text):
                stored = aim.Text(value.text)
            else:  # the core sends only the declared kinds
                continue
            segment = self._segments.place(item.tag, item.step)
            self._run.track(stored, name=item.tag, step=item.step, context=context_of(segment))
            if edges_kept is not None:
                self._run.set((EDGES_KEY, item.tag, f"{segment}:{item.step}"), edges_kept,
                              strict=False)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge late hyperparameters into the run param ``hparams``."""
        self._merge_config(dict(config))

    def _merge_config(self, config: dict[str, Any]) -> None:
        stored = dict(self._run.get(HPARAMS, None) or {})
        stored.update(config)
        self._run[HPARAMS] = stored

    @hookimpl
    def monitor_flush(self) -> None:
        """Nothing to do for a local repository: Aim writes each ``track`` to its RocksDB
        databases (their write-ahead log) at once, readable by ``aim.Repo`` in this and other
        processes. On an Aim server (``repo="aim://..."``) wait until the server took every
        write Aim's client holds, for as long as it takes them.

        Raises:
            AimDeliveryError: on an Aim server, no write was taken for ``FLUSH_WAIT`` seconds
                (the server is down or restarting); Aim's client keeps them and sends them
                when it reconnects, and the core keeps the backend's journal cursor before
                them.
        """
        if not is_remote(self._repo):
            return
        left = _compat.remote_backlog(self._run)
        deadline = time.monotonic() + FLUSH_WAIT
        while left:
            if time.monotonic() > deadline:
                raise AimDeliveryError(
                    f"aim: {left} write(s) not yet taken by the Aim server {self._repo}, which "
                    f"took none for {FLUSH_WAIT:g} s; Aim's client keeps them and sends them "
                    "when it reconnects")
            time.sleep(FLUSH_POLL)
            now = _compat.remote_backlog(self._run)
            if now < left:  # the server takes writes: wait on
                deadline = time.monotonic() + FLUSH_WAIT
            left = now

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Mark the run: the param ``core_monitor_crash`` = ``reason``, the tag ``crashed`` and
        an error record in the run's logs (Aim has no run status beyond finished)."""
        self._run[CRASH_KEY] = reason
        self._run.add_tag(CRASH_TAG)
        self._run.log_error(reason)

    @hookimpl
    def monitor_close(self) -> None:
        """Finish the run (``run.close()``: its end time), then index it (``_compat.index_runs``,
        what ``aim up`` does) so that ``aim.Repo`` sees it finished with no ``aim up`` or
        ``aim storage reindex``. A run on an Aim server (``repo="aim://..."``) is not indexed
        here: the repository is the server's (``aim up`` there, or the readers, index it)."""
        run_hash, root = self._run.hash, self._run.repo.root_path
        self._run.close()
        if not is_remote(self._repo):  # a server's repository is indexed where it lives
            _compat.index_runs(root, [run_hash])


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[MediaBackend] = AimMonitor
