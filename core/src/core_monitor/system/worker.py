"""The sampler process: ``python -m core_monitor.system.worker INTERVAL KEY TRAINER PREFIX``.

Started by ``core_monitor.system.sampler.SystemSampler``. Prints one JSON line per sample,
``{"values": {tag: value}, "wall_time": t, "cpu_seconds": c}`` (``c``: this process's CPU time
so far), on a fixed clock of ``INTERVAL`` seconds (a late reading does not shift the later
ones; ticks missed meanwhile are skipped). A line ``final`` on stdin: one last sample, then
exit; stdin closed (the trainer closed it, or died): exit at once.
"""

from __future__ import annotations

import json
import math
import select
import sys
import time

from .sampler import Reader


def main(argv: list[str]) -> int:
    interval, key, trainer, prefix = float(argv[0]), json.loads(argv[1]), int(argv[2]), argv[3]
    reader = Reader(key, trainer, prefix)
    out = sys.stdout

    def emit() -> None:
        values, wall_time = reader.read()
        out.write(json.dumps({"values": values, "wall_time": wall_time,
                              "cpu_seconds": time.process_time()}) + "\n")
        out.flush()

    due = time.monotonic() + interval
    try:
        while True:
            ready, _, _ = select.select([sys.stdin], [], [], max(due - time.monotonic(), 0.0))
            if ready:
                if sys.stdin.readline().strip() == "final":
                    emit()
                return 0  # closed stdin, or the final sample sent
            emit()
            now = time.monotonic()
            due += interval * max(1, math.ceil((now - due) / interval))
    except BrokenPipeError:  # the trainer is gone
        return 0
    finally:
        reader.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
