"""``DvcliveMonitor``: the hooks that log a run through DVCLive, every point at the caller's
step."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from core_monitor import Capabilities, Event, RunInfo, hookimpl
from core_monitor.resume import NoRunToResume

from . import _compat
from .reader import last_step
from .storage import holds_run, metric_name, run_dir, status_of

if TYPE_CHECKING:
    from core_monitor.hookspecs import Backend


class DvcliveMonitor:
    """Log a run's scalars and config with DVCLive, into ``<log_dir>/<project>/<run name>``.

    Constructed by the core as ``DvcliveMonitor(run)``; users select it as
    ``Monitor(["dvclive"], project=..., name=..., log_dir=...)``. One ``dvclive.Live`` per
    ``Monitor``, with its ``dir`` the run's folder (``run_dir``; ``<run name>-rank<r>`` on a
    rank ``r > 0``; without ``log_dir``, under ``./dvclive/``), ``save_dvc_exp=False``,
    ``dvcyaml=None``, no report, no system monitor. DVCLive is imported here, never when
    ``dvclive_monitor`` is imported.

    Storage (DVCLive's own files): each scalar is ``Live.log_metric(tag, value)`` with
    ``Live.step`` set to the caller's step first, so the ``step`` column of
    ``plots/metrics/<tag>.tsv`` holds exactly that step (lower or repeated steps too; DVCLive's
    own counter, ``next_step()``, is never used). Values are written as Python writes a float
    (exact, float64); NaN and +-inf as ``nan``/``inf``/``-inf``, as DVCLive writes them. A tag
    that would not be a file of its own (an empty, ``.`` or ``..`` part, a last part ``step``, a
    leading ``%``) is stored under an escaped name (``storage.metric_name``). ``run.config``
    goes to ``params.yaml`` (``Live.log_params``), merged with ``Monitor.log_config``'s keys;
    ``metrics.json`` (``Live.make_summary``: each tag's latest value, nested at ``/``, and the
    last step) is rewritten at every flush and at close. DVCLive has no run name, tags or run
    status: the name is the folder's; ``status`` beside DVCLive's files holds ``running``,
    ``finished`` or ``crashed: <reason>``. Media are not stored (the core skips them and says
    so once per kind).

    Nothing is written outside the run's folder and nothing is sent: the ``Live`` used never
    looks for or creates a DVC repository (``dvclive.Live()`` itself runs ``dvc init`` in the
    Git repository around the current folder) and never posts to DVC Studio (``_compat``).

    Resume (``run.resume``): ``"allow"``/``"must"`` continue the run in the folder with
    ``Live(resume=True)``: rows are appended to its TSV files, its params kept and merged;
    ``last_step`` is the largest step they held. A run already in the folder with
    ``resume="never"`` (a re-run of the same name) is replaced as ``dvclive.Live()`` replaces
    it (its metrics, params and plots deleted), after a ``UserWarning`` naming the folder and
    ``resume="allow"``.

    Args:
        run: the run (project, name, config, log_dir, rank) from the core.

    Raises:
        NoRunToResume: ``resume="must"`` and the folder holds no DVCLive run (nothing created).
        OSError: the run's folder cannot be created or written.
    """

    #: What this backend stores and needs, read by the core and the contract kit.
    capabilities: ClassVar[Capabilities] = Capabilities(
        name="dvclive",
        rows_readable_after="flush",  # log_metric appends to the TSV file at once
        value_dtype="float64",  # a float is written as its repr, which round-trips
        stores_config=True,  # params.yaml, merged on monitor_config
        supports_resume=True,  # Live(resume=True) appends to the run's files
        tested_sdk=_compat.TESTED,
    )

    check_sdk = staticmethod(_compat.problems)  # what the SDK lacks; the core runs it

    def __init__(self, run: RunInfo) -> None:
        self._folder = run_dir(run)
        found = holds_run(self._folder)
        if run.resume == "must" and not found:
            raise NoRunToResume(f"dvclive: no run in {str(self._folder)!r}")
        if run.resume == "never" and found:  # Live(resume=False) deletes it: say so first
            warnings.warn(f"dvclive: a run is already in {str(self._folder)!r}; dvclive.Live() "
                          "deletes its metrics, params and plots and this run is written in "
                          "its place (a re-run of the same name). Pass resume='allow' to "
                          "continue it instead, or give another run name to keep it",
                          UserWarning, stacklevel=2)
            found = False
        #: Whether an earlier run was continued; the largest step it held (``None``: none).
        self.resumed = found
        self.last_step = last_step(self._folder) if found else None
        self._live = _compat.local_live(dir=str(self._folder), resume=found, report=None,
                                        save_dvc_exp=False, dvcyaml=None, monitor_system=False)
        if run.config:
            self._live.log_params(dict(run.config))
        self._status = status_of(self._folder)
        self._status.running()
        self._conflicts: set[str] = set()

    @hookimpl
    def monitor_write(self, events: Sequence[Event]) -> None:
        """``Live.step = event.step``, then ``Live.log_metric(tag, value)``, per event."""
        live = self._live
        for event in events:
            live.step = event.step
            name = metric_name(event.tag)
            try:
                live.log_metric(name, event.value)
            except (AttributeError, TypeError):
                # The row is in its TSV file; only DVCLive's summary (metrics.json, nested at
                # "/") cannot hold both "a" and "a/b": DVCLive fails after writing the row.
                self._report_conflict(event.tag)

    @hookimpl
    def monitor_config(self, config: Mapping[str, Any]) -> None:
        """Merge late config into ``params.yaml``; a key given again takes the new value."""
        self._live.log_params(dict(config))

    @hookimpl
    def monitor_flush(self) -> None:
        """Rewrite ``metrics.json`` (the rows are in their TSV files already)."""
        self._live.make_summary()

    @hookimpl
    def monitor_crash(self, reason: str) -> None:
        """Mark the run ``crashed: <reason>`` in its ``status`` file."""
        self._status.crashed(reason)  # close keeps the mark

    @hookimpl
    def monitor_close(self) -> None:
        """Write ``metrics.json`` and mark the run ``finished`` (unless it crashed), as
        ``Live.end()`` would write it with ``save_dvc_exp=False`` and ``dvcyaml=None``
        (``end()`` itself also looks for DVC's signal files around the current folder).
       """
        self._live.make_summary()
        self._status.finished()

    def _report_conflict(self, tag: str) -> None:
        if tag in self._conflicts:
            return
        self._conflicts.add(tag)
        warnings.warn(f"dvclive: tag {tag!r} is stored in its TSV file but not in "
                      "metrics.json: DVCLive's summary nests tags at '/' and another tag is a "
                      "prefix of it (e.g. 'a' and 'a/b'); rename one to keep both in the summary",
                      RuntimeWarning, stacklevel=2)


if TYPE_CHECKING:  # a type checker proves the class has the shape core-monitor expects
    _shape: type[Backend] = DvcliveMonitor
