"""Images and text as MLflow artifacts of the run (``reader.read_media`` reads them back).
Imports no SDK.

MLflow stores images and files, not histograms: ``MEDIA_KINDS`` is ``{"image", "text"}`` and the
core reports a ``Histogram`` logged to this backend as skipped (one ``BackendWarning``, counted in
``Monitor.media_skipped``). Each value is written when ``monitor_write_media`` runs (encoding
included, so with background dispatch it runs off the training thread), not buffered:

* image: ``MlflowClient.log_image(run_id, pixels, key=<key>, step=<step>, timestamp=<ms>)``,
  MLflow's own step-indexed images (the run page's image panel, one slider per key). MLflow
  saves the pixels as a PNG, lossless (grey as 8-bit grey, RGB, RGBA with its alpha), at
  ``images/<key, "/" as "~">+step+<step>+timestamp+<ms>+<uuid>.png``, beside a reduced WebP copy
  (``...+compressed.webp``) for its UI, and sets the run tag ``mlflow.loggedImages``. MLflow
  images have no caption: a caption is not stored.
* text: ``MlflowClient.log_text(run_id, text, "text/<key, "/" as "~">+step+<step>+timestamp+
  <ms>.md")``, a UTF-8 Markdown file (the artifact browser renders it), named the way MLflow
  names its image files.

Keys are ``storage.media_key(tag)`` (media tags have an escaping of their own, see ``storage``).

Timestamps: the ``log`` call's wall time in milliseconds, made strictly increasing over the
run's media values, so that ``read_media`` (which orders by timestamp) returns them in the
order they were logged.
"""

from __future__ import annotations

from typing import Any

from core_monitor.media import Image, MediaItem, Text

from .storage import MAX_MEDIA_KEY, TEXT_DIR, media_key, text_file

#: What this plugin stores (MLflow has no histogram type).
MEDIA_KINDS = frozenset({"image", "text"})


class MediaWriter:
    """Writes one run's media values through ``client`` (an ``mlflow.MlflowClient``).

    Attributes:
        last_ms: the timestamp (ms) of the last value written; the next one is later.
    """

    def __init__(self, client: Any, run_id: str) -> None:
        self.client = client
        self.run_id = run_id
        self.last_ms = -1

    def write(self, item: MediaItem) -> bool:
        """Store one image or text at ``item.step``; ``False`` when its key is longer than
        ``MAX_MEDIA_KEY`` (nothing stored).

        Raises:
            Exception: whatever MLflow raises when the store or server refuses the request.
        """
        key = media_key(item.tag)
        if len(key) > MAX_MEDIA_KEY:
            return False
        ms = max(int(item.wall_time * 1000), self.last_ms + 1)
        value = item.value
        if isinstance(value, Image):
            self.client.log_image(self.run_id, value.array, key=key, step=item.step,
                                  timestamp=ms, synchronous=True)
        elif isinstance(value, Text):
            self.client.log_text(self.run_id, value.text,
                                 f"{TEXT_DIR}/{text_file(key, item.step, ms)}")
        else:
            raise TypeError(f"mlflow: cannot store {value.kind} media (tag {item.tag!r})")
        self.last_ms = ms
        return True
