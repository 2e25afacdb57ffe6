"""Images and text as Comet stores them (``reader.read_media`` reads them back). Imports no
comet_ml; Pillow is imported when the first image is written.

* image: ``Experiment.log_image(<PIL image>, name=<tag>, step=<step>, image_format="png")``,
  a lossless PNG (grey as 8-bit grey, RGB, RGBA with its alpha) in Comet's image panel, the
  caption in the upload's metadata (Comet's images have no caption of their own).
* text: ``Experiment.log_text(text, step=<step>, metadata={"tag": <tag>})``, a Comet text
  sample (Comet's text samples have no name: the tag is in their metadata).

Comet's histograms (``log_histogram_3d``) re-bin the values into Comet's own fixed buckets, so
they could not keep the caller's bins: ``MEDIA_KINDS`` leaves them out and the core reports a
``Histogram`` logged to this backend as skipped (one ``BackendWarning``).
"""

from __future__ import annotations

from typing import Any

from core_monitor.media import Image, MediaItem, Text

from .storage import CAPTION_KEY, TAG_KEY

#: What this plugin stores.
MEDIA_KINDS = frozenset({"image", "text"})


def write(experiment: Any, item: MediaItem) -> None:
    """Log one image or text of ``item`` into ``experiment`` (a ``comet_ml`` experiment) at
    ``item.step``.

    Raises:
        TypeError: ``item`` is a histogram (the core never sends one: ``MEDIA_KINDS``).
    """
    value = item.value
    if isinstance(value, Image):
        from PIL import Image as PILImage

        pixels = value.array
        picture = PILImage.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
        metadata = {} if value.caption is None else {CAPTION_KEY: value.caption}
        experiment.log_image(picture, name=item.tag, step=item.step, image_format="png",
                             metadata=metadata)
    elif isinstance(value, Text):
        experiment.log_text(value.text, step=item.step, metadata={TAG_KEY: item.tag})
    else:
        raise TypeError(f"comet: cannot store {value.kind} media (tag {item.tag!r})")
