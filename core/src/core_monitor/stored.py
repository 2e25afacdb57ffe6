"""What a backend's storage already holds of the calls past its cursor in a run's journal.

A backend's cursor (``core_monitor.journal``) moves only after its tracker confirmed (a flush or
close that returned): the calls after it, up to the moment its writer was killed, may be stored
already. Before they are delivered again, by ``monitors sync``, by ``Monitor(resume="allow")``
or by a writer started again at the cursor, the backend's storage is read with its reader
(``core_monitor.readers``, the one ``monitors copy`` uses) and the calls it holds are not
handed over again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import journal
from .events import Batch
from .journal import CLOSE, START
from .readers import load_reader
from .run import RunInfo


def already_stored(folder: Path, name: str, run: RunInfo, options: Mapping[str, Any],
                   cursor: int) -> tuple[set[int], dict[int, Counter[tuple[str, int]]]]:
    """What backend ``name`` already stored of the calls past ``cursor``: the window between
    its last confirmed flush and the end of the writer that stored them (the job was killed
    before the next flush). Read with the backend's reader (``core_monitor.readers``): the
    ``(tag, step)`` points it holds, less those of the calls before the cursor, are matched to
    the calls of the window in order; the first call not wholly stored ends the match (a
    writer stores its calls in order). A writer killed inside that call (Aim and DVCLive store
    a call tag by tag) may have stored some of its points: those are returned too, so that only
    the rest of that call is delivered. Only scalar calls (``monitor_write``) are matched; the
    others in that stretch are delivered again (a config update is idempotent; media: at least
    once).

    Returns:
        ``(the seqs of the calls wholly stored, {seq: the points already stored} for the call
        stored in part, if any)``. Both empty (everything past the cursor is delivered: at
        least once) when the backend has no reader, its reader fails, or the journal no longer
        holds its first segment (the points before the cursor cannot be counted then).
    """
    segments = journal.segment_paths(folder)
    if not segments or journal.first_seq(segments[0]) != 0:
        return set(), {}
    window: list[tuple[int, Counter[tuple[str, int]] | None]] = []
    for seq, hook, kwargs in journal.calls(folder, cursor):
        if hook == "monitor_write":
            window.append((seq, points_of(kwargs)))
        elif hook not in (START, CLOSE):
            window.append((seq, None))
    wanted = {key for _, points in window if points for key in points}
    if not wanted:
        return set(), {}
    try:
        reader = load_reader(name)
        rows = reader.read_rows(run, **reader.options_for(reader.read_rows, options))
    except Exception:
        return set(), {}
    stored: Counter[tuple[str, int]] = Counter(
        (tag, step) for tag, step, _ in rows if (tag, step) in wanted)
    for seq, hook, kwargs in journal.calls(folder):
        if seq >= cursor:
            break
        if hook == "monitor_write":
            stored.subtract(key for key in points_of(kwargs).elements() if key in wanted)
    skip: set[int] = set()
    for seq, points in window:
        if points is None:
            continue
        if any(stored[key] < count for key, count in points.items()):
            part = Counter({key: min(stored[key], count) for key, count in points.items()
                            if stored[key] > 0})
            return skip, ({seq: part} if part else {})
        stored.subtract(points)
        skip.add(seq)
    return skip, {}


def without(events: Batch, held: Counter[tuple[str, int]]) -> Batch:
    """``events`` less the ``(tag, step)`` points of ``held`` (each as often as counted)."""
    left = held.copy()
    rows = []
    for step, wall_time, row in events.rows:
        kept = {}
        for tag, value in row.items():
            if left[(tag, step)] > 0:
                left[(tag, step)] -= 1
            else:
                kept[tag] = value
        if kept:
            rows.append((step, wall_time, kept))
    return Batch(tuple(rows))


def points_of(kwargs: Mapping[str, Any]) -> Counter[tuple[str, int]]:
    """The ``(tag, step)`` points of a ``monitor_write`` call."""
    return Counter((tag, step) for step, _, values in kwargs["events"].rows for tag in values)
