"""Images, histograms and text in a wandb run's history (``reader.read_media`` reads them back).

One history row per run of items sharing a step, holding the step metric (the caller's step)
and ``_timestamp``, as for scalars:

* image: ``wandb.Image(pixels, caption=)`` (needs Pillow, a dependency of this plugin); wandb
  writes the PNG under the run's ``files/media/images/`` and a reference in the row.
* histogram: ``wandb.Histogram(np_histogram=(counts, edges))``, the core's bins (512 at most,
  wandb's limit), stored in the row.
* text: the ``str`` itself in the row (wandb has no Markdown type).

Tags get the same ``ESCAPE`` prefix as scalars where wandb reserves them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core_monitor.media import Histogram, Image, MediaItem

from .storage import escaped


def write_media(log: Callable[[dict[str, Any]], None], step_metric: str,
                items: Sequence[MediaItem]) -> None:
    """``log(row)`` (the run's ``Run.log``, no ``step=``) per run of items sharing a step, each
    value as wandb's type under its ``storage.escaped`` tag, plus ``step_metric`` and
    ``_timestamp``."""
    import wandb

    row: dict[str, Any] = {}
    for index, item in enumerate(items):
        value = item.value
        key = escaped(item.tag, step_metric)
        if isinstance(value, Image):
            pixels = value.array
            row[key] = wandb.Image(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels,
                                   caption=value.caption)
        elif isinstance(value, Histogram):
            row[key] = wandb.Histogram(np_histogram=value.binned())
        else:
            row[key] = value.text
        following = items[index + 1] if index + 1 < len(items) else None
        if (following is None or following.step != item.step
                or escaped(following.tag, step_metric) in row):
            row[step_metric] = item.step
            row["_timestamp"] = item.wall_time
            log(row)
            row = {}
