"""Run the benchmarks B1-B7, P3, P7 and the P jobs; print a table, write JSON and markdown.

    python benchmarks/run.py [--quick] [--only B1,B3] [--backends trackio,tensorboard]
                             [--out benchmarks/results] [--keep] [--strict-targets]
                             [--journal-dir /mnt/shared/journals]

Every benchmark runs in its own subprocess (``--worker``), with every SDK folder under one temp
dir, offline. Exit status: 1 when a benchmark failed, including a backend that stored fewer
scalars than it was sent; missed targets are reported, and fail the run only with
``--strict-targets``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import BACKENDS, sandbox_env  # noqa: E402

#: (job id, needed backends), in run order: the null-backend benchmarks first, in processes
#: where no SDK thread competes for the interpreter.
JOBS: list[tuple[str, tuple[str, ...]]] = [
    ("B3", ()),
    ("B5-null", ()),
    ("B4", BACKENDS),
    ("profile", ("tensorboard",)),
    *((f"B1-{b}", (b,)) for b in ("tensorboard", "trackio", "wandb")),
    ("B1-mlflow", ("mlflow",)),
    ("B2", ("tensorboard",)),
    *((f"B5-{b}{arm}", (b,)) for b in ("tensorboard", "trackio", "wandb")
      for arm in ("", "-direct")),
    ("B6", BACKENDS),
    ("B7", ("tensorboard",)),
    ("P3", (*BACKENDS, "mlflow")),
    ("P3-journal", (*BACKENDS, "mlflow")),
    ("P-startup", (*BACKENDS, "mlflow")),
    ("P-sustained", (*BACKENDS, "mlflow")),
    ("P7", (*BACKENDS, "mlflow")),
    ("P-start", (*BACKENDS, "mlflow")),
    ("P-close", (*BACKENDS, "mlflow")),
    ("P7-sustained", (*BACKENDS, "mlflow")),
    ("P7-system", (*BACKENDS, "mlflow")),
    ("P-warmup", (*BACKENDS, "mlflow")),
    ("P-large", ()),
    ("P-host", (*BACKENDS, "mlflow")),
    ("P-outage", ("mlflow",)),
]
JOB_TIMEOUT = 300
#: Jobs that need longer (seconds, full run): P7 starts a monitor per arm and repetition;
#: P-start a fresh interpreter per arm; P7-sustained trains 20,000 steps per arm.
#: (P-start took 621 s and P-close 327 s in --quick on 2 cores at load 10.)
LONG_JOBS = {"P3-journal": 1800, "P7": 1800, "P-start": 3600, "P-close": 1500,
             "P7-sustained": 3600, "P7-system": 1800, "P-warmup": 1800,
             "P-outage": 1800}
#: The worker's environment variable naming ``--journal-dir`` (P3-journal's second journal
#: folder, e.g. on a network filesystem, measured against the temp folder's local disk).
JOURNAL_DIR_ENV = "MONITORS_BENCH_JOURNAL_DIR"
PACKAGES = ("core-monitor", "trackio-monitor", "tensorboard-monitor", "wandb-monitor",
            "trackio", "tensorboard", "wandb", "tensorboardX", "pluggy", "protobuf",
            "mlflow-monitor", "mlflow", "google-crc32c", "torch")


# Worker side -----------------------------------------------------------------------------------


#: Jobs whose module's ``run(quick, root)`` is the whole job, imported only when it runs.
MODULE_JOBS = {"B1-mlflow": "b1_mlflow", "B6": "b6_scale", "B7": "b7_media",
               "P-start": "p_start", "P-close": "p_close", "P7-sustained": "p7_sustained",
               "P-large": "p_large", "P-host": "p_host", "P7-system": "p_system",
               "P3-journal": "p_journal", "P-warmup": "p_warmup", "P-outage": "p_outage"}


def worker(job: str, quick: bool, root: Path) -> dict[str, Any]:
    if job in MODULE_JOBS:
        return importlib.import_module(MODULE_JOBS[job]).run(quick, root)
    if job == "B3":
        import b3_floor

        return b3_floor.run(quick)
    if job == "B4":
        import b4_startup

        return b4_startup.run(quick, root)
    if job == "B5-null":
        import b5_memory

        return b5_memory.run_null(quick)
    if job.startswith("B5-"):
        import b5_memory

        backend, _, direct = job[3:].partition("-")
        return b5_memory.run_backend(backend, quick, root, direct=bool(direct))
    if job.startswith("B1-"):
        import b1_dispatch

        return b1_dispatch.run_b1(job[3:], quick, root)
    if job == "B2":
        import b1_dispatch

        return b1_dispatch.run_b2(quick, root)
    if job.startswith("P"):
        import p_dispatch

        return {"P3": p_dispatch.run_p3, "P7": p_dispatch.run_p7,
                "P-startup": p_dispatch.run_startup,
                "P-sustained": p_dispatch.run_sustained}[job](quick, root)
    if job == "profile":
        import profile_core

        return profile_core.run(quick, root)
    raise ValueError(f"unknown job {job!r}")


# Runner side -----------------------------------------------------------------------------------


def run_job(job: str, quick: bool, root: Path, logs: Path,
            journal_dir: Path | None = None) -> dict[str, Any]:
    folder = root / job
    folder.mkdir(parents=True)
    result = folder / "result.json"
    log = logs / f"{job}.log"
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", job,
            "--result", str(result), "--root", str(folder)]
    if quick:
        argv.append("--quick")
    timeout = LONG_JOBS.get(job, JOB_TIMEOUT)
    env = sandbox_env(root)
    if journal_dir is not None:
        env[JOURNAL_DIR_ENV] = str(journal_dir.absolute())
    started = time.perf_counter()
    with log.open("w") as out:
        try:
            proc = subprocess.run(argv, cwd=folder, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=timeout, check=False)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = f"timeout after {timeout} s"
    elapsed = time.perf_counter() - started
    if code != 0 or not result.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        return {"error": f"exit {code}", "log_tail": tail, "seconds": elapsed}
    data = json.loads(result.read_text())
    data["seconds"] = elapsed
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads (~1/5)")
    parser.add_argument("--only", help="comma-separated job prefixes, e.g. B1,B3 or B1-wandb")
    parser.add_argument("--backends", help="comma-separated backends to include (default all)")
    parser.add_argument("--out", type=Path, default=HERE / "results",
                        help="folder for latest.json and latest.md (default benchmarks/results)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir of SDK files")
    parser.add_argument("--strict-targets", action="store_true",
                        help="exit 1 when a target is missed, too")
    parser.add_argument("--journal-dir", type=Path,
                        help="P3-journal: also time a journal in this folder (e.g. on a "
                             "network filesystem) against one on the temp dir's disk")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        data = worker(args.worker, args.quick, args.root)
        args.result.write_text(json.dumps(data, indent=1))
        return 0

    backends = set(args.backends.split(",")) if args.backends else {*BACKENDS, "mlflow"}
    only = args.only.split(",") if args.only else None
    jobs = [job for job, needs in JOBS
            if set(needs) <= backends
            and (only is None or any(job == o or job.startswith(o + "-") for o in only))]
    root = Path(tempfile.mkdtemp(prefix="monitors-bench-"))
    logs = root / "logs"
    logs.mkdir()
    print(f"benchmarks: {', '.join(jobs)} ({'quick' if args.quick else 'full'}); "
          f"SDK folders under {root}", flush=True)
    results: dict[str, Any] = {}
    started = time.perf_counter()
    for job in jobs:
        results[job] = run_job(job, args.quick, root, logs, args.journal_dir)
        status = "FAILED" if "error" in results[job] else "done"
        print(f"  {job:<16} {status} in {results[job]['seconds']:5.1f} s", flush=True)
    total = time.perf_counter() - started

    import report

    meta = machine(args.quick, total)
    text, markdown, missed = report.render(results, meta)
    print()
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps({"meta": meta, "results": results},
                                                     indent=1))
    (args.out / "latest.md").write_text(markdown)
    print(f"\nwrote {args.out / 'latest.json'} and {args.out / 'latest.md'}")
    failed = [job for job, r in results.items() if "error" in r]
    if args.keep or failed:
        print(f"SDK files and worker logs kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    for job in failed:
        print(f"\nFAILED {job}: {results[job]['error']}", file=sys.stderr)
        for line in results[job]["log_tail"]:
            print(f"    {line}", file=sys.stderr)
    if failed:
        return 1
    if args.strict_targets and missed:
        print(f"targets missed: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


def machine(quick: bool, total: float) -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "mode": "quick" if quick else "full",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "total_seconds": round(total, 1),
        "versions": versions,
    }


if __name__ == "__main__":
    sys.exit(main())
