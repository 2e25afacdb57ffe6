"""Images, histograms and text in TensorBoard event files, written without TensorFlow
(``reader.read_media`` reads them back).

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
from collections.abc import Callable, Sequence
from typing import Any

from core_monitor.media import Histogram, Image, MediaItem

from . import _compat


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
