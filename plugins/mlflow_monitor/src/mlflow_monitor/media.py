"""Images and text as MLflow artifacts of the run, and their read-back. Imports no SDK.

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

Keys: ``log_image`` accepts only ``[A-Za-z0-9_\\-./ ]`` in a key (narrower than metric keys:
no ``:``, no letters outside ASCII), so media tags have their own escaping, built like the
scalar one (``storage.escape_key``) with ``-`` in place of ``:``. A tag made of those
characters that does not start with ``MEDIA_ESCAPE`` (``"--"``) is its own key; any other is
``"--"`` followed by the tag with every character outside ``[A-Za-z0-9_./ ]`` written as
``-<hex code point>-``: ``"loss 🔥"`` -> ``"--loss -1f525-"``, ``"acc,top5"`` ->
``"--acc-2c-top5"``. Keys longer than ``MAX_MEDIA_KEY`` (150) characters are refused (the file
name would pass the usual 255-byte limit).

Timestamps: the ``log`` call's wall time in milliseconds, made strictly increasing over the
run's media values, so that ``read_media`` (which orders by timestamp) returns them in the
order they were logged.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Image, MediaItem, Text

#: What this plugin stores (MLflow has no histogram type).
MEDIA_KINDS = frozenset({"image", "text"})
#: Prefix of an escaped media key.
MEDIA_ESCAPE = "--"
#: Longest media key: the file name MLflow makes of it adds up to about 103 characters.
MAX_MEDIA_KEY = 150
#: Artifact folders of images (MLflow's own) and of text (this plugin's).
IMAGE_DIR, TEXT_DIR = "images", "text"

_KEY = re.compile(r"[A-Za-z0-9_\-./ ]+")
_ESCAPED = re.compile(r"[^A-Za-z0-9_./ ]")
_CODE_POINT = re.compile(r"-([0-9a-f]{1,6})-")
_FILE = re.compile(r"(?P<key>[^+]+)\+step\+(?P<step>\d+)\+timestamp\+(?P<ms>\d+)"
                   r"(?:\+[0-9a-f-]+)?\.(?P<ext>png|md)")


def media_key(tag: str) -> str:
    """The key ``tag`` is stored under as an MLflow image or text (see the module docstring)."""
    if _KEY.fullmatch(tag) and not tag.startswith(MEDIA_ESCAPE):
        return tag
    return MEDIA_ESCAPE + _ESCAPED.sub(lambda m: f"-{ord(m[0]):x}-", tag)


def media_tag(key: str) -> str:
    """Undo ``media_key``; a key that is not a well-formed escaped key is returned unchanged."""
    if not key.startswith(MEDIA_ESCAPE):
        return key
    try:
        tag = _CODE_POINT.sub(lambda m: chr(int(m[1], 16)), key[len(MEDIA_ESCAPE) :])
    except (ValueError, OverflowError):  # a code point past U+10FFFF
        return key
    return tag if media_key(tag) == key else key


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
            name = f"{key.replace('/', '~')}+step+{item.step}+timestamp+{ms}.md"
            self.client.log_text(self.run_id, value.text, f"{TEXT_DIR}/{name}")
        else:
            raise TypeError(f"mlflow: cannot store {value.kind} media (tag {item.tag!r})")
        self.last_ms = ms
        return True


def read_media(
    run: RunInfo, *, tracking_uri: str | None = None, experiment: str | None = None,
    run_id: str | None = None,
) -> list[tuple[str, int, Image | Text]]:
    """Read a run's images and text back through ``MlflowClient.list_artifacts`` and
    ``download_artifacts`` (the ``images/`` and ``text/`` folders, each in one call, into a
    temporary folder removed afterwards).

    Args:
        run, tracking_uri, experiment, run_id: as ``mlflow_monitor.find_run``.

    Returns:
        ``[(tag, step, value), ...]`` in the order logged (by the timestamp in each file name,
        then its path): ``value`` an ``Image`` (``array``: the PNG decoded, ``uint8``
        ``(H, W, C)``, ``C`` 1, 3 or 4 as logged; no caption) or a ``Text`` (the file's UTF-8
        text, exact). Files in ``images/`` and ``text/`` not named as above are ignored.

    Raises:
        LookupError, FileNotFoundError, mlflow.exceptions.MlflowException: as ``find_run``.
    """
    import numpy as np
    from PIL import Image as PILImage

    from . import _compat
    from .reader import MAX_RETRIES, REQUEST_TIMEOUT, client_for, find_run

    found = find_run(run, tracking_uri=tracking_uri, experiment=experiment, run_id=run_id)
    client = client_for(run, tracking_uri)
    run_id = found.info.run_id
    entries = []
    media: list[tuple[str, int, Image | Text]] = []
    with tempfile.TemporaryDirectory(prefix="mlflow-media-") as local, \
            _compat.request_limits(REQUEST_TIMEOUT, MAX_RETRIES):
        for folder, ext in ((IMAGE_DIR, "png"), (TEXT_DIR, "md")):
            found_here = False
            for info in client.list_artifacts(run_id, folder):
                name = info.path.rsplit("/", 1)[-1]
                match = None if info.is_dir else _FILE.fullmatch(name)
                if match and match["ext"] == ext:
                    found_here = True
                    entries.append((int(match["ms"]), info.path,
                                    media_tag(match["key"].replace("~", "/")),
                                    int(match["step"])))
            if found_here:
                client.download_artifacts(run_id, folder, local)
        entries.sort()
        for _, path, tag, step in entries:
            stored = Path(local, path)
            if path.endswith(".png"):
                with PILImage.open(stored) as picture:
                    pixels = np.asarray(picture)
                media.append((tag, step, Image(pixels.reshape(*pixels.shape[:2], -1))))
            else:
                media.append((tag, step, Text(stored.read_bytes().decode("utf-8"))))
    return media
