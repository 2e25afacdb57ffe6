"""Images, histograms and text as Trackio's own media types (``reader.read_media`` reads them
back).

Written through ``Run.log`` as ``trackio.Image`` (a PNG file under
``<trackio dir>/media/<project>/<run>/<step>/``, RGBA, with the caption), ``trackio.Histogram``
(``np_histogram=(counts, edges)``: the bins the core's ``Histogram.binned`` made) and
``trackio.Markdown`` (the text), one metrics row per step, so the dashboard shows each at the
caller's step. Trackio applies its tag renames (``RESERVED_TAGS``) to media tags as to scalars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core_monitor.media import Histogram, Image, MediaItem

from . import _compat


def write_media(run: Any, items: Sequence[MediaItem]) -> None:
    """``run.log(row, step=step)`` (a ``trackio.Run``) per run of items sharing a step, each
    value converted to Trackio's type; Trackio writes image files during the call.

    Raises:
        RuntimeError: ``run`` is ``None`` (the backend was closed).
    """
    if run is None:
        raise RuntimeError("trackio: monitor_write_media after monitor_close")
    image, histogram, markdown = _compat.media_types()
    log = run.log
    row: dict[str, Any] = {}
    step = 0  # set by the first item, before any row is logged
    for item in items:
        if row and (item.step != step or item.tag in row):
            _compat.log_renaming(log, row, step)
            row = {}
        step = item.step
        value = item.value
        if isinstance(value, Image):
            pixels = value.array
            row[item.tag] = image(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels,
                                  caption=value.caption)
        elif isinstance(value, Histogram):
            row[item.tag] = histogram(np_histogram=value.binned())
        else:
            row[item.tag] = markdown(value.text)
    if row:
        _compat.log_renaming(log, row, step)
