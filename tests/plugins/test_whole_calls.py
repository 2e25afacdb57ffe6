"""One call reaches every backend whole, or none, at every size (issue 34 item 3).

A call of any size (a scalar, an image, a row of thousands of tags) is one record of the run's
journal, appended with one ``write`` in the same C-level pass that puts it into the worker
threads' queues; writer processes read it from there. Read back from each tracker's own
storage: an interrupt (a signal handler raising) at a random point of ``log()`` leaves every
backend with the same calls, each whole; a wide row and an image reach every backend; a
trainer killed right after a large call loses none of it, and a journal of the monitor's own
(``journal=False``) is removed by the last writer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from jsonl_monitor import JsonlMonitor
from jsonl_monitor import read_rows as read_jsonl
from trackers import READERS

import tensorboard_monitor
import trackio_monitor
from core_monitor import BackendWarning, Image, Monitor, RunInfo

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
              pytest.mark.process]

#: The backends of these tests, each read back from its own storage.
READ = {"jsonl": read_jsonl, "tensorboard": READERS["tensorboard"],
        "trackio": READERS["trackio"]}
#: Tags per call, from a 10-byte frame's worth to a 64 KiB one (about 16 bytes per tag).
WIDTHS = (1, 3, 40, 200, 600, 1500, 4000)


class Interrupted(Exception):
    """What the test's SIGALRM handler raises wherever the training thread is."""


def _raise(signum, frame):
    raise Interrupted


def row(step: int, width: int) -> dict[str, float]:
    """Call ``step``'s values: exact in float32 (TensorBoard's ``simple_value``)."""
    return {f"w{i}": float(step) + i / 8 for i in range(width)}


def by_step(rows: list[tuple[str, int, float]]) -> dict[int, dict[str, float]]:
    found: dict[int, dict[str, float]] = defaultdict(dict)
    for tag, step, value in rows:
        found[step][tag] = value
    return found


class LocalJsonl(JsonlMonitor):
    """The JSON-lines backend under another name and file, its class defined in this test
    module: a fresh interpreter may not import it, so it runs in a worker thread beside the
    writer processes (``processes._why_not_in_a_process``)."""

    name = "local"

    def __init__(self, run: RunInfo) -> None:
        super().__init__(local_run(run))


def local_run(run: RunInfo) -> RunInfo:
    return dataclasses.replace(run, name=f"{run.name}-local")


def interrupt_stream(monitor: Monitor, calls: int) -> tuple[dict[int, int], set[int]]:
    """Log at least ``calls`` calls of ``WIDTHS`` tags in turn, each interrupted by a SIGALRM
    handler raising at a random point, and more (up to 20 times as many) until interrupts have
    hit at least 10 calls, small and spooled ones among them: how many land inside ``log()``
    depends on the machine's load. The width of every call, and the calls that returned."""
    rng = random.Random(34)
    monitor.flush()  # the writers started: log() is then all that the timer interrupts
    widths: dict[int, int] = {}
    returned: set[int] = set()
    previous = signal.signal(signal.SIGALRM, _raise)
    try:
        step = -1
        while (step := step + 1) < calls or (
                not _enough(widths, returned) and step < 20 * calls):
            widths[step] = width = WIDTHS[step % len(WIDTHS)]
            metrics = row(step, width)
            # log() takes about 5 us per tag here; the interrupt lands anywhere within it
            delay = rng.uniform(1e-6, 2e-4 + width * 6e-6)
            done = False
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                monitor.log(metrics, step=step)
                done = True
                signal.setitimer(signal.ITIMER_REAL, 0)
            except Interrupted:
                pass
            if done:
                returned.add(step)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    monitor.close()
    # The test proves something only when interrupts hit calls of both kinds of frame.
    assert _enough(widths, returned), sorted(set(widths) - returned)
    return widths, returned


def _enough(widths: dict[int, int], returned: set[int]) -> bool:
    """Whether interrupts hit at least 10 calls, small (one frame) and spooled ones among them."""
    hit = {widths[step] for step in set(widths) - returned}
    return len(set(widths) - returned) >= 10 and bool(hit & {1, 3, 40}) and bool(
        hit & {1500, 4000})


def assert_same_whole_calls(stored: dict[str, dict[int, dict[str, float]]],
                            widths: dict[int, int], returned: set[int]) -> None:
    """Every backend holds every call that returned, whole, the same calls in each, and no
    call but those and the interrupted ones."""
    for name, steps in stored.items():
        assert returned <= set(steps), (name, sorted(returned - set(steps)))
        assert set(steps) <= set(widths), name
        for step, values in steps.items():
            assert values == row(step, widths[step]), (name, step)  # whole
    assert len({frozenset(steps) for steps in stored.values()}) == 1, {
        name: sorted(set(steps) - returned) for name, steps in stored.items()}


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="signal.setitimer")
def test_an_interrupt_anywhere_in_log_leaves_every_backend_the_same_whole_calls(tmp_path):
    """A SIGALRM handler raising at a random point of ``log()``, calls of 10 B to 64 KiB:
    every call that returned is stored whole in every backend; one that was interrupted is
    stored whole in every backend or in none (an interrupt after the call's pass, before
    ``log()`` returns, cannot take it back); nothing else is stored."""
    monitor = Monitor(list(READ), project="p", name="interrupts", log_dir=tmp_path,
                      dispatch="process", strict=True)
    widths, returned = interrupt_stream(monitor, 160)
    stored = {name: by_step(read(monitor.run)) for name, read in READ.items()}
    assert_same_whole_calls(stored, widths, returned)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="signal.setitimer")
def test_an_interrupt_leaves_writers_and_a_worker_thread_the_same_whole_calls(tmp_path):
    """A backend placed in a worker thread gets each call in the same pass as the pipes."""
    monitor = Monitor(["jsonl", LocalJsonl], project="p", name="mixed", log_dir=tmp_path,
                      dispatch="process", strict=True)
    assert [c.kind for c in monitor._dispatch.channels] == ["process", "thread"]
    widths, returned = interrupt_stream(monitor, 120)
    stored = {"jsonl": by_step(read_jsonl(monitor.run)),
              "local": by_step(read_jsonl(local_run(monitor.run)))}
    assert_same_whole_calls(stored, widths, returned)


def test_a_5000_tag_row_and_an_image_reach_every_backend(tmp_path):
    """Both frames are far above a pipe's atomic write (``PIPE_BUF``): each is one journal
    record all the same."""
    wide = row(7, 5000)
    assert len(str(wide)) > 16 * select.PIPE_BUF
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)  # 192 KiB
    monitor = Monitor(["jsonl", "tensorboard", "trackio"], project="p", name="large",
                      log_dir=tmp_path, dispatch="process", strict=True)
    monitor.log({"small": 1.0}, step=0)
    monitor.log(wide, step=7)
    with pytest.warns(BackendWarning, match="'jsonl' does not store image media"):
        monitor.log({"picture": Image(pixels)}, step=8)
    monitor.log({"small": 2.0}, step=9)
    monitor.close()
    for name, read in READ.items():
        steps = by_step(read(monitor.run))
        assert steps == {0: {"small": 1.0}, 7: wide, 9: {"small": 2.0}}, name
    for read_media in (tensorboard_monitor.read_media, trackio_monitor.read_media):
        [(tag, step, image)] = read_media(monitor.run)
        assert (tag, step) == ("picture", 8)
        assert np.array_equal(image.array[..., :3], pixels)


TRAIN = """
import json, os, signal, sys, warnings
import numpy as np
warnings.simplefilter("ignore")  # jsonl stores no images (a BackendWarning says so)
from core_monitor import Image, Monitor

monitor = Monitor(["jsonl", "tensorboard", "trackio"], project="p", name="killed",
                  log_dir=sys.argv[1], dispatch="process", journal=False)
monitor.log({"small": 1.0}, step=0)
monitor.log({f"w{i}": 1 + i / 8 for i in range(5000)}, step=1)
pixels = np.arange(128 * 128 * 3, dtype=np.uint32).reshape(128, 128, 3) % 251
monitor.log({"picture": Image(pixels.astype(np.uint8))}, step=2)
print(json.dumps({"journal": str(monitor._dispatch.data.folder), "writers": [w.process.pid for w in
                  monitor._dispatch.writers]}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_trainer_killed_right_after_large_calls_loses_none_and_leaves_no_journal(tmp_path):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(TRAIN), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == -signal.SIGKILL, done.stderr[-4000:]
    facts = json.loads(done.stdout.splitlines()[-1])
    deadline = time.monotonic() + 120
    while any(_alive(pid) for pid in facts["writers"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in facts["writers"])
    assert not os.path.exists(facts["journal"])  # the last writer removed the monitor's own
    run = RunInfo(project="p", name="killed", log_dir=Path(tmp_path))
    expected = {0: {"small": 1.0}, 1: {f"w{i}": 1 + i / 8 for i in range(5000)}}
    for name, read in READ.items():
        assert by_step(read(run)) == expected, name
    pixels = (np.arange(128 * 128 * 3, dtype=np.uint32).reshape(128, 128, 3) % 251)
    for read_media in (tensorboard_monitor.read_media, trackio_monitor.read_media):
        # TensorBoard also holds the crash mark, a text (test_crash.py)
        [(tag, step, image)] = [m for m in read_media(run) if isinstance(m[2], Image)]
        assert (tag, step) == ("picture", 2)
        assert np.array_equal(image.array[..., :3], pixels.astype(np.uint8))


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                           text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def test_a_writers_bound_counts_the_journal_bytes_it_has_not_read(tmp_path):
    """``queue_size=8``: a writer may be 8 KiB of the journal behind, and holds as much
    again in its inbox (a record larger than either when it holds none). Its backend hangs
    inside the first call: the second waits in its inbox, the third in the journal, each later
    one is dropped for it at once (counted), and close gives up on it; the other backend
    stores or drops every call."""
    monitor = Monitor(["faulty", "jsonl"], project="p", name="bound", log_dir=tmp_path,
                      dispatch="process", wait=True, queue_size=8, on_full="drop",
                      faulty={"hang_at": 0})
    faulty = next(w for w in monitor._dispatch.writers if w.name == "faulty")
    # jsonl may drop too: 4,000 JSON lines a call can keep it inside a hook past the grace
    with pytest.warns(BackendWarning) as caught:
        monitor.log(row(0, 4000), step=0)  # about 64 KiB
        deadline = time.monotonic() + 60
        while faulty.shared is not None and not faulty.shared.busy and time.monotonic() < deadline:
            time.sleep(0.01)  # until it hangs inside the hook
        monitor.log(row(1, 4000), step=1)
        while faulty.behind() > 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # until its reader took the call into its inbox
        for step in range(2, 6):
            monitor.log(row(step, 4000), step=step)
    assert any("'faulty' is slower than the logging" in str(w.message) for w in caught)
    assert monitor.dropped["faulty"] == 3
    with pytest.warns(BackendWarning):
        monitor.close(timeout=2)
    assert monitor.undelivered["faulty"] == 3  # the call it hung in, its inbox's, the journal's
    stored = sorted(by_step(read_jsonl(monitor.run)))
    assert len(stored) + monitor.dropped.get("jsonl", 0) == 6
    for step, values in by_step(read_jsonl(monitor.run)).items():
        assert values == row(step, 4000)


def test_a_writer_that_dies_mid_stream_of_large_calls_costs_the_others_nothing(tmp_path):
    """Without the run's journal (a dead writer is then not started again): the monitor's own
    journal is removed at close; the other backend stores every call."""
    monitor = Monitor(["faulty", "jsonl"], project="p", name="died", log_dir=tmp_path,
                      dispatch="process", wait=True, faulty={"segfault_at": 1}, journal=False)
    faulty = next(w for w in monitor._dispatch.writers if w.name == "faulty")
    own = monitor._dispatch.data.folder
    with pytest.warns(BackendWarning, match="'faulty'.*WriterDied.*SIGSEGV"):
        for step in range(2):
            monitor.log(row(step, 2000), step=step)
        faulty.process.wait(timeout=60)
        for step in range(2, 6):
            monitor.log(row(step, 2000), step=step)
        monitor.flush()
    assert own.is_dir()
    with pytest.warns(BackendWarning, match="'faulty'.*not delivered"):
        monitor.close()
    assert not own.exists()
    assert by_step(read_jsonl(monitor.run)) == {step: row(step, 2000) for step in range(6)}


TERM = """
import json, os, signal, sys, time, warnings
import numpy as np
from core_monitor import Image, Monitor
warnings.simplefilter("ignore")  # jsonl stores no images (a BackendWarning says so)

monitor = Monitor(["jsonl", "tensorboard", "trackio"], project="p", name="term",
                  log_dir=sys.argv[1], dispatch="process")
for step in range(20):
    monitor.log({f"w{i}": step + i / 8 for i in range(3000)}, step=step)
    monitor.log({"picture": Image(np.full((96, 96, 3), step, np.uint8))}, step=step)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(600)
"""


def test_sigterm_right_after_large_calls_stores_every_one(tmp_path):
    """The SIGTERM handler closes the monitor: its stop request goes on the control pipe,
    naming the journal's next record, so the writers stop after every call logged."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(TERM), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == -signal.SIGTERM, done.stderr[-4000:]
    run = RunInfo(project="p", name="term", log_dir=Path(tmp_path))
    expected = {step: {f"w{i}": step + i / 8 for i in range(3000)} for step in range(20)}
    for name, read in READ.items():
        assert by_step(read(run)) == expected, name
    for read_media in (tensorboard_monitor.read_media, trackio_monitor.read_media):
        images = [(step, image) for _, step, image in read_media(run) if isinstance(image, Image)]
        assert [step for step, _ in images] == list(range(20))
        assert all((image.array[..., :3] == step).all() for step, image in images)
