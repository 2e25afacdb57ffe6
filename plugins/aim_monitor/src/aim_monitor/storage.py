"""Where and how a run is stored in an Aim repository. Imports no SDK.

* Repository: the ``repo`` option, else ``<log_dir>/aim`` (Aim keeps its data in
  ``<log_dir>/aim/.aim``), else Aim's own default (``.aim`` in the current directory, or
  ``AIM_REPO`` read by Aim's CLI only: the SDK's default is the current directory).
* Run: Aim ``experiment`` = the ``experiment`` option (default: the project), Aim run ``name`` =
  ``RunInfo.ranked_name`` (``<name>-rank<k>`` on a rank k > 0). A run is found again (resume,
  the readers) as the newest run of that experiment and name.
* Scalars: ``run.track(value, name=<tag>, step=<step>, context=...)``, one Aim metric per tag.
  Aim keys a sequence's points by step: a second value at a step already stored would replace
  the first, and points read back sorted by step. So every tag's points are kept in
  *segments*, each of strictly increasing steps: a point goes to the first segment whose last
  step is below its step, else it starts the next segment. Segment 0 is the empty context
  (what ``run.track`` without context writes: a run whose steps only grow is a plain Aim run);
  segment ``n >= 1`` is the context ``{"segment": n}``, which Aim's UI shows as a line of its
  own. A tag logged twice at some steps (Lightning's ``epoch``, logged again with each
  validation) is two lines however often it repeats; a run resumed from an earlier checkpoint
  is its first line going on past the old last step, and a second line with the steps it
  repeated. The readers merge a tag's segments by the time Aim stored with each point (one
  writer tracks them one after another), so every point comes back in the order logged.
* Media: the same, with ``aim.Image`` (PNG), ``aim.Distribution`` and ``aim.Text`` sequences.
* Config: the run param ``hparams`` (where Aim's UI shows hyperparameters), keys as the core
  flattened them (``"optimizer.lr"``).
* Group: with ``rank_zero_only=False`` every rank's run holds the job's run group
  (``RunInfo.group``) as the run param ``job`` = ``{"group": <group>}``: ``run.job.group`` in
  Aim's queries (``run.job.group == "<name>"``) and in its explorers' "Group by". Aim runs have
  no group of their own; the experiment stays the project's.
* Crash: the run param ``core_monitor_crash`` (the reason), the run tag ``crashed`` and an
  error record in the run's logs (``run.log_error``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core_monitor import RunInfo

#: The run param holding the hyperparameters (Aim's convention, shown in its UI's params).
HPARAMS = "hparams"
#: The context key of a segment after the first (see the module docstring).
SEGMENT_KEY = "segment"
#: The run param, and its key, holding the job's run group (``RunInfo.group``): Aim's
#: ``run.job.group``.
GROUP_PARAM, GROUP_KEY = "job", "group"
#: The run param holding why the run ended by a crash.
CRASH_KEY = "core_monitor_crash"
#: The run tag added to a run that ended by a crash.
CRASH_TAG = "crashed"
#: The run param holding, per histogram tag and ``"<segment>:<step>"``, the bin edges of a
#: histogram whose bins are not of equal width (``aim.Distribution`` keeps only the range).
EDGES_KEY = "core_monitor_histogram_edges"
#: The folder under ``log_dir`` holding the Aim repository.
REPO_DIR = "aim"


def repo_path(run: RunInfo, repo: str | None = None) -> str | None:
    """The Aim repository a run is written to: ``repo`` when given, else ``<log_dir>/aim``,
    else ``None`` (Aim's default: the current directory)."""
    if repo is not None:
        return repo
    if run.log_dir is not None:
        return str(Path(run.log_dir) / REPO_DIR)
    return None


#: How an Aim remote tracking server (``aim server``) is named as a repository.
REMOTE_PREFIX = "aim://"


def is_remote(repo: str | None) -> bool:
    """Whether ``repo`` names an Aim remote tracking server (``aim://host:port``), whose
    repository is the server's folder, not one of this machine."""
    return repo is not None and repo.startswith(REMOTE_PREFIX)


def context_of(segment: int) -> dict[str, int]:
    """The Aim context of a segment: ``{}`` for segment 0, else ``{"segment": n}``."""
    return {} if segment == 0 else {SEGMENT_KEY: segment}


def segment_of(context: Mapping[str, Any]) -> int | None:
    """The segment a stored context stands for; ``None`` for a context this plugin never
    writes (a sequence the user tracked with a context of their own)."""
    if not context:
        return 0
    value = context.get(SEGMENT_KEY)
    if len(context) == 1 and type(value) is int and value >= 1:
        return value
    return None


class Segments:
    """The segment each new point of a tag goes to (see the module docstring).

    ``place(tag, step)`` returns the segment of the next point of ``tag`` at ``step`` and
    records it; ``resume(tag, segment, last_step)`` starts from what a continued run holds.
    """

    def __init__(self) -> None:
        self._last: dict[str, list[int]] = {}  # tag -> the last step of each of its segments

    def resume(self, tag: str, segment: int, last_step: int) -> None:
        lasts = self._last.setdefault(tag, [])
        while len(lasts) <= segment:
            lasts.append(-1)  # a segment the continued run has no point in yet
        lasts[segment] = max(lasts[segment], last_step)

    def place(self, tag: str, step: int) -> int:
        lasts = self._last.setdefault(tag, [])
        for segment, last in enumerate(lasts):
            if last < step:
                lasts[segment] = step
                return segment
        lasts.append(step)
        return len(lasts) - 1
