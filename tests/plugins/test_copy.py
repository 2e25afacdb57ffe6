"""``monitors copy`` between every ordered pair of the backends of tests/trackers.py that have
a reader (a backend joins when it is added there): each source run is written once for real,
copied through the CLI, and the destination read back from its own storage through its own
reader."""

from __future__ import annotations

import functools
import itertools
import struct
from typing import Any

import numpy as np
import pytest
from trackers import BACKENDS

import tensorboard_monitor
import trackio_monitor
import wandb_monitor
from core_monitor import Capabilities, Histogram, Image, Monitor, RunInfo, Text, cli, discovery
from core_monitor.readers import Reader, installed_readers, load_reader

#: The backends that can be a copy source, and so a pair's either side.
WITH_READER = [name for name in BACKENDS if name in installed_readers()]
#: Logged out of order, with a repeated step and values float32 cannot hold exactly.
POINTS = [(0, {"loss": 1 / 3, "acc": 0.1}), (1, {"loss": 0.25}), (5, {"loss": 0.2}),
          (5, {"loss": 0.21}), (3, {"loss": 2 / 7, "acc": 0.7})]
CONFIG = {"lr": 0.001, "opt": "adam"}
PIXELS = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
MEDIA = {"sample": Image(PIXELS), "notes": Text("**step** two"),
         "weights": Histogram(edges=np.array([0.0, 1.0, 2.0]), counts=np.array([3.0, 4.0]))}


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


@functools.cache
def reader(name: str) -> Reader:
    return load_reader(name)


@functools.cache
def capabilities(name: str) -> Capabilities:
    return Capabilities.of(discovery.load_backend(discovery.find_backend(name)))


def stored_kinds(name: str) -> frozenset[str]:
    """The media kinds ``name`` stores (its declaration, which the contract kit holds it to)."""
    return capabilities(name).media_kinds


def readable_kinds(name: str) -> frozenset[str]:
    """The media kinds a copy can take from ``name``: those its reader reads back."""
    return stored_kinds(name) if reader(name).read_media else frozenset()


def points(name: str, run: RunInfo, float32: bool) -> list[tuple[str, int, float]]:
    rows = reader(name).read_rows(run)
    return sorted((t, s, f32(v) if float32 else v) for t, s, v in rows)


def config_keys(name: str, run: RunInfo) -> set[str]:
    read = reader(name).read_config
    return set(read(run)) if read else set()


def media(name: str, run: RunInfo) -> dict[tuple[str, int, str], object]:
    """``(tag, step, kind) -> comparable value`` of the media ``name`` reads back."""
    found: dict[tuple[str, int, str], Any] = {}
    read = reader(name).read_media
    for tag, step, value in read(run) if read else []:
        if value.kind == "image":
            found[(tag, step, "image")] = value.array[..., :3].tolist()  # Trackio stores RGBA
        elif value.kind == "histogram":
            found[(tag, step, "histogram")] = (value.edges.tolist(), value.counts.tolist())
        else:
            found[(tag, step, "text")] = value.text
    return found


def first_per_step(name: str) -> bool:
    """Whether ``name``'s tracker keeps one value per tag and step (SwanLab): the second value
    at the repeated step 5 is neither stored there nor sent by a copy into it."""
    return capabilities(name).repeated_steps == "first"


def write_source(name: str, log_dir) -> RunInfo:
    if first_per_step(name):  # the second value at step 5 is not stored, and reported
        with pytest.warns(RuntimeWarning, match="tag 'loss' is not stored"):
            return write_points(name, log_dir)
    return write_points(name, log_dir)


def write_points(name: str, log_dir) -> RunInfo:
    with Monitor([name], project="move", name="run1", log_dir=log_dir, config=CONFIG,
                 dispatch="thread") as monitor:
        for step, row in POINTS:
            monitor.log(row, step=step)
        stored = {tag: v for tag, v in MEDIA.items() if v.kind in stored_kinds(name)}
        if stored:  # a backend that stores no media (csv) gets none
            monitor.log(stored, step=2)
    return monitor.run


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One ``log_dir`` per backend, which holds its source run (``run1``) and every copy into
    it (``from-<source>``), as a user gathers runs in one store: MLflow creates its SQLite store
    once, not once per copy (seconds each)."""
    return tmp_path_factory.mktemp("stores")


@pytest.fixture(scope="module")
def sources(stores):
    """One real run per source backend, written once for the module's copies."""
    return {name: write_source(name, stores / name) for name in WITH_READER}


@pytest.mark.parametrize(("source", "dest"), list(itertools.permutations(WITH_READER, 2)))
def test_copy_between_every_pair(sources, stores, source, dest, capsys):
    run = sources[source]
    copied = RunInfo(project="move", name=f"from-{source}", log_dir=stores / dest)
    code = cli.main(["copy", source, dest, "--project", "move", "--name", "run1",
                     "--log-dir", str(run.log_dir), "--to-log-dir", str(copied.log_dir),
                     "--to-name", copied.name])
    out = capsys.readouterr().out
    assert code == 0, out
    dropped = first_per_step(dest) and not first_per_step(source)

    # compared at the coarser of the two storages' precisions (TensorBoard keeps float32)
    float32 = "float32" in (capabilities(source).value_dtype, capabilities(dest).value_dtype)
    expected = points(source, run, float32)
    found = 6 if first_per_step(source) else 7
    assert len(expected) == found
    assert sorted(step for t, step, _ in expected if t == "loss") == [0, 1, 3, 5, 5][:found - 2]
    if dropped:  # the first value at step 5 (0.2) is sent and kept, the second (0.21) is not
        expected.remove(max(p for p in expected if p[:2] == ("loss", 5)))
        assert "points: 6 of 6 arrived" in out
        assert (f"not sent, as {dest} cannot store them: 1 repeated (tag, step) (it keeps the "
                "first)") in out
    else:
        assert f"points: {found} of {found} arrived" in out
    assert points(dest, copied, float32) == expected

    assert config_keys(dest, copied) == config_keys(source, run) == set(CONFIG)
    assert "config: 2 of 2 keys arrived" in out

    both = readable_kinds(source) & stored_kinds(dest)
    wanted = {k: v for k, v in media(source, run).items() if k[2] in both}
    assert {k[2] for k in wanted} == both
    assert media(dest, copied) == wanted
    assert f"media: {len(wanted)} of {len(wanted)} arrived" in out
    skipped = sorted(readable_kinds(source) - stored_kinds(dest))
    if skipped:  # e.g. "skipped (not stored by mlflow): histogram 1"
        counts = ", ".join(f"{kind} 1" for kind in skipped)
        assert f"skipped (not stored by {dest}): {counts}" in out


def test_dry_run_writes_nothing_and_a_missing_run_is_an_error(sources, tmp_path, capsys):
    run = sources["tensorboard"]
    assert cli.main(["copy", "tensorboard", "trackio", "--project", "move", "--name", "run1",
                     "--log-dir", str(run.log_dir), "--to-log-dir", str(tmp_path / "d"),
                     "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would copy tensorboard -> trackio: 7 points (2 tags, steps 0..5)" in out
    assert not (tmp_path / "d").exists()
    assert cli.main(["copy", "tensorboard", "trackio", "--project", "move", "--name", "nope",
                     "--log-dir", str(run.log_dir)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_a_run_is_never_copied_into_itself(sources, capsys):
    run = sources["tensorboard"]
    assert cli.main(["copy", "tensorboard", "tensorboard", "--project", "move", "--name",
                     "run1", "--log-dir", str(run.log_dir)]) == 2
    assert "into itself" in capsys.readouterr().err
    assert len(tensorboard_monitor.read_rows(run)) == 7


def test_a_copy_into_a_latest_value_backend_sends_each_tags_last_point(sources, tmp_path,
                                                                       capsys):
    """prometheus keeps the latest point of each tag (``history="latest"``): a copy sends
    those and says how many earlier points it left out."""
    pytest.importorskip("prometheus_monitor")
    run = sources["tensorboard"]
    copied = RunInfo(project="move", name="latest", log_dir=tmp_path)
    assert cli.main(["copy", "tensorboard", "prometheus", "--project", "move", "--name",
                     "run1", "--log-dir", str(run.log_dir), "--to-log-dir", str(tmp_path),
                     "--to-name", copied.name]) == 0
    out = capsys.readouterr().out
    rows = tensorboard_monitor.read_rows(run)
    last = {tag: (tag, step, value) for tag, step, value in rows}
    assert "points: 2 of 2 arrived" in out, out
    assert "config: 0 of 0 keys arrived; not sent (not stored by prometheus): 2 keys" in out
    assert (f"not sent, as prometheus cannot store them: {len(rows) - 2} earlier points (it "
            "keeps the latest of each tag)") in out, out
    assert reader("prometheus").read_rows(copied) == sorted(last.values())


def test_a_backend_without_a_reader_is_no_source(capsys):
    assert cli.main(["copy", "twin", "trackio", "--project", "p", "--name", "r"]) == 2
    err = capsys.readouterr().err
    assert "backend 'twin' has no reader" in err and "tensorboard" in err


def test_a_third_party_reader_is_a_source(tmp_path, capsys):
    """The jsonl test plugin declares a reader entry point: it copies with no core change."""
    with Monitor(["jsonl"], project="p", name="r", log_dir=tmp_path, config={"k": 1}) as m:
        m.log({"x": 0.5}, step=7)
    assert cli.main(["copy", "jsonl", "tensorboard", "--project", "p", "--name", "r",
                     "--log-dir", str(tmp_path)]) == 0
    assert tensorboard_monitor.read_rows(m.run) == [("x", 7, 0.5)]
    assert "points: 1 of 1 arrived" in capsys.readouterr().out


@pytest.fixture(scope="module")
def tag_by_tag(tmp_path_factory):
    """A TensorBoard run of 500 steps x 10 tags: its reader returns it tag by tag (all of
    ``t0``, then all of ``t1``, ...), the order that made a copy write one row per point."""
    log_dir = tmp_path_factory.mktemp("tag_by_tag")
    with Monitor(["tensorboard"], project="long", name="run1", log_dir=log_dir,
                 dispatch="thread") as monitor:
        for step in range(500):
            monitor.log({f"t{i}": step + i / 10 for i in range(10)}, step=step)
    rows = tensorboard_monitor.read_rows(monitor.run)
    assert [tag for tag, _, _ in rows[:501]] == ["t0"] * 500 + ["t1"]
    return monitor.run


def copy_long(run: RunInfo, dest: str, to_dir) -> RunInfo:
    assert cli.main(["copy", "tensorboard", dest, "--project", "long", "--name", "run1",
                     "--log-dir", str(run.log_dir), "--to-log-dir", str(to_dir)]) == 0
    return RunInfo(project="long", name="run1", log_dir=to_dir)


def test_a_tag_by_tag_source_is_copied_one_row_per_step_into_trackio(tag_by_tag, tmp_path):
    from trackio_monitor.reader import count_rows, earlier_run
    from trackio_monitor.storage import database

    copied = copy_long(tag_by_tag, "trackio", tmp_path)
    db = database(copied)
    run_id, last_step = earlier_run(db, "run1")
    assert run_id is not None and last_step == 499
    assert count_rows(db, run_id) == 500  # Trackio's rows: one per step
    assert sorted(trackio_monitor.read_rows(copied)) == sorted(
        tensorboard_monitor.read_rows(tag_by_tag))


def test_a_tag_by_tag_source_is_copied_one_row_per_step_into_wandb(tag_by_tag, tmp_path):
    from wandb_monitor.reader import history, run_folders

    copied = copy_long(tag_by_tag, "wandb", tmp_path)
    [folder] = run_folders(copied)
    rows = [r.history for r in wandb_monitor.read_records(folder) if r.HasField("history")]
    counters = [int(item.value_json) for row in rows for item in row.item
                if list(item.nested_key) == ["_step"] or item.key == "_step"]
    assert counters == list(range(500))  # wandb's own row counter: one per step
    assert [step for step, _, _ in history(copied)] == list(range(500))
    assert sorted(wandb_monitor.read_rows(copied)) == sorted(
        tensorboard_monitor.read_rows(tag_by_tag))


def test_the_report_says_which_config_values_changed_type(tmp_path, capsys):
    """"5 of 5 keys arrived" hid TensorBoard's HParams storing an int as a float and a list as
    its text: the count stays (every key is there), and the changes are named."""
    config = {"epochs": 3, "layers": [64, 32], "lr": 0.1, "opt": "adam", "flag": True}
    with Monitor(["csv"], project="types", name="src", log_dir=tmp_path, config=config,
                 dispatch="sync") as monitor:
        monitor.log({"loss": 1.0}, step=0)
    assert cli.main(["copy", "csv", "tensorboard", "--project", "types", "--name", "src",
                     "--log-dir", str(tmp_path), "--to-name", "dst"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("config:"))
    assert line == ("config: 5 of 5 keys arrived, 2 of them changed by tensorboard: "
                    "epochs 3 (int) -> 3.0 (float); layers [64, 32] (list) -> '[64, 32]' (str)")


def test_changed_values_compares_types_not_only_equality():
    from core_monitor.copying import changed_values

    sent = {"a": 1, "b": 1.0, "c": True, "d": (1, 2), "e": {"x": 1}, "f": float("nan"), "g": "s"}
    stored = {"a": 1.0, "b": 1.0, "c": 1, "d": [1, 2], "e": {"x": "1"}, "f": float("nan")}
    assert changed_values(sent, stored) == [
        "a 1 (int) -> 1.0 (float)", "c True (bool) -> 1 (int)",
        "e {'x': 1} (dict) -> {'x': '1'} (dict)"]
