"""Where and how a run is stored in a ClearML offline session (no SDK import here).

A task's offline session is the folder ``<cache>/offline/<task id>/`` (ClearML's own layout):
``task.json`` (project, name, tags, hyperparameters), ``metrics.jsonl`` (each line a JSON list
of events; a scalar is ``{"type": "training_stats_scalar", "iter": step, "metric": title,
"variant": series, "value": value}``) and ``log.jsonl`` (console and ``report_text`` lines,
each with its ``level``). ``<cache>`` is ClearML's cache folder, ``CLEARML_CACHE_DIR``, which
this plugin sets to ``<log_dir>/clearml`` for the ``Task.init`` of a run unless the variable is
set already.

Media, each at ``(title, series, iteration)`` = ``(title_of(tag), tag, step)`` like a scalar:

* an image or a text is a *debug sample* (``Logger.report_media``): the file under
  ``<session>/data/<key>`` (``<project>/<task name>.<task id>/metrics/<title>/<series>/<title>_
  <series>_<n>.<ext>``, ClearML's offline upload folder) and in ``metrics.jsonl`` the event
  ``{"type": "training_debug_image", "iter": step, "metric": title, "variant": series, "key":
  key, "url": <the file's path when written>}``. An image is a PNG (``IMAGE_EXTENSION``; its
  caption, which ClearML's debug samples have no field for, in the PNG text chunk
  ``CAPTION_CHUNK``), a text its UTF-8 bytes (``TEXT_EXTENSION``).
* a histogram is a *plot* (``Logger.report_histogram``): the event ``{"type": "plot", "iter":
  step, "metric": title, "variant": series, "plot_str": <plotly JSON>}``, one bar trace whose
  ``y`` are the counts, ``x`` the bin centres, ``width`` the bin widths and ``customdata`` each
  bin's exact ``[left edge, right edge]`` (``HISTOGRAM_EDGES``), which the reader reads back.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from core_monitor import RunInfo

#: The hyperparameter section the config is stored in (ClearML's default for ``connect``).
SECTION = "General"
#: The start of the task tag naming the job's run group (``RunInfo.group``) when every rank
#: writes a task of its own: ``job.group: <group>``, after ClearML's own ``pipe: <id>`` tag
#: on a pipeline's steps. ClearML tasks have no group field; its UI filters a project's tasks
#: by tag.
GROUP_TAG_PREFIX = "job.group: "
#: The start of the ``log.jsonl`` error line ``monitor_crash`` writes (the reason follows).
CRASH_PREFIX = "core-monitor crash: "
#: The task tag ``monitor_crash`` adds.
CRASH_TAG = "crashed"

#: ``metrics.jsonl`` event types: a scalar, a debug sample (image, text), a plot (histogram).
SCALAR_EVENT = "training_stats_scalar"
SAMPLE_EVENT = "training_debug_image"
PLOT_EVENT = "plot"
#: The file extension of an image's debug sample (PNG: lossless, unlike ClearML's default
#: JPEG for ``report_image(image=array)``) and of a text's.
IMAGE_EXTENSION = ".png"
TEXT_EXTENSION = ".txt"
#: The PNG text chunk an image's caption is kept in.
CAPTION_CHUNK = "Description"
#: The plotly bar attribute holding each bin's exact ``[left, right]`` edges.
HISTOGRAM_EDGES = "customdata"
#: Where ClearML puts an offline session's uploaded files (its ``report_offline_session`` reads
#: ``<session>/data/<key>`` back the same way).
DATA_FOLDER = "data"


def title_of(tag: str) -> str:
    """The ClearML plot title of ``tag``: the tag up to its last ``/`` (the whole tag without
    one), so ``train/loss`` and ``train/acc`` share the plot ``train``; the series is the whole
    tag, which gives the tag back exactly."""
    return tag.rpartition("/")[0] or tag


def with_group_tag(tags: Sequence[str], group: str | None) -> list[str]:
    """``tags`` and the tag ``job.group: <group>`` (``GROUP_TAG_PREFIX``), unless ``group`` is
    ``None`` or ``tags`` has a ``job.group:`` tag of the user's already (theirs wins)."""
    if group is None or any(tag.startswith(GROUP_TAG_PREFIX.rstrip()) for tag in tags):
        return list(tags)
    return [*tags, GROUP_TAG_PREFIX + group]


def cache_dir(run: RunInfo) -> Path | None:
    """The cache folder the run's session is in: ``CLEARML_CACHE_DIR`` when set, else
    ``<log_dir>/clearml``, else ``None`` (ClearML's default, ``~/.clearml/cache``)."""
    given = os.environ.get("CLEARML_CACHE_DIR")
    if given:
        return Path(os.path.expandvars(os.path.expanduser(given)))
    if run.log_dir is not None:
        return Path(run.log_dir) / "clearml"
    return None
