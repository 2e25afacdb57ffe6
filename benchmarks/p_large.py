"""P-large: what one large call costs in process mode (one journal record, read by every
writer) against thread mode (a reference to the call in each worker thread's queue).

In process mode a call of any size is encoded once and appended to the run's journal with one
``write`` (``FanOut._pass``); every writer process reads it from there. Two monitors, each
with two backends that store nothing (``NullMedia``, imported by the writers from this
folder), one in writer processes and one in worker threads, alternated.

Per call size (a 64 KiB and a 1 MiB RGBA image, one ``monitor_write_media`` call each): the
training thread's time per call (``caller``), and per call until both backends handled it (the
calls, then ``flush()``: ``drained``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from harness import alternate, paired, timed

from core_monitor import Capabilities, Image, Monitor, hookimpl
from core_monitor.media import MediaItem

#: Image shapes (RGBA, uint8): exactly 64 KiB and 1 MiB of pixels.
SIZES = {"64 KiB": (128, 128, 4), "1 MiB": (512, 512, 4)}


class NullMedia:
    """Takes images and stores nothing: what is left is the dispatch's cost."""

    capabilities = Capabilities(name="null-media", media_kinds={"image"})

    def __init__(self, run: Any) -> None:
        self.run = run

    @hookimpl
    def monitor_write_media(self, items: Any) -> None:
        pass


class NullMedia2(NullMedia):
    name = "null-media-2"


def run(quick: bool, root: Path) -> dict[str, Any]:
    reps = 3 if quick else 7
    calls = {"64 KiB": 100 if quick else 300, "1 MiB": 10 if quick else 30}
    # The writers import this module by path: a folder on PYTHONPATH is run in a process.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    out: dict[str, Any] = {"workload": f"{calls} image calls per arm, a null backend in 2 writer "
                           "processes (process mode) or 2 worker threads (thread mode), "
                           f"{reps} repetitions, arms alternated", "sizes": {}}
    for label, shape in SIZES.items():
        out["sizes"][label] = _measure(shape, calls[label], reps, root / label.replace(" ", ""))
    return out


def _measure(shape: tuple[int, ...], calls: int, reps: int, log_dir: Path) -> dict[str, Any]:
    monitors = {mode: Monitor([NullMedia, NullMedia2], project="bench-large", name=mode,
                              log_dir=log_dir, dispatch=mode, wait=True)
                for mode in ("process", "thread")}
    assert [c.kind for c in monitors["process"]._dispatch.channels] == ["process", "process"], (
        "the null backends must run in writer processes")
    pixels = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    pixels.flags.writeable = False
    item = MediaItem("picture", 0, 0.0, Image(pixels))
    kwargs = {"items": (item,)}

    def arm(monitor: Monitor, both: dict[str, list[float]]) -> float:
        dispatch = monitor._dispatch

        def body() -> None:
            for _ in range(calls):
                dispatch.send("monitor_write_media", kwargs)

        caller = timed(body)
        drained = caller + timed(monitor.flush)
        both["drained"].append(drained)
        return caller

    drained: dict[str, dict[str, list[float]]] = {"process": {"drained": []},
                                                  "thread": {"drained": []}}
    caller = alternate({mode: (lambda mode=mode: arm(monitors[mode], drained[mode]))
                        for mode in monitors}, reps)
    for monitor in monitors.values():
        monitor.close()
        assert not monitor.failures and not monitor.undelivered, (monitor.failures,
                                                                  monitor.undelivered)
    return {
        "bytes": int(np.prod(shape)),
        "caller": paired(caller["process"], caller["thread"], calls),
        "drained": paired(drained["process"]["drained"], drained["thread"]["drained"], calls),
    }
