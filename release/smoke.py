"""What a user does first after `pip install core-monitor <backend>-monitor ...`: log, read back.

    python release/smoke.py --log-dir DIR [--steps 20] [--backends trackio,tensorboard,...]

Logs ``--steps`` steps of two scalars (``train/loss``, ``lr``) and a config to every backend
given (default: every installed one, from ``monitors list``'s entry points) through one
``Monitor``, closes it, then reads each backend's own storage back through its plugin's reader
(``read_rows(run)``, ``read_config(run)``) and compares: every (tag, step) logged must be
there, with the value logged (float32 precision for TensorBoard's event files), and the config's
keys; as the backend's ``Capabilities`` declare, only each tag's last point for one that keeps
the latest (``history="latest"``: prometheus) and no config for one that stores none.
Prints one line per backend. Exit status 0 when every backend holds what was logged.

Run in a venv holding only the released distributions (``nox -s release``): it imports the
installed packages, never this checkout.
"""

from __future__ import annotations

import argparse
import struct
import sys
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

from core_monitor import Capabilities, Monitor, RunInfo

CONFIG = {"lr": 0.1, "batch": 32, "optimizer": "sgd"}


def logged(steps: int) -> dict[tuple[str, int], float]:
    """The points the smoke run logs: a falling loss and a decaying learning rate."""
    points = {}
    for step in range(steps):
        points["train/loss", step] = 1.0 / (step + 1)
        points["lr", step] = 0.1 * 0.9**step
    return points


def float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def compare(backend: str, stored: list[tuple[str, int, float]],
            points: dict[tuple[str, int], float]) -> list[str]:
    """What ``stored`` (a plugin's ``read_rows``) lacks or holds differently from ``points``."""
    exact = backend != "tensorboard"  # TensorBoard's scalars are float32
    got = {(tag, step): value for tag, step, value in stored}
    problems = []
    for (tag, step), value in points.items():
        if (tag, step) not in got:
            problems.append(f"no {tag!r} at step {step}")
        elif got[tag, step] != (value if exact else float32(value)):
            problems.append(f"{tag!r} at step {step}: stored {got[tag, step]!r}, logged {value!r}")
    extra = sorted(set(got) - set(points))
    if extra:
        problems.append(f"{len(extra)} points never logged, e.g. {extra[0]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backends", default=None,
                        help="comma-separated backend names (default: every installed one)")
    args = parser.parse_args(argv)
    found = {ep.name: ep for ep in entry_points(group="experiment_monitors")}
    backends = args.backends.split(",") if args.backends else sorted(found)
    points = logged(args.steps)
    with Monitor(backends, project="release-smoke", name="smoke", config=CONFIG,
                 log_dir=args.log_dir, strict=True) as monitor:
        for step in range(args.steps):
            monitor.log({"train/loss": points["train/loss", step], "lr": points["lr", step]},
                        step=step)
    run = RunInfo(project="release-smoke", name="smoke", log_dir=args.log_dir)
    failed = False
    for backend in backends:
        plugin = import_module(found[backend].module.split(".")[0])
        stored = plugin.read_rows(run)
        caps = Capabilities.of(found[backend].load())
        kept = points
        if caps.history == "latest":  # each tag's last point, and only that, is kept
            kept = {(tag, step): v for (tag, step), v in points.items() if step == args.steps - 1}
        problems = compare(backend, stored, kept)
        config = plugin.read_config(run)
        wanted = CONFIG if caps.stores_config else {}
        lost = sorted(k for k in wanted if k not in config)
        if lost:
            problems.append(f"config keys {lost} not stored (stored: {sorted(config)})")
        failed = failed or bool(problems)
        status = "ok" if not problems else "FAILED: " + "; ".join(problems[:5])
        print(f"smoke: {backend:<12} read back {len(stored)} of {len(kept)} points kept "
              f"(steps 0..{args.steps - 1}) and {len(wanted) - len(lost)} of {len(wanted)} "
              f"config keys: {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
