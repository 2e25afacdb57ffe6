"""Reading a run back through Aim's own reader, ``aim.Repo`` (scalars, config, media, the crash
mark); the reader ``monitors copy`` uses (entry-point group ``experiment_monitor_readers``).

Each call first brings the repository's index up to date (``_compat.index_runs``, what ``aim
up`` does), then opens the repository read-only and finds the run: the newest run of the
experiment (default: the project) named ``RunInfo.ranked_name``. Points of a tag come back in
the order logged: its segments merged by the time Aim stored with each point (``storage``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, Text

from . import _compat
from .storage import (
    CRASH_KEY,
    EDGES_KEY,
    GROUP_KEY,
    GROUP_PARAM,
    HPARAMS,
    repo_path,
    segment_of,
)

__all__ = ["find_run", "last_steps", "read_config", "read_crash", "read_group", "read_media",
           "read_rows"]

#: Aim's sequence types of the media this plugin stores, and the ``read_media`` value of each.
MEDIA_DTYPES = ("aim.image", "aim.distribution", "aim.text")


@contextmanager
def find_run(run: RunInfo, *, repo: str | None = None,
             experiment: str | None = None) -> Iterator[Any]:
    """Open the Aim run ``run`` was written to, read-only, for the ``with`` block.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``).
        repo: the repository, as the backend's ``repo`` option (default ``<log_dir>/aim``).
        experiment: as the backend's ``experiment`` option (default: ``run.project``).

    Yields:
        The ``aim.Run`` (read-only).

    Raises:
        LookupError: no repository there, or no run of that experiment and name in it.
    """
    from aim import Repo

    path = repo_path(run, repo) or "."
    if not Path(path, ".aim").is_dir():
        raise LookupError(f"no Aim repository at {path!r} (no {path}/.aim folder)")
    _compat.index_runs(path)
    wanted_experiment = experiment or run.project
    opened = Repo(path)
    try:
        runs = [found for found in opened.iter_runs()
                if found.name == run.ranked_name and found.experiment == wanted_experiment]
        if not runs:
            raise LookupError(f"no Aim run named {run.ranked_name!r} in experiment "
                              f"{wanted_experiment!r} of the repository {path!r}")
        yield max(runs, key=lambda found: found.creation_time)
    finally:
        opened.close()


def _segments(aim_run: Any, dtypes: tuple[str, ...]) -> list[tuple[str, int, Any, str]]:
    """``(name, segment, context, dtype)`` of every sequence of ``dtypes`` this plugin wrote,
    by name then segment."""
    found = []
    for dtype in dtypes:
        for name, context, _ in aim_run.iter_sequence_info_by_type(dtype):
            segment = segment_of(context.to_dict())
            if segment is not None:
                found.append((name, segment, context, dtype))
    return sorted(set(found), key=lambda entry: (entry[0], entry[1], entry[3]))


def last_steps(aim_run: Any) -> list[tuple[str, int, int, bool]]:
    """``(name, segment, last step, is a scalar)`` of every non-empty sequence this plugin
    wrote in ``aim_run`` (an ``aim.Run`` from ``find_run``): where a resumed run goes on."""
    found = []
    getters = {"float": aim_run.get_metric, "aim.image": aim_run.get_image_sequence,
               "aim.distribution": aim_run.get_distribution_sequence,
               "aim.text": aim_run.get_text_sequence}
    for name, segment, context, dtype in _segments(aim_run, ("float", *MEDIA_DTYPES)):
        steps = getters[dtype](name, context).data.items_list()[0]
        if len(steps):
            found.append((name, segment, int(max(steps)), dtype == "float"))
    return found


def read_rows(run: RunInfo, *, repo: str | None = None,
              experiment: str | None = None) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)``: each tag's points in the order logged,
    tags by name. Sequences the user tracked with a context of their own are left out.

    Args, Raises: as ``find_run``.
    """
    timed: list[tuple[str, float, int, tuple[str, int, float]]] = []
    with find_run(run, repo=repo, experiment=experiment) as aim_run:
        for name, segment, context, _ in _segments(aim_run, ("float",)):
            steps, (values, _, times) = aim_run.get_metric(name, context).data.items_list()
            timed.extend((name, time, segment, (name, int(step), float(value)))
                         for step, value, time in zip(steps, values, times, strict=True))
    return [row for *_, row in sorted(timed, key=_logged_order)]


def _logged_order(point: tuple[Any, ...]) -> tuple[str, float, int]:
    """Sort key of ``(tag, stored time, segment, ...)``: by tag, then as logged (the storage
    docstring)."""
    return point[0], point[1], point[2]


def read_config(run: RunInfo, *, repo: str | None = None,
                experiment: str | None = None) -> dict[str, Any]:
    """The run param ``hparams`` (``{}`` when none). Args, Raises: as ``find_run``."""
    with find_run(run, repo=repo, experiment=experiment) as aim_run:
        return dict(aim_run.get(HPARAMS, None) or {})


def read_crash(run: RunInfo, *, repo: str | None = None,
               experiment: str | None = None) -> str | None:
    """Why the run ended by a crash (the run param ``core_monitor_crash``); ``None`` when it did
    not. Args, Raises: as ``find_run``."""
    with find_run(run, repo=repo, experiment=experiment) as aim_run:
        reason = aim_run.get(CRASH_KEY, None)
        return None if reason is None else str(reason)


def read_group(run: RunInfo, *, repo: str | None = None,
               experiment: str | None = None) -> str | None:
    """The job's run group the run holds (the run param ``job.group``, written with
    ``rank_zero_only=False``); ``None`` when it holds none. Args, Raises: as ``find_run``."""
    with find_run(run, repo=repo, experiment=experiment) as aim_run:
        group = aim_run.get((GROUP_PARAM, GROUP_KEY), None)
        return None if group is None else str(group)


def read_media(run: RunInfo, *, repo: str | None = None,
               experiment: str | None = None) -> list[tuple[str, int, Image | Histogram | Text]]:
    """The run's images, histograms and text as ``(tag, step, value)``, each tag's in the order
    logged, tags by name.

    ``Image.array``: the stored PNG decoded, ``uint8`` ``(H, W, C)``, with its caption (``None``
    when empty). ``Histogram``: counts and edges (equal-width edges over the stored range, or
    the edges kept under ``core_monitor_histogram_edges``). ``Text``: exact.

    Args, Raises: as ``find_run``.
    """
    import numpy as np

    timed: list[tuple[str, float, int, tuple[str, int, Image | Histogram | Text]]] = []
    with find_run(run, repo=repo, experiment=experiment) as aim_run:
        edges_of = aim_run.get(EDGES_KEY, None) or {}
        for name, segment, context, sequence in _segments(aim_run, MEDIA_DTYPES):
            getter = {"aim.image": aim_run.get_image_sequence,
                      "aim.distribution": aim_run.get_distribution_sequence,
                      "aim.text": aim_run.get_text_sequence}[sequence]
            steps, (values, _, times) = getter(name, context).data.items_list()
            for step, value, time in zip(steps, values, times, strict=True):
                item: Image | Histogram | Text
                if sequence == "aim.image":
                    pixels = np.asarray(value.to_pil_image())
                    item = Image(pixels.reshape(*pixels.shape[:2], -1),
                                 caption=value.caption or None)
                elif sequence == "aim.text":
                    item = Text(value.data)
                else:
                    counts, edges = value.to_np_histogram()
                    kept = edges_of.get(name, {}).get(f"{segment}:{int(step)}")
                    item = Histogram(
                        edges=np.asarray(kept if kept is not None else edges, np.float64),
                        counts=np.asarray(counts))
                timed.append((name, time, segment, (name, int(step), item)))
    return [entry for *_, entry in sorted(timed, key=_logged_order)]
