"""P-outage: a sweep of trainers logging to one MLflow tracking server (a PostgreSQL backend
store) that is down for 30 s in the middle of their training.

Eight trainers at once (quick: four), separate processes, each ``Monitor(["mlflow"],
mlflow={"tracking_uri": ...})`` with the users' defaults (the backend in its writer process,
the run journal on, the backend's own retry options), each 2,000 steps of 10 scalars (quick:
1,000). A step is a fixed piece of CPU work (``WORK_LOOPS`` iterations of a Python loop, about
1-2 ms on an idle core), a ``STEP_SLEEP`` sleep, then the ``log()``: eight such trainers use
well under one of two cores, leaving the rest to their writers, the server and PostgreSQL. The
sleep (60 ms, a step of about 63 ms) makes the sweep outlast the restart, which takes an MLflow
server 20-30 s on a loaded machine, by half a minute. The trainers start their monitors
(``wait=True``), then begin their loops together; 30 s later the server is SIGKILLed (its
process group, by PID), and 30 s after that started again on the same port (quick: 10 s and
10 s; ``FULL``, ``QUICK``).

Reported, per trainer: the median step time (work + sleep + ``log()``) of the steps begun
before the kill, between the kill and the server answering ``/health`` again, and after; the
ratio during/before (target: at most 1.05 for every trainer) and after/before; the longest
``log()``. For the sweep: rows lost and rows duplicated, read back from the server with the
plugin's reader (``mlflow_monitor.read_rows``; targets: 0 and 0), and the delivery lag: seconds
from the server answering again until it holds every step each trainer began before that
moment (polled every ``POLL_SECONDS``). It holds the backend's back-off (the next attempt comes
at most ``retry_max_delay``, 10 s by default, after the server is back), its buffering (a row
waits for 1,000 scalars or ``flush_secs``, 5 s) and the time to send the backlog.

Run: ``nox -s bench -- --only P-outage`` (``--quick`` for the short variant). Skipped with a
reason where PostgreSQL is not installed.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import spread

#: Seconds each step sleeps (the trainer's wait on data or a device, which costs no CPU).
STEP_SLEEP = 0.060
#: Iterations of the fixed CPU work of each step (about 1-2 ms of one idle core).
WORK_LOOPS = 20_000
#: Scalars logged per step.
SCALARS = 10
#: The experiment the trainers log to.
PROJECT = "p-outage"
#: Seconds between two looks at what the server holds, once it answers again.
POLL_SECONDS = 0.5
#: Seconds the trainers get to start their monitors (8 writers importing MLflow on 2 cores).
READY_TIMEOUT = 600.0
#: (trainers, steps, seconds into training the server is killed, seconds it stays down).
FULL = (8, 2_000, 30.0, 30.0)
QUICK = (4, 1_000, 10.0, 10.0)
#: The scalar whose steps the lag poll reads (every step's scalars travel in one request).
PROBE = "m/scalar_0"


def row(step: int) -> dict[str, float]:
    """The 10 scalars of ``step``: distinct per step, so a duplicate is a second point."""
    return {f"m/scalar_{j}": step + j / 10 for j in range(SCALARS)}


def work() -> int:
    """The step's fixed CPU work."""
    total = 0
    for i in range(WORK_LOOPS):
        total += i * i % 7
    return total


# One trainer (a process of its own) --------------------------------------------------------------


def trainer(index: int, steps: int, uri: str, folder: Path) -> None:
    """Start the monitor, say ready, wait for the go, train, close; write the timings."""
    import warnings

    from core_monitor import BackendWarning, Monitor

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BackendWarning)
        monitor = Monitor(["mlflow"], project=PROJECT, name=f"trainer-{index}",
                          log_dir=folder / f"trainer-{index}", wait=True,
                          mlflow={"tracking_uri": uri})
        (folder / f"ready-{index}").touch()
        go = folder / "go"
        while not go.exists():
            time.sleep(0.01)
        starts, step_s, log_s = [], [], []
        for step in range(steps):
            began_wall, began = time.time(), time.perf_counter()
            work()
            time.sleep(STEP_SLEEP)
            logged = time.perf_counter()
            monitor.log(row(step), step=step)
            ended = time.perf_counter()
            starts.append(began_wall)
            step_s.append(ended - began)
            log_s.append(ended - logged)
        closing = time.perf_counter()
        monitor.close()
        close_s = time.perf_counter() - closing
    result = {"starts": starts, "step_s": step_s, "log_s": log_s, "close_s": close_s,
              "ended": time.time(),
              "warnings": [str(w.message)[:400] for w in caught
                           if issubclass(w.category, Warning)]}
    (folder / f"result-{index}.json").write_text(json.dumps(result))


# What used the CPU (the orchestrator's view) ------------------------------------------------------


def process_table() -> dict[int, tuple[int, int, float]]:
    """Every live process: PID -> (parent's PID, process group, CPU seconds user + system)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        out[int(entry)] = (int(fields[1]), int(fields[2]),
                           (int(fields[11]) + int(fields[12])) / tick)
    return out


def descendants(table: dict[int, tuple[int, int, float]], roots: set[int]) -> set[int]:
    """The PIDs below ``roots`` (children, their children, ...), ``roots`` excluded."""
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy (not idle, not waiting on I/O) since boot."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


class CpuMeter(threading.Thread):
    """Every ``POLL_SECONDS`` until stopped: the machine's busy CPU seconds and those of the
    MLflow server's and PostgreSQL's process groups, of the trainers and of their writers
    (every process below a trainer). ``ids()`` gives the server's and PostgreSQL's PIDs
    (``None`` while not started; a server restarted is another group) and the trainers'.
    ``cores(a, b)``: the cores each used between two times."""

    def __init__(self, ids: Callable[[], tuple[dict[str, int | None], set[int]]]) -> None:
        super().__init__(daemon=True, name="p-outage:cpu")
        self.ids = ids
        self.samples: list[tuple[float, float, dict[str, tuple[Any, float]]]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            now = time.time()
            groups, trainers = self.ids()
            table = process_table()
            used: dict[str, tuple[Any, float]] = {
                name: (pgid, sum(cpu for _, group, cpu in table.values() if group == pgid))
                for name, pgid in groups.items()}
            below = descendants(table, trainers)
            # a process's CPU counts between two samples where it is alive: keyed by PID
            used["trainers"] = (None, {pid: table[pid][2] for pid in trainers if pid in table})
            used["writers"] = (None, {pid: table[pid][2] for pid in below})
            self.samples.append((now, machine_busy(), used))
            self.stopped.wait(POLL_SECONDS)

    def cores(self, begin: float, end: float) -> dict[str, float]:
        """Cores used between ``begin`` and ``end`` (``time.time()``): ``machine``, each
        server's group (counted between two samples of the same group), the trainers and their
        writers (counted per process alive at both samples)."""
        inside = [s for s in self.samples if begin <= s[0] <= end]
        if len(inside) < 2:
            return {}
        span = inside[-1][0] - inside[0][0]
        out = {"machine": (inside[-1][1] - inside[0][1]) / span}
        for name in inside[0][2]:
            used = 0.0
            for (_, _, a), (_, _, b) in itertools.pairwise(inside):
                (key_a, cpu_a), (key_b, cpu_b) = a[name], b[name]
                if isinstance(cpu_a, dict):
                    used += sum(max(0.0, cpu_b[pid] - cpu) for pid, cpu in cpu_a.items()
                                if pid in cpu_b)
                elif key_a is not None and key_a == key_b:
                    used += max(0.0, cpu_b - cpu_a)
            out[name] = used / span
        return out


# The sweep (the benchmark's worker process) ------------------------------------------------------


def run(quick: bool, root: Path) -> dict[str, Any]:
    from pg_servers import MlflowPgServer, PostgresServer, postgres_bin

    binaries = postgres_bin()
    if binaries is None:
        return {"skipped": "PostgreSQL is not installed (initdb and postgres not found; on "
                           "Debian or Ubuntu: apt-get install postgresql)"}
    trainers, steps, kill_at, down_for = QUICK if quick else FULL
    postgres = PostgresServer(binaries)
    server = MlflowPgServer(root / "mlflow-server", postgres)
    processes: list[subprocess.Popen[bytes]] = []
    meter = CpuMeter(lambda: ({"mlflow server": server.process and server.process.pid,
                               "postgres": postgres.process and postgres.process.pid},
                              {p.pid for p in processes}))
    try:
        postgres.start()
        server.start()
        timeline, polls = sweep(server, processes, root, trainers, steps, kill_at, down_for,
                                meter)
        return summarize(server.uri, root, trainers, steps, timeline, polls, meter, quick)
    finally:
        meter.stopped.set()
        for process in processes:  # only when the sweep failed: each exited otherwise
            if process.poll() is None:
                process.kill()
                process.wait()
        server.kill()
        postgres.remove()


def sweep(server: Any, processes: list[subprocess.Popen[bytes]], root: Path, trainers: int,
          steps: int, kill_at: float, down_for: float, meter: CpuMeter,
          ) -> tuple[dict[str, float], list[tuple[float, list[int]]]]:
    """Start the trainers, let them go, kill the server and start it again; poll what it holds
    until every trainer ended. Returns the times (``time.time()``) of the go, the kill, the
    restart and the server's first answer, and the polls ``(time, [first step missing per
    trainer])``; ``meter`` runs from the go to the end."""
    for index in range(trainers):
        log = (root / f"trainer-{index}.log").open("wb")
        processes.append(subprocess.Popen(
            [sys.executable, __file__, str(index), str(steps), server.uri, str(root)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        log.close()
    began = time.monotonic()
    while not all((root / f"ready-{i}").exists() for i in range(trainers)):
        failed(processes, root)
        if time.monotonic() - began > READY_TIMEOUT:
            raise TimeoutError(f"the trainers' monitors did not start in {READY_TIMEOUT} s")
        time.sleep(0.1)
    go = time.time()
    (root / "go").touch()
    meter.start()
    time.sleep(max(0.0, go + kill_at - time.time()))
    killed = time.time()
    server.kill()
    time.sleep(max(0.0, killed + down_for - time.time()))
    restarted = time.time()
    server.start(wait=False)
    server.wait_healthy()
    back = time.time()
    polls = poll(server.uri, processes, root, trainers)
    meter.stopped.set()
    return {"go": go, "killed": killed, "restarted": restarted, "back": back}, polls


def failed(processes: list[subprocess.Popen[bytes]], root: Path) -> None:
    """Raise when a trainer exited with an error, with the end of its log."""
    for index, process in enumerate(processes):
        if process.poll() not in (None, 0):
            tail = (root / f"trainer-{index}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"trainer {index} exited with {process.returncode}:\n{tail}")


def poll(uri: str, processes: list[subprocess.Popen[bytes]], root: Path,
         trainers: int) -> list[tuple[float, list[int]]]:
    """Every ``POLL_SECONDS`` until the trainers ended: the first step each trainer's run on
    the server lacks, with the time of the look. Read from the run's latest ``PROBE`` value
    (its value is its step): one small request per run, and the backend sends a run's steps
    in order (``summarize`` reads every row back to check it)."""
    import mlflow

    from core_monitor import RunInfo
    from mlflow_monitor import find_run

    client = mlflow.MlflowClient(tracking_uri=uri)
    run_ids: dict[int, str] = {}
    polls = []
    while True:
        done = all(p.poll() is not None for p in processes)
        failed(processes, root)
        now = time.time()
        firsts = []
        for index in range(trainers):
            try:
                if index not in run_ids:
                    run_ids[index] = find_run(RunInfo(project=PROJECT, name=f"trainer-{index}"),
                                              tracking_uri=uri).info.run_id
                latest = client.get_run(run_ids[index]).data.metrics.get(PROBE)
            except Exception:  # the server is busy starting, or the run is not there yet
                latest = None
            firsts.append(0 if latest is None else int(latest) + 1)
        polls.append((now, firsts))
        if done:
            return polls
        time.sleep(max(0.0, now + POLL_SECONDS - time.time()))


def summarize(uri: str, root: Path, trainers: int, steps: int, timeline: dict[str, float],
              polls: list[tuple[float, list[int]]], meter: CpuMeter,
              quick: bool) -> dict[str, Any]:
    from core_monitor import RunInfo
    from mlflow_monitor import read_rows

    results = [json.loads((root / f"result-{i}.json").read_text()) for i in range(trainers)]
    lags = []
    for index, result in enumerate(results):
        # the last step begun before the server answered again, and when it was all there
        wanted = max((s for s, t in enumerate(result["starts"]) if t < timeline["back"]),
                     default=-1)
        lags.append(next((t - timeline["back"] for t, firsts in polls
                          if firsts[index] > wanted), None))
    known = [lag for lag in lags if lag is not None]
    timeline["all_in"] = timeline["back"] + max(known, default=0.0)
    timeline["loops_end"] = min(r["starts"][-1] for r in results)
    per: list[dict[str, Any]] = []
    lost = duplicated = 0
    for index, result in enumerate(results):
        rows = read_rows(RunInfo(project=PROJECT, name=f"trainer-{index}"), tracking_uri=uri)
        counts = Counter((tag, step) for tag, step, _ in rows)
        expected = {(tag, step) for step in range(steps) for tag in row(step)}
        lost += len(expected - set(counts))
        duplicated += sum(n - 1 for n in counts.values()) + len(set(counts) - expected)
        periods = split(result, timeline)
        step_ms = {k: statistics.median(v["step_s"]) * 1e3 for k, v in periods.items()
                   if v["step_s"]}
        log_us = {k: statistics.median(v["log_s"]) * 1e6 for k, v in periods.items()
                  if v["log_s"]}
        longest = max(range(steps), key=result["log_s"].__getitem__)
        per.append({
            "trainer": index, "step_ms": step_ms, "log_median_us": log_us,
            "steps": {k: len(v["step_s"]) for k, v in periods.items()},
            "during_over_before": step_ms["during"] / step_ms["before"],
            "after_over_before": step_ms["after"] / step_ms["before"],
            "log_max_ms": result["log_s"][longest] * 1e3,
            "log_max_at_s": result["starts"][longest] - timeline["go"],
            "log_p99_us": sorted(result["log_s"])[int(len(result["log_s"]) * 0.99)] * 1e6,
            "close_s": result["close_s"], "lag_s": lags[index], "warnings": result["warnings"],
        })
    worst = max(p["during_over_before"] for p in per)
    bounds = [("before", "go", "killed"), ("during", "killed", "back"),
              ("catching_up", "back", "all_in"), ("caught_up", "all_in", "loops_end")]
    return {
        "workload": f"{trainers} trainers x {steps:,} steps x {SCALARS} scalars to one mlflow "
                    f"server (PostgreSQL store), process mode, default options; a step = "
                    f"{WORK_LOOPS:,} loop iterations of CPU work + {STEP_SLEEP * 1e3:g} ms sleep "
                    "+ log(); server SIGKILLed "
                    f"{timeline['killed'] - timeline['go']:.1f} s after the go, restarted "
                    f"{timeline['restarted'] - timeline['killed']:.1f} s later, answering "
                    f"{timeline['back'] - timeline['restarted']:.1f} s after that",
        "mode": "quick" if quick else "full",
        "timeline_s": {k: round(v - timeline["go"], 2) for k, v in timeline.items()},
        "rows_expected": trainers * steps * SCALARS, "rows_lost": lost,
        "rows_duplicated": duplicated,
        "trainers": per,
        "during_over_before": spread([p["during_over_before"] for p in per]),
        "after_over_before": spread([p["after_over_before"] for p in per]),
        "step_ms": {k: spread([p["step_ms"][k] for p in per if k in p["step_ms"]])
                    for k in PERIODS if any(k in p["step_ms"] for p in per)},
        "log_median_us": {k: spread([p["log_median_us"][k] for p in per
                                     if k in p["log_median_us"]])
                          for k in PERIODS if any(k in p["log_median_us"] for p in per)},
        "cores": {name: meter.cores(timeline[a], timeline[b]) for name, a, b in bounds},
        "log_max_ms": max(p["log_max_ms"] for p in per),
        "lag_s": spread(known) if known else None, "lag_unknown": len(lags) - len(known),
        "close_s": spread([p["close_s"] for p in per]),
        "load_avg": os.getloadavg(),
        "pass": lost == 0 and duplicated == 0 and worst <= 1.05,
        "target": "0 lost, 0 duplicated, during/before <= 1.05 for every trainer",
    }


#: The periods of a trainer's steps, by when each began: before the kill; while the server was
#: down or starting; after it answered again (``after``), split into until it held every step
#: begun before that (``catching_up``, as seen for the slowest trainer) and later.
PERIODS = ("before", "during", "after", "catching_up", "caught_up")


def split(result: dict[str, Any], timeline: dict[str, float]) -> dict[str, dict[str, list[float]]]:
    """A trainer's step and ``log()`` times (seconds) per period (``PERIODS``)."""
    periods: dict[str, dict[str, list[float]]] = {
        k: {"step_s": [], "log_s": []} for k in PERIODS}
    for began, step_s, log_s in zip(result["starts"], result["step_s"], result["log_s"],
                                    strict=True):
        keys = (["before"] if began < timeline["killed"] else
                ["during"] if began < timeline["back"] else
                ["after", "catching_up" if began < timeline["all_in"] else "caught_up"])
        for key in keys:
            periods[key]["step_s"].append(step_s)
            periods[key]["log_s"].append(log_s)
    return periods


if __name__ == "__main__":  # a trainer: INDEX STEPS URI FOLDER
    trainer(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
