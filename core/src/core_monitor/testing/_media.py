"""The media contract: images, histograms and text come back from the backend's own storage at
the caller's step. On for a backend that declares ``media_kinds``; each check needs numpy."""

from __future__ import annotations

from typing import Any

import pytest

from ..media import Histogram, Image, Text

Media = list[tuple[str, int, Any]]


def _need(capabilities: Any, read_media: Any, kind: str) -> None:
    if kind not in capabilities.media_kinds:
        pytest.skip(f"backend does not declare {kind!r} in media_kinds")
    if read_media is None:
        pytest.fail(f"the backend declares media_kinds = {sorted(capabilities.media_kinds)} but "
                    "the test class supplies no read_media fixture: return a function RunInfo "
                    "-> [(tag, step, Image | Histogram | Text)] read from your storage",
                    pytrace=False)


def _by_tag(got: Media, kind: type, tags: set[str]) -> dict[str, list[tuple[int, Any]]]:
    found: dict[str, list[tuple[int, Any]]] = {}
    for entry in got:
        if not isinstance(entry, tuple) or len(entry) != 3 or type(entry[1]) is not int:
            pytest.fail(f"read_media returned {entry!r:.120}: each entry must be a tuple (tag: "
                        "str, step: int, value: Image | Histogram | Text)", pytrace=False)
        tag, step, value = entry
        if tag in tags:
            if not isinstance(value, kind):
                pytest.fail(f"read_media returned a {type(value).__name__} for tag {tag!r}, "
                            f"logged as {kind.__name__}", pytrace=False)
            found.setdefault(tag, []).append((step, value))
    return found


class MediaChecks:
    """Checks of ``monitor_write_media`` and the plugin's ``read_media``; mixed into
    ``MonitorContract`` (which supplies ``make_monitor``, ``settle`` and ``capabilities``)."""

    def test_declared_media_kinds_have_the_hook(self, backend_class, capabilities):
        if capabilities.media_kinds and not callable(
            getattr(backend_class, "monitor_write_media", None)
        ):
            pytest.fail(f"{backend_class.__qualname__} declares media_kinds = "
                        f"{sorted(capabilities.media_kinds)} but has no monitor_write_media "
                        "hook: the core would send it nothing", pytrace=False)

    def test_images_are_stored_pixel_exact_at_the_callers_steps(
        self, capabilities, read_media, make_monitor, settle
    ):
        _need(capabilities, read_media, "image")
        np = pytest.importorskip("numpy")
        rng = np.random.default_rng(17)
        rgb = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
        grey = rng.random(size=(5, 7))  # float in [0, 1]
        monitor = make_monitor()
        monitor.log({"loss": 0.5, "samples": Image(rgb, caption="batch 3")}, step=3)
        monitor.log({"samples": Image(rgb[::-1].copy()), "val/grey": Image(grey)}, step=1)
        settle(monitor)
        got = _by_tag(read_media(monitor.run), Image, {"samples", "val/grey"})
        want = {"samples": [(3, rgb, "batch 3"), (1, rgb[::-1], None)],
                "val/grey": [(1, np.rint(grey * 255).astype(np.uint8)[:, :, None], None)]}
        for tag, logged in want.items():
            steps = [s for s, _ in got.get(tag, [])]
            if steps != [s for s, _, _ in logged]:
                pytest.fail(f"image {tag!r}: expected steps {[s for s, _, _ in logged]} (as "
                            f"logged), read_media returned {steps}: store MediaItem.step",
                            pytrace=False)
            for (step, image), (_, pixels, caption) in zip(got[tag], logged, strict=True):
                stored = np.asarray(image.array)
                same = stored.ndim == 3 and stored.shape[:2] == pixels.shape[:2] and (
                    np.array_equal(stored[:, :, :pixels.shape[2]], pixels))
                if not same:
                    pytest.fail(f"image {tag!r} at step {step}: expected {pixels.shape} pixels "
                                f"as logged (RGB channels compared), stored {stored.shape} "
                                "that differ: encode losslessly (PNG), channels last",
                                pytrace=False)
                if image.caption is not None and image.caption != caption:
                    pytest.fail(f"image {tag!r} at step {step}: expected caption {caption!r}, "
                                f"stored {image.caption!r}", pytrace=False)

    def test_histograms_keep_every_value_in_the_callers_bins(
        self, capabilities, read_media, make_monitor, settle
    ):
        _need(capabilities, read_media, "histogram")
        np = pytest.importorskip("numpy")
        values = np.random.default_rng(5).normal(size=(40, 25))
        counts, edges = np.histogram(values, bins=20)
        monitor = make_monitor()
        monitor.log({"weights": Histogram(values, bins=20)}, step=50)
        monitor.log({"weights": Histogram(edges=[0, 1, 2.5], counts=[3, 4])}, step=10)
        settle(monitor)
        got = _by_tag(read_media(monitor.run), Histogram, {"weights"}).get("weights", [])
        want = [(50, counts, edges), (10, [3, 4], [0, 1, 2.5])]
        if [s for s, _ in got] != [s for s, _, _ in want]:
            pytest.fail(f"histogram 'weights': expected steps [50, 10] (as logged), read_media "
                        f"returned {[s for s, _ in got]}: store MediaItem.step", pytrace=False)
        for (step, stored), (_, want_counts, want_edges) in zip(got, want, strict=True):
            stored_counts, stored_edges = stored.binned()
            if not (np.array_equal(stored_counts, want_counts)
                    and np.allclose(stored_edges, want_edges, rtol=1e-6, atol=0)):
                pytest.fail(f"histogram 'weights' at step {step}: expected counts "
                            f"{list(want_counts)} (sum {int(np.sum(want_counts))}) over edges "
                            f"{np.round(want_edges, 4).tolist()}, stored counts "
                            f"{list(stored_counts)} (sum {np.sum(stored_counts):g}) over "
                            f"{np.round(stored_edges, 4).tolist()}: store Histogram.binned()",
                            pytrace=False)

    def test_text_is_stored_exactly(self, capabilities, read_media, make_monitor, settle):
        _need(capabilities, read_media, "text")
        texts = {2: "# Sample 2\n\n*prediction*: `cat` — 猫 🐈", 0: "", 9: "NaN? no: text"}
        monitor = make_monitor()
        for step, text in texts.items():
            monitor.log({"notes": Text(text)}, step=step)
        settle(monitor)
        got = [(s, t.text) for s, t in
               _by_tag(read_media(monitor.run), Text, {"notes"}).get("notes", [])]
        if got != list(texts.items()):
            pytest.fail(f"text 'notes': expected {list(texts.items())} (step, text) as logged, "
                        f"read_media returned {got}", pytrace=False)

    def test_media_beside_scalars_keeps_the_scalars(
        self, capabilities, read_media, read_rows, make_monitor, settle
    ):
        if not capabilities.media_kinds:
            pytest.skip("backend declares no media_kinds")
        kind = sorted(capabilities.media_kinds)[-1]  # text where declared: needs no numpy
        _need(capabilities, read_media, kind)
        np = pytest.importorskip("numpy") if kind != "text" else None
        value = {"text": lambda: Text("t"), "image": lambda: Image(np.zeros((2, 2), np.uint8)),
                 "histogram": lambda: Histogram([1.0, 2.0], bins=2)}[kind]()
        monitor = make_monitor()
        monitor.log({"loss": 0.5, "media": value, "acc": 0.75}, step=4)
        settle(monitor)
        rows = sorted((t, s) for t, s, _ in read_rows(monitor.run))
        if rows != [("acc", 4), ("loss", 4)]:
            pytest.fail(f"a log() call with scalars and a {kind}: expected read_rows to return "
                        f"[('acc', 4), ('loss', 4)] (tag, step), got {rows}: read_rows must "
                        "return the scalars only, skipping media values", pytrace=False)
        got = [(t, s) for t, s, _ in read_media(monitor.run)]
        if got != [("media", 4)]:
            pytest.fail(f"expected read_media to return [('media', 4)] (tag, step), got {got}",
                        pytrace=False)
