"""P-large: what one large call costs in process mode, spooled (now) against pipe by pipe.

A call whose frame is larger than ``PIPE_BUF`` (4 KiB) is written whole into a spool file and
announced by a small frame in the one pass that reaches every pipe or none
(``FanOut.send``). Before, the frame itself was written into each pipe in turn from
Python (``os.writev`` per pipe, waiting for room), which an interrupt could cut between two
pipes. Both arms run on the same monitor, two writer processes whose backend stores nothing
(``NullMedia``, imported by the writers from this folder), alternated: the "pipe by pipe" arm
is the previous engine's loop, the frames going into the same pipes (the writers read either).

Per call size (a 64 KiB and a 1 MiB RGBA image, one ``monitor_write_media`` call each): the
training thread's time per call (``caller``), and per call until both writers handled it (the
calls, then ``flush()``: ``drained``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from harness import alternate, paired, timed

from core_monitor import Capabilities, Image, Monitor, hookimpl
from core_monitor.dispatch import processes, wire
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
    out: dict[str, Any] = {"workload": f"{calls} image calls per arm, 2 writer processes of a "
                           f"null backend, {reps} repetitions, arms alternated", "sizes": {}}
    for label, shape in SIZES.items():
        out["sizes"][label] = _measure(shape, calls[label], reps, root / label.replace(" ", ""))
    return out


def _measure(shape: tuple[int, ...], calls: int, reps: int, log_dir: Path) -> dict[str, Any]:
    monitor = Monitor([NullMedia, NullMedia2], project="bench-large", name="large",
                      log_dir=log_dir, dispatch="process", wait=True)
    dispatch = monitor._dispatch
    assert [c.kind for c in dispatch.channels] == ["process", "process"], (
        "the null backends must run in writer processes")
    pixels = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    pixels.flags.writeable = False
    item = MediaItem("picture", 0, 0.0, Image(pixels))
    kwargs = {"items": (item,)}

    def spooled() -> None:
        for _ in range(calls):
            dispatch.send("monitor_write_media", kwargs)

    def pipe_by_pipe() -> None:  # the previous engine's loop for a frame over PIPE_BUF
        for _ in range(calls):
            dispatch.sent += 1
            parts = wire.encode_parts(("monitor_write_media", kwargs))
            for writer in list(dispatch._live):
                processes.write_all(writer.fd, parts, writer=writer)

    def arm(body: Any, both: dict[str, list[float]]) -> float:
        caller = timed(body)
        drained = caller + timed(monitor.flush)
        both["drained"].append(drained)
        return caller

    drained: dict[str, dict[str, list[float]]] = {"now": {"drained": []},
                                                  "before": {"drained": []}}
    caller = alternate({"now": lambda: arm(spooled, drained["now"]),
                        "before": lambda: arm(pipe_by_pipe, drained["before"])}, reps)
    monitor.close()
    assert not monitor.failures and not monitor.undelivered, (monitor.failures,
                                                              monitor.undelivered)
    return {
        "bytes": int(np.prod(shape)),
        "caller": paired(caller["now"], caller["before"], calls),
        "drained": paired(drained["now"]["drained"], drained["before"]["drained"], calls),
    }
