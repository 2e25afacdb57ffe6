"""DeepSpeed's own ``csvMonitor`` and this project's ``csv_monitor`` section (the ``csv``
backend, DeepSpeed's layout) fed the same ``write_events`` lists, in one process.

    torchrun --nproc_per_node 1 ds_csv_side_by_side.py <root> <events.json>

``events.json`` is a list of ``write_events`` calls, each a list of ``[tag, value, step]``.
DeepSpeed's files go to ``<root>/theirs/job``, ours to ``<root>/ours/job``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import deepspeed
from deepspeed.monitor.config import get_monitor_config
from deepspeed.monitor.csv_monitor import csvMonitor

from core_monitor.integrations.deepspeed import DeepSpeedMonitor, monitor_from_ds_config


def main() -> None:
    root, calls = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
    deepspeed.init_distributed(dist_backend="gloo")  # csvMonitor writes on rank 0 only

    def section(where: str) -> dict:
        return {"csv_monitor": {"enabled": True, "output_path": str(root / where),
                                "job_name": "job"}}

    theirs = csvMonitor(get_monitor_config(section("theirs")).csv_monitor)
    ours = DeepSpeedMonitor(monitor_from_ds_config(section("ours")), None)
    for call in calls:
        events = [tuple(event) for event in call]
        theirs.write_events(events)
        ours.write_events(events)
    ours.close()


if __name__ == "__main__":
    main()
