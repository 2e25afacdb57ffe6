"""Media values: images, histograms and text, logged beside scalars with ``Monitor.log``.

``monitor.log({"loss": 0.1, "samples": Image(grid), "w": Histogram(weights)}, step=s)``

Two stages, on two threads:

* **Validation** (``prepare``) runs on the caller's thread inside ``log()``: it checks shapes,
  dtypes and ranges and takes a private copy of the data (so a buffer the caller reuses after
  ``log()`` returns cannot change what is written). A bad value raises ``TypeError`` or
  ``ValueError`` naming the tag, and nothing of that ``log()`` call is written.
* **Encoding** (PNG, binning: ``Histogram.binned``, each backend's own image encoder) runs
  inside a backend's ``monitor_write_media`` hook, so that it runs off the training thread
  (in the backend's writer process by default; on its worker thread with ``dispatch="thread"``).

A backend declares the kinds it stores (``media_kinds``); ``MediaRoutes`` counts what each
backend is not sent and filters each backend's hook to its own kinds.

numpy is needed for ``Image`` and ``Histogram`` (not for ``Text``); it is imported on the first
media value, never by ``import core_monitor``.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ._stack import caller_level
from .errors import BackendWarning

#: The media kinds the core knows; a backend declares the ones it stores as ``media_kinds``.
MEDIA_KINDS = frozenset({"image", "histogram", "text"})
#: Most bins a histogram may have: Trackio's and wandb's limit (they cut larger ones to 512).
MAX_BINS = 512


@dataclass(frozen=True, eq=False)
class Image:
    """An image, as ``wandb.Image``/``trackio.Image`` take one from an array.

    Args:
        array: pixels, shaped ``(H, W)`` (grey), ``(H, W, 1)``, ``(H, W, 3)`` (RGB) or
            ``(H, W, 4)`` (RGBA); dtype ``uint8`` (0-255), or float in ``[0, 1]`` (scaled by
            255 and rounded). Anything ``numpy.asarray`` accepts: a numpy array, a CPU tensor,
            nested lists. ``H, W >= 1``.
        caption: shown under the image where the tracker has captions (Trackio, wandb).

    After ``log()`` validated it, a backend sees ``array`` as a read-only ``uint8`` numpy
    array shaped ``(H, W, C)`` with ``C`` in ``(1, 3, 4)``. Errors are raised by ``log()``,
    not here (``prepare``).
    """

    array: Any
    caption: str | None = None
    kind = "image"


@dataclass(frozen=True, eq=False)
class Histogram:
    """A distribution: raw ``values`` binned into ``bins`` equal bins, or ready-made bins.

    Args:
        values: numbers (any shape, flattened), e.g. a layer's weights; all finite. Binning
            (``numpy.histogram``: ``bins`` equal bins from the smallest to the largest value,
            the last bin closed) happens in the backend, off the caller's thread.
        bins: number of bins, ``1 <= bins <= 512`` (Trackio's and wandb's limit).
        edges: instead of ``values``: ``N + 1`` increasing bin edges (finite floats)...
        counts: ...and ``N`` counts (non-negative numbers), ``1 <= N <= 512``, as
            ``numpy.histogram`` returns them (``counts, edges = numpy.histogram(x)``).

    Errors are raised by ``log()`` (``prepare``): give either ``values`` or both ``edges`` and
    ``counts``.
    """

    values: Any = None
    bins: int = 64
    edges: Any = None
    counts: Any = None
    kind = "histogram"

    def binned(self) -> tuple[Any, Any]:
        """``(counts, edges)``: numpy arrays of ``N`` and ``N + 1`` entries.

        Computed here with ``numpy.histogram(values, bins)`` when built from ``values`` (call
        it in the backend's hook: this is the encoding step); the counts sum to the number of
        values. ``counts`` are ``int64`` when all are whole numbers, else ``float64``;
        ``edges`` are ``float64``. Only for a histogram ``log()`` validated, or one built with
        ``edges`` and ``counts``.
        """
        import numpy as np

        if self.counts is None:
            return np.histogram(self.values, bins=self.bins)
        counts = np.asarray(self.counts)
        if counts.dtype.kind == "f" and (counts == np.floor(counts)).all():
            counts = counts.astype(np.int64)
        return counts, np.asarray(self.edges, np.float64)


@dataclass(frozen=True, eq=False)
class Text:
    """Text (Markdown where the tracker renders it: Trackio, TensorBoard's Text tab).

    Args:
        text: a ``str``; stored exactly. Errors are raised by ``log()`` (``prepare``).
    """

    text: str
    kind = "text"


#: The media value types ``log()`` accepts.
MEDIA_TYPES = (Image, Histogram, Text)


class MediaItem(NamedTuple):
    """One media value at one step, as a backend's ``monitor_write_media`` receives it.

    Attributes:
        tag: the name, e.g. ``"val/samples"`` (nested mappings flattened with ``/``).
        step: the caller's step (``0 <= step < 2**63``), final: store exactly this one.
        wall_time: seconds since the Unix epoch when ``log`` was called.
        value: the validated ``Image``, ``Histogram`` or ``Text`` (see each class).
    """

    tag: str
    step: int
    wall_time: float
    value: Image | Histogram | Text

    @property
    def kind(self) -> str:
        """``"image"``, ``"histogram"`` or ``"text"``."""
        return self.value.kind


def media_taker(out: list[tuple[str, Image | Histogram | Text]]) -> Callable[[str, Any], bool]:
    """For ``events.metric_rows(take=...)``: a function that, given a media value, validates it
    (``prepare``), appends ``(tag, value)`` to ``out`` and returns ``True``; ``False`` for any
    other value (a scalar, converted by ``metric_rows``)."""

    def take(tag: str, value: Any) -> bool:
        if isinstance(value, MEDIA_TYPES):
            out.append((tag, prepare(tag, value)))
            return True
        return False

    return take


def prepare(tag: str, value: Image | Histogram | Text) -> Image | Histogram | Text:
    """Check ``value`` and return a validated copy whose data no later change can reach.

    Raises:
        TypeError: a wrong type (the array's dtype, a caption or text that is not a ``str``,
            ``bins`` not an ``int``), or numpy is missing for an image or histogram.
        ValueError: a wrong shape, an empty array, pixels or values out of range, non-finite
            histogram values, bad ``bins`` or edges/counts. Every message names ``tag``.
    """
    if isinstance(value, Text):
        if not isinstance(value.text, str):
            raise TypeError(f"media {tag!r}: Text takes a str, not {type(value.text).__name__}")
        return value
    np = _numpy(tag, value)
    if isinstance(value, Image):
        return _image(tag, value, np)
    return _histogram(tag, value, np)


def _numpy(tag: str, value: Any) -> Any:
    try:
        import numpy
    except ModuleNotFoundError:
        raise TypeError(f"media {tag!r}: {type(value).__name__} needs numpy, which is not "
                        "installed: pip install numpy") from None
    return numpy


def _array(tag: str, what: str, data: Any, np: Any) -> Any:
    if hasattr(data, "detach"):  # a torch tensor: numpy.asarray copies it only from the CPU
        data = data.detach().cpu()
    try:
        return np.asarray(data)
    except Exception as error:
        raise TypeError(f"media {tag!r}: {what} of type {type(data).__name__} is not an array "
                        f"numpy.asarray accepts ({error})") from None


def _image(tag: str, image: Image, np: Any) -> Image:
    if image.caption is not None and not isinstance(image.caption, str):
        raise TypeError(f"media {tag!r}: Image caption must be a str or None, not "
                        f"{type(image.caption).__name__}")
    pixels = _array(tag, "Image array", image.array, np)
    shape = pixels.shape
    if not (pixels.ndim == 2 or (pixels.ndim == 3 and shape[2] in (1, 3, 4))) or 0 in shape:
        raise ValueError(f"media {tag!r}: Image array has shape {shape}; give (H, W), (H, W, 1), "
                         "(H, W, 3) or (H, W, 4) with H, W >= 1 (channels last: for a "
                         "(3, H, W) tensor pass tensor.permute(1, 2, 0))")
    if pixels.dtype == np.uint8:
        pixels = pixels.copy()
    elif pixels.dtype.kind == "f":
        low, high = (float(pixels.min()), float(pixels.max()))
        if not (low >= 0.0 and high <= 1.0):  # also catches NaN
            raise ValueError(f"media {tag!r}: float Image pixels must be in [0, 1], found "
                             f"[{low}, {high}]; scale them, or give uint8 pixels 0-255")
        pixels = np.rint(pixels * 255.0).astype(np.uint8)
    else:
        raise TypeError(f"media {tag!r}: Image array has dtype {pixels.dtype}; give uint8 "
                        "(0-255) or float (0-1) pixels, e.g. array.astype('uint8')")
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    pixels.flags.writeable = False
    return replace(image, array=pixels)


def _histogram(tag: str, histogram: Histogram, np: Any) -> Histogram:
    if (histogram.values is None) == (histogram.edges is None and histogram.counts is None):
        raise ValueError(f"media {tag!r}: give Histogram(values, bins=...) or "
                         "Histogram(edges=..., counts=...), not both or neither")
    if histogram.values is not None:
        bins = histogram.bins
        if isinstance(bins, bool) or not hasattr(bins, "__index__"):
            raise TypeError(f"media {tag!r}: Histogram bins={bins!r} must be an int")
        bins = operator.index(bins)
        if not 1 <= bins <= MAX_BINS:
            raise ValueError(f"media {tag!r}: Histogram bins={bins} must be in 1..{MAX_BINS}")
        values = _numbers(tag, "values", histogram.values, np).ravel()
        if values.size == 0 or not np.isfinite(values).all():
            raise ValueError(f"media {tag!r}: Histogram values must be non-empty and finite "
                             f"({values.size} values, {np.count_nonzero(~np.isfinite(values))} "
                             "NaN or inf); drop the non-finite ones first")
        return replace(histogram, values=values, bins=bins)
    if histogram.edges is None or histogram.counts is None:
        raise ValueError(f"media {tag!r}: Histogram needs both edges and counts")
    edges = _numbers(tag, "edges", histogram.edges, np)
    counts = _numbers(tag, "counts", histogram.counts, np)
    if (counts.ndim != 1 or edges.shape != (counts.size + 1,) or not 1 <= counts.size <= MAX_BINS
            or not np.isfinite(edges).all() or not (np.diff(edges) > 0).all()
            or not np.isfinite(counts).all() or (counts < 0).any()):
        raise ValueError(f"media {tag!r}: Histogram needs N counts (non-negative, 1 <= N <= "
                         f"{MAX_BINS}) and N + 1 increasing finite edges; got counts of shape "
                         f"{counts.shape} and edges of shape {edges.shape}")
    edges.flags.writeable = counts.flags.writeable = False
    return replace(histogram, values=None, edges=edges, counts=counts)


def _numbers(tag: str, what: str, data: Any, np: Any) -> Any:
    array = _array(tag, f"Histogram {what}", data, np)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"media {tag!r}: Histogram {what} have dtype {array.dtype}; give numbers")
    return array.astype(np.float64)  # always a copy


# Routing: which media go to which backend ------------------------------------------------


class MediaRoutes:
    """The media kinds each started backend is sent, and what the others were not sent.

    Attributes:
        kinds: backend name -> the kinds it is sent (declared, known, and with the hook).
        skipped: (backend name, kind) -> media values not sent there (``Monitor.media_skipped``).
    """

    def __init__(self) -> None:
        self.kinds: dict[str, frozenset[str]] = {}
        self.skipped: dict[tuple[str, str], int] = {}
        self._told: set[tuple[str, str]] = set()

    def add(self, name: str, declared: Iterable[str], hooks: dict[str, Callable[..., Any]]) -> None:
        """Note a backend's kinds; wrap its ``monitor_write_media`` in ``hooks`` (changed in
        place) to take only those kinds."""
        hook = hooks.get("monitor_write_media")
        kinds = self.kinds[name] = (
            MEDIA_KINDS.intersection(declared) if hook is not None else frozenset()
        )
        if hook is not None and kinds:
            hooks["monitor_write_media"] = _only_kinds(hook, kinds)

    def skip(self, names: Iterable[str], items: Sequence[MediaItem]) -> bool:
        """Count, on the caller's thread, the items each backend of ``names`` does not store;
        return whether any of them stores any item (then the core sends them all: each hook
        takes its own kinds).

        The kinds a backend does not store are reported once per (backend, kind), in one
        one-line ``BackendWarning`` per call naming every such backend, then only counted in
        ``skipped``. Not a failure.
        """
        wanted = False
        new: dict[str, list[str]] = {}  # backend -> kinds first skipped in this call
        for name in names:
            kinds = self.kinds[name]
            for item in items:
                if item.value.kind in kinds:
                    wanted = True
                elif self._skip(name, item):
                    new.setdefault(name, []).append(item.value.kind)
        if new:
            parts = "; ".join(f"backend {name!r} does not store {' or '.join(kinds)} media "
                              f"(it declares media_kinds = {sorted(self.kinds[name])})"
                              for name, kinds in new.items())
            warnings.warn(
                f"{parts}: values of those kinds are not sent to those backends, now or later "
                "(the other backends store them); Monitor.media_skipped counts them",
                BackendWarning, stacklevel=caller_level())
        return wanted

    def _skip(self, name: str, item: MediaItem) -> bool:
        """Count ``item`` as skipped for ``name``; whether it is the first of its kind."""
        key = (name, item.value.kind)
        self.skipped[key] = self.skipped.get(key, 0) + 1
        if key in self._told:
            return False
        self._told.add(key)
        return True


def _only_kinds(hook: Callable[..., Any], kinds: frozenset[str]) -> Callable[..., Any]:
    """``hook`` (a backend's ``monitor_write_media``) called with only the items of ``kinds``,
    and not at all when none is left."""

    def monitor_write_media(items: Sequence[MediaItem]) -> None:
        mine = tuple(item for item in items if item.value.kind in kinds)
        if mine:
            hook(items=mine)

    return monitor_write_media
