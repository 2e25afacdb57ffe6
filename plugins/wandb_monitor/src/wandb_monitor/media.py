"""Images, histograms and text in a wandb run's history, and their read-back.

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

import json
from collections.abc import Callable, Sequence
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, MediaItem, Text

#: What this plugin stores: every media kind the core knows.
MEDIA_KINDS = frozenset({"image", "histogram", "text"})


def write_media(log: Callable[[dict[str, Any]], None], step_metric: str,
                escape: Callable[[str], str], items: Sequence[MediaItem]) -> None:
    """``log(row)`` (the run's ``Run.log``, no ``step=``) per run of items sharing a step, each
    value as wandb's type, ``escape(tag)`` as the key, plus ``step_metric`` and ``_timestamp``."""
    import wandb

    row: dict[str, Any] = {}
    for index, item in enumerate(items):
        value = item.value
        if isinstance(value, Image):
            pixels = value.array
            row[escape(item.tag)] = wandb.Image(
                pixels[:, :, 0] if pixels.shape[2] == 1 else pixels, caption=value.caption)
        elif isinstance(value, Histogram):
            row[escape(item.tag)] = wandb.Histogram(np_histogram=value.binned())
        else:
            row[escape(item.tag)] = value.text
        following = items[index + 1] if index + 1 < len(items) else None
        if following is None or following.step != item.step or escape(following.tag) in row:
            row[step_metric] = item.step
            row["_timestamp"] = item.wall_time
            log(row)
            row = {}


def read_media(run: RunInfo) -> list[tuple[str, int, Image | Histogram | Text]]:
    """Read a run's images, histograms and text back from its ``.wandb`` log and media files.

    Args:
        run: as for ``read_rows`` (``Monitor.run``); readable once the monitor is closed.

    Returns:
        ``[(tag, step, value), ...]`` in storage order (within a row in wandb's key order):
        ``value`` an ``Image`` (``array``: the PNG under the run's ``files/`` decoded,
        ``uint8`` ``(H, W, C)``; ``caption``), a ``Histogram`` (``edges``, ``counts``) or a
        ``Text`` (every ``str`` value of a row). ``[]`` when there is no such run.

    Raises:
        ValueError: as ``read_rows``.
        FileNotFoundError: an image row names a file that is not there.
    """
    import numpy as np
    from PIL import Image as PILImage

    from .reader import history

    found: list[tuple[str, int, Image | Histogram | Text]] = []
    for step, points, folder in history(run):
        for tag, stored in points:
            value = json.loads(stored) if isinstance(stored, str) else stored
            kind = value.get("_type") if isinstance(value, dict) else None
            if isinstance(value, str) and value not in ("NaN", "Infinity", "-Infinity"):
                found.append((tag, step, Text(value)))
            elif kind == "image-file":
                with PILImage.open(folder / "files" / value["path"]) as picture:
                    pixels = np.asarray(picture)
                found.append((tag, step, Image(pixels.reshape(*pixels.shape[:2], -1),
                                               caption=value.get("caption"))))
            elif kind == "histogram":
                found.append((tag, step, Histogram(edges=np.asarray(value["bins"], np.float64),
                                                   counts=np.asarray(value["values"],
                                                                     np.float64))))
    return found
