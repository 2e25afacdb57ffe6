"""Images, histograms and text in TensorBoard event files, written and read without TensorFlow.

TensorBoard's ``tensorboard.summary.v2`` image and histogram ops need TensorFlow, so the plugin
builds the protobufs the Images, Histograms and Text dashboards read:

* image: ``Summary.Value(image=Summary.Image(height, width, colorspace, encoded_image_string))``
  with the pixels as PNG (Pillow, a TensorBoard dependency); colorspace 1 (grey), 3 (RGB) or
  4 (RGBA). TensorBoard has no image captions: a caption is not stored.
* histogram: ``Summary.Value(histo=HistogramProto(...))``: ``bucket_limit`` holds each bin's
  right edge, ``min``/``max`` the outer edges (TensorBoard's legacy histogram format, which its
  Histograms and Distributions dashboards read).
* text: ``tensorboard.plugins.text.summary_v2.text_pb`` (a string tensor for the Text tab,
  which renders Markdown).

Each value is one ``Event`` at the caller's step and the ``log`` call's wall time.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, MediaItem, Text

from . import _compat

#: What this plugin stores: every media kind the core knows.
MEDIA_KINDS = frozenset({"image", "histogram", "text"})
#: ``EventAccumulator`` keeps 4 images and 1 histogram per tag by default: keep all (0).
SIZE_GUIDANCE = {"scalars": 0, "images": 0, "histograms": 0, "tensors": 0}


def write_media(add_event: Callable[[Any], None], items: Sequence[MediaItem]) -> None:
    """Encode each item (PNG, histogram protobuf, text tensor) and hand one ``Event`` per item
    to ``add_event`` (the run's ``EventFileWriter.add_event``)."""
    sdk = _compat.sdk()
    for item in items:
        value = item.value
        if isinstance(value, Image):
            summary = sdk.Summary(value=[sdk.Summary.Value(tag=item.tag, image=_image(sdk, value))])
        elif isinstance(value, Histogram):
            summary = sdk.Summary(value=[sdk.Summary.Value(tag=item.tag,
                                                           histo=_histogram(sdk, value))])
        else:
            summary = sdk.text_pb(item.tag, value.text)
        add_event(sdk.Event(wall_time=item.wall_time, step=item.step, summary=summary))


def _image(sdk: Any, image: Image) -> Any:
    from PIL import Image as PILImage

    pixels = image.array
    height, width, channels = pixels.shape
    picture = PILImage.fromarray(pixels[:, :, 0] if channels == 1 else pixels)
    png = io.BytesIO()
    picture.save(png, format="PNG")
    return sdk.Summary.Image(height=height, width=width, colorspace=channels,
                             encoded_image_string=png.getvalue())


def _histogram(sdk: Any, histogram: Histogram) -> Any:
    counts, edges = histogram.binned()
    if histogram.values is not None:
        total, squares = float(histogram.values.sum()), float((histogram.values ** 2).sum())
    else:  # ready-made bins: each count at its bin's centre
        centres = (edges[:-1] + edges[1:]) / 2
        total, squares = float((centres * counts).sum()), float((centres**2 * counts).sum())
    return sdk.HistogramProto(
        min=float(edges[0]), max=float(edges[-1]), num=float(counts.sum()), sum=total,
        sum_squares=squares, bucket_limit=edges[1:].tolist(), bucket=counts.tolist(),
    )


def read_media(run: RunInfo, *, run_dir: str | os.PathLike[str] | None = None,
               ) -> list[tuple[str, int, Image | Histogram | Text]]:
    """Read a run's images, histograms and text back with TensorBoard's ``EventAccumulator``.

    Every value is returned (``size_guidance`` 0 for images, histograms and tensors). Order:
    images, then histograms, then text; within a kind tags in order of first appearance, each
    tag's values in file order.

    Args:
        run: as for ``read_rows`` (``Monitor.run``).
        run_dir: as for ``read_rows``: the run's exact folder (the ``run_dir`` option).

    Returns:
        ``[(tag, step, value), ...]``: ``value`` an ``Image`` (``array``: the PNG decoded, a
        ``uint8`` array ``(H, W, C)``; no caption), a ``Histogram`` (``edges``, ``counts``:
        float64 arrays) or a ``Text`` (``text``: exact).

    Raises:
        FileNotFoundError: the run has no folder.
    """
    import numpy as np
    from PIL import Image as PILImage

    from .reader import _accumulator

    sdk = _compat.sdk()
    accumulator = _accumulator(run, SIZE_GUIDANCE, run_dir)
    tags = accumulator.Tags()
    found: list[tuple[str, int, Image | Histogram | Text]] = []
    for tag in tags["images"]:
        for event in accumulator.Images(tag):
            pixels = np.asarray(PILImage.open(io.BytesIO(event.encoded_image_string)))
            found.append((tag, int(event.step), Image(pixels.reshape(*pixels.shape[:2], -1))))
    for tag in tags["histograms"]:
        for event in accumulator.Histograms(tag):
            value = event.histogram_value
            edges = np.asarray([value.min, *value.bucket_limit], np.float64)
            found.append((tag, int(event.step),
                          Histogram(edges=edges, counts=np.asarray(value.bucket, np.float64))))
    for tag in tags["tensors"]:
        if accumulator.SummaryMetadata(tag).plugin_data.plugin_name != sdk.text_plugin:
            continue
        for event in accumulator.Tensors(tag):
            text = event.tensor_proto.string_val[0].decode("utf-8")
            found.append((tag, int(event.step), Text(text)))
    return found
