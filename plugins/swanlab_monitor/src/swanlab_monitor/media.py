"""Media as SwanLab stores them: ``core_monitor.media`` values to ``swanlab.Image``/
``swanlab.Text`` and back from the run's ``media/`` folder.

An image is ``swanlab.Image(pixels, caption=..., file_type="png")``: a PNG in
``media/image/``, lossless, unresized (SwanLab resizes only when given ``size``), grey as
``(H, W)``. A text is ``swanlab.Text(text)``: a UTF-8 file in ``media/text/``. Each media record
(key, step, file name, caption) is read from the run's record file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core_monitor.media import Histogram, Image, Text

#: The kinds stored; histograms are not (SwanLab logs none from a ``(counts, edges)`` pair).
KINDS = frozenset({"image", "text"})
#: SwanLab's media column types, by ``core_monitor`` kind.
_FOLDERS = {"COLUMN_TYPE_IMAGE": "image", "COLUMN_TYPE_TEXT": "text"}


def to_swanlab(value: Image | Histogram | Text) -> Any:
    """The ``swanlab.Image``/``swanlab.Text`` for a validated ``core_monitor`` value.

    Raises:
        TypeError: a ``Histogram`` (not in ``KINDS``: the core never sends one).
    """
    import swanlab

    if isinstance(value, Histogram):
        raise TypeError("swanlab: histograms are not stored (not in media_kinds)")
    if isinstance(value, Text):
        return swanlab.Text(value.text)
    pixels = value.array
    if pixels.shape[2] == 1:  # PIL takes grey as (H, W)
        pixels = pixels[:, :, 0]
    return swanlab.Image(pixels, caption=value.caption, file_type="png")


def from_record(record: Any, run_dir: Path) -> Image | Text | None:
    """The value of a SwanLab ``MediaRecord`` of an image or a text (its first item), read
    from ``run_dir``; ``None`` for another media type."""
    kind = type(record).DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number[
        record.type].name
    folder = _FOLDERS.get(kind)
    if folder is None or not record.value.items:
        return None
    item = record.value.items[0]
    path = run_dir / "media" / folder / item.filename
    if folder == "text":
        return Text(path.read_text(encoding="utf-8"))
    import numpy as np
    from PIL import Image as PILImage  # swanlab[media]; here: importing the plugin imports no SDK

    with PILImage.open(path) as image:
        pixels = np.asarray(image)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return Image(pixels, caption=item.caption or None)
