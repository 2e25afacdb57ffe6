"""B7 media: what logging a 64x64 image costs the caller's thread, and what encoding costs.

A = ``Monitor([NullMediaBackend]).log({"samples": Image(pixels)}, step=i)``: a backend whose
``monitor_write_media`` does nothing, so A is what stays on the training thread once dispatch
runs in the background: validation and the private copy (``core_monitor.media.prepare``).
B = ``Monitor(["tensorboard"]).log(...)`` with dispatch on the caller's thread: A plus the PNG
encoding and the event write, i.e. what the background thread takes off the caller.
Both for uint8 RGB pixels and for float pixels in [0, 1] (scaled and rounded on the caller's
thread). The TensorBoard run is read back once (every image stored). Reported, no target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from harness import alternate, paired, spread, timed

from core_monitor import Capabilities, Image, Monitor, RunInfo, hookimpl


class NullMediaBackend:
    """Declares every media kind and stores nothing."""

    capabilities = Capabilities(name="null-media", media_kinds={"image", "histogram", "text"})

    def __init__(self, run: Any) -> None:
        self.run = run

    @hookimpl
    def monitor_write_media(self, items: Any) -> None:
        pass


def run(quick: bool, root: Path) -> dict[str, Any]:
    calls = 200 if quick else 1000
    reps = 3 if quick else 7
    rng = np.random.default_rng(0)
    arrays = {"uint8": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
              "float32": rng.random((64, 64, 3), dtype=np.float32)}
    out: dict[str, Any] = {"workload": f"{calls} log calls of one 64x64x3 image, {reps} "
                           "repetitions", "dtypes": {}}
    for dtype, pixels in arrays.items():
        out["dtypes"][dtype] = _measure(dtype, pixels, calls, reps, root)
    return out


def _measure(dtype: str, pixels: Any, calls: int, reps: int, root: Path) -> dict[str, Any]:
    null = Monitor([NullMediaBackend], project="bench-b7", name=f"null-{dtype}")
    board = Monitor(["tensorboard"], project="bench-b7", name=f"tb-{dtype}", log_dir=root)
    logged = {"null": 0, "tb": 0}

    def arm(monitor: Monitor, key: str) -> float:
        start = logged[key]
        logged[key] += calls

        def body() -> None:
            for i in range(start, start + calls):
                monitor.log({"samples": Image(pixels)}, step=i)
        seconds = timed(body)
        if key == "tb":
            board.flush()  # untimed: keeps the writer's queue from growing across arms
        return seconds

    arm(null, "null"), arm(board, "tb")  # warm-up (imports PIL on the first image)
    times = alternate({"caller": lambda: arm(null, "null"),
                       "tensorboard": lambda: arm(board, "tb")}, reps)
    null.close()
    board.close()
    stored = _images_stored(board.run)
    if stored != logged["tb"]:
        raise AssertionError(f"tensorboard stored {stored} images, {logged['tb']} were logged")
    stats = paired(times["tensorboard"], times["caller"], per=calls)
    return {
        "caller_us_per_image": spread([t / calls * 1e6 for t in times["caller"]]),
        "tensorboard_us_per_image": spread([t / calls * 1e6 for t in times["tensorboard"]]),
        "encode_and_write_us": stats["added_us"],
        "images_read_back": stored,
    }


def _images_stored(run: RunInfo) -> int:
    from tensorboard_monitor import read_media

    return sum(1 for _, _, value in read_media(run) if value.kind == "image")


if __name__ == "__main__":
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(run(quick=True, root=Path(folder)), indent=1))
