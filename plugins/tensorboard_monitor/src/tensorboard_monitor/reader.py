"""Read a run back from its event files with TensorBoard's own readers (tests, notebooks):
scalars, HParams and media (images, histograms, text)."""

from __future__ import annotations

import io
import os
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Histogram, Image, Text

from . import _compat
from .storage import CRASH_TAG, event_folder, is_folder, run_dir

__all__ = ["last_step", "read_config", "read_crash", "read_media", "read_rows"]

#: ``EventAccumulator`` keeps 4 images and 1 histogram per tag by default: keep all (0).
MEDIA_SIZE_GUIDANCE = {"scalars": 0, "images": 0, "histograms": 0, "tensors": 0}


def read_rows(run: RunInfo, *, run_dir: str | os.PathLike[str] | None = None,
              ) -> list[tuple[str, int, float]]:
    """Read a run's scalars back with TensorBoard's own ``EventAccumulator``.

    Every point is returned (``size_guidance={"scalars": 0}``; the default keeps 10,000 per
    tag). Order: tags in order of first appearance, each tag's points in file order (event
    files in name order, as TensorBoard reads them). Only files directly in the run's folder are
    read, not sub-runs such as ``rank1/``.

    Args:
        run: the run as the core describes it (``Monitor.run``); its folder is
            ``run_dir(run.project, run.name, run.log_dir, rank=run.rank)``, so a rank above 0
            reads the sub-run that rank wrote.
        run_dir: the run's exact folder, when it was written with the ``run_dir`` option.

    Returns:
        ``[(tag, step, value), ...]`` with ``step`` an ``int`` and ``value`` the stored float32
        as a Python ``float``.

    Raises:
        FileNotFoundError: the run has no folder.
    """
    accumulator = _accumulator(run, {"scalars": 0}, run_dir)
    return [
        (tag, int(point.step), float(point.value))
        for tag in accumulator.Tags()["scalars"]
        for point in accumulator.Scalars(tag)
    ]


def read_config(run: RunInfo, *, run_dir: str | os.PathLike[str] | None = None,
                ) -> dict[str, Any]:
    """Return the HParams TensorBoard shows for the run, ``{}`` when it has none.

    Read from the run's ``session_start_info`` as TensorBoard's HParams plugin reads it: the
    first one in the run's event files (TensorBoard ignores later ones). Values are as
    ``hparam_value`` converts them: ``bool``, ``float`` or ``str`` (``[64, 64]`` reads back
    as ``"[64, 64]"``, ``3`` as ``3.0``). Arguments as for ``read_rows``.

    Raises:
        FileNotFoundError: the run has no folder.
    """
    sdk = _compat.sdk()
    metadata = sdk.hparams_metadata
    accumulator = _accumulator(run, None, run_dir)
    try:
        content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    except KeyError:  # no HParams data in the run at all
        return {}
    if metadata.SESSION_START_INFO_TAG not in content:
        return {}
    info = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    return {key: getattr(value, value.WhichOneof("kind")) for key, value in info.hparams.items()
            if value.WhichOneof("kind")}


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

    sdk = _compat.sdk()
    accumulator = _accumulator(run, MEDIA_SIZE_GUIDANCE, run_dir)
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


def last_step(run: RunInfo, *, run_dir: str | os.PathLike[str] | None = None) -> int | None:
    """The largest step of any scalar, image, histogram or text stored in the run's event
    files (the HParams summary, written at step 0, is not counted); ``None`` when there is none.
    Arguments as for ``read_rows``.

    Raises:
        FileNotFoundError: the run has no folder.
    """
    sdk = _compat.sdk()
    accumulator = _accumulator(run, MEDIA_SIZE_GUIDANCE, run_dir)
    tags = accumulator.Tags()
    steps = [point.step for tag in tags["scalars"] for point in accumulator.Scalars(tag)]
    steps += [e.step for tag in tags["images"] for e in accumulator.Images(tag)]
    steps += [e.step for tag in tags["histograms"] for e in accumulator.Histograms(tag)]
    steps += [e.step for tag in tags["tensors"]
              if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == sdk.text_plugin
              for e in accumulator.Tensors(tag)]
    return max((int(step) for step in steps), default=None)


def _accumulator(run: RunInfo, size_guidance: dict[str, int] | None,
                 exact: str | os.PathLike[str] | None = None) -> Any:
    folder = (event_folder(exact, rank=run.rank) if exact is not None
              else run_dir(run.project, run.name, run.log_dir, rank=run.rank))
    if not is_folder(folder):
        raise FileNotFoundError(f"no TensorBoard run folder at {str(folder)!r}")
    return _compat.sdk().EventAccumulator(str(folder), size_guidance=size_guidance).Reload()


def read_crash(run: RunInfo, *, run_dir: str | os.PathLike[str] | None = None) -> str | None:
    """Why the run ended by a crash: the text summary ``storage.CRASH_TAG`` that
    ``monitor_crash`` wrote (an event file has no run status); ``None`` when there is none.
    Arguments as for ``read_media``."""
    marks = [value.text for tag, _, value in read_media(run, run_dir=run_dir)
             if tag == CRASH_TAG and isinstance(value, Text)]
    return marks[-1] if marks else None
