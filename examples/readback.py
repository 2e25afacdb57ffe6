"""Read a run back from each backend's own storage and check that they all agree.

    python examples/readback.py --log-dir runs --project digits --name RUN [--json]
    python examples/readback.py --record logged.json    # written by train_digits.py --record

Each backend is read through its plugin's read-back helper (Trackio's SQLite database,
TensorBoard's ``EventAccumulator``, wandb's offline ``.wandb`` file, MLflow's
``MlflowClient.get_metric_history``), never through the core.
Prints, per backend, its tags, how many steps it holds and the last ``val/accuracy``; then
whether every backend holds the same (tag, step) points with the same values: exactly for
float64 backends, after rounding to float32 for TensorBoard. With ``--record`` (written by
``train_digits.py --record``) the points are also compared with what the script logged, and so
are its media, read back through each plugin's ``read_media``: every confusion-matrix image
pixel-exact and every weight histogram with the logged counts, at the logged steps.
Exit status: 0 when everything agrees, 1 when not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
from tqdm import tqdm

from core_monitor import RunInfo

Rows = list[tuple[str, int, float]]


def read_backend(backend: str, log_dir: str, project: str, name: str,
                 what: str = "read_rows") -> list:
    """The run's rows from ``backend``'s own storage, through its plugin's ``read_rows`` (or
    ``read_media``: ``[(tag, step, Image | Histogram | Text)]``).

    The plugin is the package of the class the backend's entry point (group
    ``experiment_monitors``) names; every plugin has ``read_rows(run: RunInfo)``, and one that
    stores media ``read_media(run: RunInfo)``.
    """
    reader = getattr(import_module(_entry_point(backend).module.split(".")[0]), what)
    return reader(RunInfo(project=project, name=name, log_dir=Path(log_dir)))


def _entry_point(backend: str):
    found = list(entry_points(group="experiment_monitors", name=backend))
    if len(found) != 1:
        raise LookupError(f"{len(found)} installed plugins provide the backend {backend!r}")
    return found[0]


def media_kinds(backend: str) -> frozenset[str]:
    """The media kinds ``backend``'s class declares it stores (``media_kinds``); loading the
    class imports the plugin, not its SDK."""
    return frozenset(getattr(_entry_point(backend).load(), "media_kinds", ()))


def compare_media(name: str, stored: list, logged: list) -> list[str]:
    """Differences between the media a backend stored and those the script logged."""
    got = {(tag, step): value for tag, step, value in stored}
    problems = []
    for tag, step, kind, expected in logged:
        value = got.get((tag, step))
        if value is None:
            problems.append(f"{name}: no {kind} {tag!r} at step {step}")
        elif kind == "image":  # the logged image is grey: the stored first channel
            pixels = np.ascontiguousarray(np.asarray(value.array)[:, :, 0])
            if hashlib.sha256(pixels.tobytes()).hexdigest() != expected:
                problems.append(f"{name}: image {tag!r} at step {step} differs from the logged")
        elif np.asarray(value.binned()[0]).tolist() != expected:
            problems.append(f"{name}: histogram {tag!r} at step {step}: counts "
                            f"{np.asarray(value.binned()[0]).tolist()[:5]}... != logged "
                            f"{expected[:5]}...")
    return problems


DEFAULT_BACKENDS = ["trackio", "tensorboard", "wandb", "mlflow"]
FLOAT32 = {"tensorboard"}  # backends storing float32 (the others store float64 exactly)


def same(a: float, b: float, float32: bool) -> bool:
    if float32:
        a, b = float(np.float32(a)), float(np.float32(b))
    return a == b or (math.isnan(a) and math.isnan(b))


def compare(name: str, rows: Rows, reference: Rows, ref_name: str) -> list[str]:
    """Differences between two backends' points, keyed by (tag, step); [] when they agree."""
    got = {(tag, step): value for tag, step, value in rows}
    want = {(tag, step): value for tag, step, value in reference}
    problems = []
    if len(got) != len(rows) or len(want) != len(reference):
        problems.append(f"{name}: a (tag, step) appears more than once")
    for label, keys in (("missing", want.keys() - got.keys()), ("extra", got.keys() - want.keys())):
        if keys:
            problems.append(f"{name}: {len(keys)} points {label} vs {ref_name}, "
                            f"e.g. {sorted(keys)[:3]}")
    float32 = name in FLOAT32 or ref_name in FLOAT32
    bad = [k for k in want.keys() & got.keys() if not same(got[k], want[k], float32)]
    if bad:
        k = sorted(bad)[0]
        problems.append(f"{name}: {len(bad)} values differ from {ref_name}, "
                        f"e.g. {k}: {got[k]!r} != {want[k]!r}")
    return problems


def summary(rows: Rows) -> dict:
    val = [(step, value) for tag, step, value in rows if tag == "val/accuracy"]
    return {"tags": sorted({tag for tag, _, _ in rows}), "points": len(rows),
            "steps": len({step for _, step, _ in rows}),
            "last_val_accuracy": max(val)[1] if val else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--record", default=None, help="JSON from train_digits.py --record")
    p.add_argument("--log-dir", default=None, help="default: the record's, else runs")
    p.add_argument("--project", default=None, help="default: the record's, else digits")
    p.add_argument("--name", default=None, help="the run name (default: the record's)")
    p.add_argument("--backends", default=None, help="default: the record's, else all four")
    p.add_argument("--json", action="store_true", help="print rows and verdict as JSON")
    args = p.parse_args(argv)

    record = json.loads(Path(args.record).read_text()) if args.record else None
    for key, default in (("log_dir", "runs"), ("project", "digits"), ("name", None)):
        if getattr(args, key) is None:
            setattr(args, key, record[key] if record else default)
    if args.name is None:
        p.error("give --name (the run name train_digits.py printed) or --record")
    backends = (args.backends.split(",") if args.backends
                else record["backends"] if record else DEFAULT_BACKENDS)
    read, problems = {}, []
    # Reading a backend back imports its SDK and parses its storage: seconds each. The bar goes
    # to stderr, on a terminal only (stdout stays the report, or --json's JSON).
    for name in tqdm(backends, desc="reading back", unit="backend", disable=None, leave=False):
        try:
            read[name] = [(t, int(s), float(v)) for t, s, v in read_backend(
                name, args.log_dir, args.project, args.name)]
        except Exception as error:  # missing plugin, no such run, unreadable file
            problems.append(f"{name}: cannot read back: {type(error).__name__}: {error}")
    if record:
        reference, ref_name = [(t, s, v) for t, s, v in record["rows"]], "the record"
    else:  # the first float64 backend read
        ref_name = next((n for n in read if n not in FLOAT32), next(iter(read), None))
        reference = read.get(ref_name, [])
    for name, rows in read.items():
        if name != ref_name:
            problems += compare(name, rows, reference, ref_name)
    media = {}
    for name in read if record and record.get("media") else ():
        # Only the kinds a backend declares were sent to it (the core skips the others).
        logged = [item for item in record["media"] if item[2] in media_kinds(name)]
        if not logged:
            continue
        try:
            media[name] = read_backend(name, args.log_dir, args.project, args.name, "read_media")
        except Exception as error:  # a plugin without read_media, an unreadable file
            problems.append(f"{name}: cannot read media back: {type(error).__name__}: {error}")
            continue
        problems += compare_media(name, media[name], logged)

    if args.json:
        kinds = {n: [(t, s, v.kind) for t, s, v in m] for n, m in media.items()}
        print(json.dumps({"backends": {n: {**summary(r), "rows": r, "media": kinds.get(n, [])}
                                       for n, r in read.items()},
                          "reference": ref_name, "agree": not problems, "problems": problems}))
    else:
        for name, rows in read.items():
            s = summary(rows)
            last = s["last_val_accuracy"]
            print(f"{name:12} {s['steps']:5d} steps {s['points']:6d} points  last val/accuracy "
                  f"{'-' if last is None else f'{last:.6f}'}  tags {', '.join(s['tags'])}")
            if name in media:
                print(f"{'':12} {len(media[name])} media values: "
                      f"{', '.join(sorted({f'{t} ({v.kind})' for t, _, v in media[name]}))}")
        print("\n".join(problems) if problems else
              f"all {len(read)} backends agree with {ref_name} on every step and value")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
