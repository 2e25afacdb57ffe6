"""One run of P-warmup (``p_warmup.py``):
``warmup_child.py ARM WIDTH STEPS FIRST BACKENDS LOG_DIR``.

``ARM`` is ``none`` (the loop alone) or ``monitor`` (``Monitor(BACKENDS)`` first, the loop
started as soon as it returns). Prints one JSON line: the seconds of the first ``FIRST`` steps
and of the loop, and its median step.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time

import torch
from p_dispatch import _Model


def main(argv: list[str]) -> None:
    arm, width, steps, first = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    backends, log_dir = argv[4], argv[5]
    torch.set_num_threads(1)
    model = _Model(width)
    for _ in range(20):  # the model's own first-step costs, in both arms
        model.step()
    monitor = None
    if arm == "monitor":
        from core_monitor import Monitor

        with contextlib.redirect_stdout(io.StringIO()):
            monitor = Monitor(backends.split(","), project="bench-warmup",
                              name=log_dir.rsplit("/", 1)[-1], log_dir=log_dir)
    times = []
    first_s = 0.0
    start = time.perf_counter()
    for step in range(steps):
        if step == first:
            first_s = time.perf_counter() - start
        begun = time.perf_counter()
        loss = float(model.step())
        if monitor is not None:
            monitor.log({f"train/m{j}": loss + j for j in range(10)}, step=step)
        times.append(time.perf_counter() - begun)
    loop_s = time.perf_counter() - start
    if monitor is not None:
        with contextlib.redirect_stdout(io.StringIO()):
            monitor.close()
    times.sort()
    print(json.dumps({"first_s": first_s, "loop_s": loop_s,
                      "median_step_ms": times[len(times) // 2] * 1e3}))


if __name__ == "__main__":
    main(sys.argv[1:])
