"""Media values in the core: validated on the caller's thread in ``log()`` (a bad one names its
tag and nothing of the call is written), sent to each backend only in the kinds it declares,
and never a reason for numpy to be imported with ``core_monitor``.

The backends here are written for these tests (they keep what the hooks receive); the
first-party plugins prove storage through the contract kit's media checks. Most tests use
``dispatch="sync"`` to read what a backend got right after ``log()``; the routing is the same in
thread mode (the last test) and in writer processes (tests/core/test_processes.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from interpreter import imported, modules_after

from core_monitor import BackendWarning, Histogram, Image, Text, hookimpl
from core_monitor.hookspecs import Capabilities


class Keeper:
    """Keeps every batch and media item; declares every kind."""

    capabilities = Capabilities(name="keeper", media_kinds={"image", "histogram", "text"})

    def __init__(self, run):
        self.events, self.items = [], []

    @hookimpl
    def monitor_write(self, events):
        self.events.extend(events)

    @hookimpl
    def monitor_write_media(self, items):
        self.items.extend(items)


class TextOnly(Keeper):
    capabilities = Capabilities(name="textonly", media_kinds={"text"})


class Scalars:
    """A backend from before media: no media_kinds, no hook."""

    name = "scalars"

    def __init__(self, run):
        self.events = []

    @hookimpl
    def monitor_write(self, events):
        self.events.extend(events)


class Broken(Keeper):
    name = "broken"

    @hookimpl
    def monitor_write_media(self, items):
        raise OSError("disk full")


def instance(monitor, name):
    return monitor._dispatch.get(name).instance


@pytest.fixture
def keeper(monitor_factory):
    monitor = monitor_factory([Keeper], project="p", dispatch="sync")
    return monitor, instance(monitor, "keeper")


def test_importing_core_monitor_and_its_media_types_imports_no_numpy(tmp_path):
    modules = modules_after("import core_monitor\nfrom core_monitor import Image, Histogram, "
                            "Text\nfrom core_monitor.testing import MonitorContract\n", tmp_path)
    assert not imported(modules, "numpy")


def test_media_beside_scalars_reach_the_backend_validated_at_the_callers_step(keeper):
    monitor, backend = keeper
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    step = monitor.log({"loss": 0.5, "val": {"samples": Image(pixels, caption="c"),
                                             "notes": Text("# ok")},
                        "w": Histogram([[1.0, 2.0], [2.0, 9.0]], bins=4)}, step=12)
    assert step == 12
    assert [(e.tag, e.step, e.value) for e in backend.events] == [("loss", 12, 0.5)]
    assert [(i.tag, i.step, i.kind) for i in backend.items] == [
        ("val/samples", 12, "image"), ("val/notes", 12, "text"), ("w", 12, "histogram")]
    assert all(i.wall_time == backend.events[0].wall_time for i in backend.items)
    image, text, histogram = (i.value for i in backend.items)
    assert image.array.dtype == np.uint8 and image.array.shape == (2, 3, 3)
    assert np.array_equal(image.array, pixels) and image.caption == "c"
    assert text.text == "# ok"
    counts, edges = histogram.binned()
    assert counts.tolist() == [3, 0, 0, 1] and edges.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]


def test_media_only_call_advances_the_next_step(keeper):
    monitor, backend = keeper
    assert monitor.log({"notes": Text("a")}, step=4) == 4
    assert monitor.log({"notes": Text("b")}) == 5
    assert [(i.step, i.value.text) for i in backend.items] == [(4, "a"), (5, "b")]
    assert backend.events == []


def test_the_backend_gets_a_copy_the_caller_cannot_change_later(keeper):
    monitor, backend = keeper
    buffer = np.zeros((2, 2), np.uint8)
    values = np.array([1.0, 2.0])
    monitor.log({"img": Image(buffer), "h": Histogram(values, bins=2)}, step=0)
    buffer[:] = 255
    values[:] = 100.0
    image, histogram = (i.value for i in backend.items)
    assert image.array.shape == (2, 2, 1) and not image.array.any()
    assert histogram.binned()[1].tolist() == [1.0, 1.5, 2.0]
    with pytest.raises(ValueError):
        image.array[0, 0, 0] = 1  # read-only: one backend cannot change what the next gets


def test_float_pixels_in_zero_one_are_scaled_and_rounded(keeper):
    monitor, backend = keeper
    monitor.log({"img": Image(np.array([[0.0, 0.5, 1.0]], np.float32))}, step=0)
    assert backend.items[0].value.array[:, :, 0].tolist() == [[0, 128, 255]]


def test_ready_made_bins_pass_through(keeper):
    monitor, backend = keeper
    monitor.log({"h": Histogram(edges=[0, 1, 3], counts=[2, 5])}, step=0)
    counts, edges = backend.items[0].value.binned()
    assert counts.dtype == np.int64 and counts.tolist() == [2, 5]
    assert edges.tolist() == [0.0, 1.0, 3.0]


BAD = [
    (Image(np.zeros((3,))), ValueError, "shape (3,)"),
    (Image(np.zeros((3, 4, 2))), ValueError, "shape (3, 4, 2)"),
    (Image(np.zeros((0, 4))), ValueError, "H, W >= 1"),
    (Image(np.zeros((2, 2), np.int32)), TypeError, "dtype int32"),
    (Image(np.full((2, 2), 1.5)), ValueError, "[0, 1]"),
    (Image(np.full((2, 2), np.nan)), ValueError, "[0, 1]"),
    (Image(np.zeros((2, 2), np.uint8), caption=3), TypeError, "caption"),
    (Image("not pixels"), ValueError, "shape ()"),
    (Histogram([1.0, np.inf]), ValueError, "finite"),
    (Histogram([]), ValueError, "non-empty"),
    (Histogram([1.0], bins=0), ValueError, "bins=0"),
    (Histogram([1.0], bins=513), ValueError, "1..512"),
    (Histogram([1.0], bins=True), TypeError, "bins=True"),
    (Histogram(["a"]), TypeError, "dtype <U1"),
    (Histogram([1.0], edges=[0, 1], counts=[1]), ValueError, "not both"),
    (Histogram(edges=[0, 1]), ValueError, "both edges and counts"),
    (Histogram(edges=[0, 1], counts=[1, 2]), ValueError, "N + 1 increasing"),
    (Histogram(edges=[1, 0], counts=[1]), ValueError, "N + 1 increasing"),
    (Histogram(edges=[0, 1], counts=[-1]), ValueError, "non-negative"),
    (Text(b"bytes"), TypeError, "Text takes a str"),
]


@pytest.mark.parametrize(("value", "error", "says"), BAD, ids=[repr(b[2]) for b in BAD])
def test_bad_media_names_the_tag_and_nothing_of_the_call_is_written(keeper, value, error, says):
    monitor, backend = keeper
    with pytest.raises(error) as raised:
        monitor.log({"loss": 1.0, "ok": Text("fine"), "val/bad": value}, step=3)
    assert "'val/bad'" in str(raised.value) and says in str(raised.value)
    assert backend.events == [] and backend.items == []
    assert monitor.log({"loss": 2.0}) == 0  # the failed call did not take step 3


def test_a_plain_object_is_refused_pointing_at_the_media_types(keeper):
    monitor, _ = keeper
    with pytest.raises(TypeError, match=r"(?s)'grid'.*core_monitor\.Image\(array\)"):
        monitor.log({"grid": np.zeros((2, 2))}, step=0)


def test_kinds_a_backend_does_not_store_are_reported_once_and_counted(monitor_factory):
    monitor = monitor_factory([Keeper, TextOnly, Scalars], project="p", dispatch="sync")
    with pytest.warns(BackendWarning) as caught:
        for step in range(3):
            monitor.log({"loss": 1.0, "img": Image(np.zeros((1, 1), np.uint8)),
                         "notes": Text("t")}, step=step)
    messages = [str(w.message) for w in caught]
    # One line at the first call names every backend and kind left out: (textonly, image),
    # (scalars, image), (scalars, text); nothing later.
    assert len(messages) == 1, messages
    assert "\n" not in messages[0]
    assert "backend 'textonly' does not store image media" in messages[0]
    assert "backend 'scalars' does not store image or text media" in messages[0]
    assert caught[0].filename == __file__
    assert monitor.media_skipped == {("textonly", "image"): 3, ("scalars", "image"): 3,
                                     ("scalars", "text"): 3}
    assert monitor.failures == {}
    assert [i.kind for i in instance(monitor, "keeper").items] == ["image", "text"] * 3
    assert [i.kind for i in instance(monitor, "textonly").items] == ["text"] * 3
    assert len(instance(monitor, "scalars").events) == 3


def test_a_backend_failing_on_media_does_not_stop_the_others(monitor_factory):
    monitor = monitor_factory([Broken, Keeper], project="p", dispatch="sync")
    with pytest.warns(BackendWarning, match="'broken' failed in monitor_write_media"):
        monitor.log({"notes": Text("a")}, step=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once, then only counted
        monitor.log({"notes": Text("b")}, step=1)
    assert monitor.failures == {"broken": 2}
    assert [i.value.text for i in instance(monitor, "keeper").items] == ["a", "b"]


def test_strict_reraises_a_media_failure_after_the_others_got_it(monitor_factory):
    monitor = monitor_factory([Broken, Keeper], project="p", strict=True, dispatch="sync")
    with pytest.raises(OSError, match="disk full"):
        monitor.log({"notes": Text("a")}, step=0)
    assert [i.value.text for i in instance(monitor, "keeper").items] == ["a"]


def test_ranks_that_write_nothing_still_validate_media(monitor_factory, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monitor = monitor_factory([Keeper], project="p", dispatch="sync")
    assert monitor.backends == []
    assert monitor.log({"img": Image(np.zeros((1, 1), np.uint8))}, step=0) == 0
    with pytest.raises(ValueError, match="'img'"):
        monitor.log({"img": Image(np.zeros((1, 1, 2), np.uint8))}, step=1)


def test_capabilities_refuse_an_unknown_media_kind():
    with pytest.raises(TypeError, match=r"media_kinds=.*\['histogram', 'image', 'text'\]"):
        Capabilities(media_kinds={"images"})
    assert Capabilities.of(Keeper).media_kinds == {"image", "histogram", "text"}


def test_a_capability_as_a_class_attribute_is_refused_naming_the_declaration_to_write():
    class OldStyle(Keeper):
        media_kinds = frozenset({"text"})

    with pytest.raises(TypeError, match=r"OldStyle declares media_kinds as class attributes, "
                                        r"which the core no longer reads.*Capabilities\(media_"
                                        r"kinds=frozenset\(\{'text'\}\)\).*dataclasses.replace"):
        Capabilities.of(OldStyle)


def test_thread_dispatch_sends_each_backend_its_kinds_off_the_callers_thread(monitor_factory):
    import threading

    monitor = monitor_factory([Keeper, TextOnly], project="p", dispatch="thread")
    assert monitor.dispatch == "thread"
    with pytest.warns(BackendWarning, match="'textonly' does not store image"):
        monitor.log({"img": Image(np.zeros((2, 2), np.uint8)), "notes": Text("t")}, step=4)
    monitor.flush()
    assert [(i.tag, i.step) for i in instance(monitor, "keeper").items] == [
        ("img", 4), ("notes", 4)]
    assert [(i.tag, i.step) for i in instance(monitor, "textonly").items] == [("notes", 4)]
    assert monitor.media_skipped == {("textonly", "image"): 1}
    assert threading.active_count() >= 3  # the caller's thread and one worker per backend
