"""``monitors copy`` for every ordered pair of the first-party backends: each run is
written for real, copied through the CLI, and the destination read back from its own storage."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest

import comet_monitor
import csv_monitor
import mlflow_monitor
import tensorboard_monitor
import trackio_monitor
import wandb_monitor
from core_monitor import Histogram, Image, Monitor, RunInfo, Text, cli

MODULES = {"trackio": trackio_monitor, "tensorboard": tensorboard_monitor,
           "wandb": wandb_monitor, "mlflow": mlflow_monitor, "csv": csv_monitor,
           "comet": comet_monitor}
KINDS = {"trackio": {"image", "histogram", "text"}, "tensorboard": {"image", "histogram", "text"},
         "wandb": {"image", "histogram", "text"}, "mlflow": {"image", "text"}, "csv": set(),
         "comet": {"image", "text"}}
#: Logged out of order, with a repeated step and values float32 cannot hold exactly.
POINTS = [(0, {"loss": 1 / 3, "acc": 0.1}), (1, {"loss": 0.25}), (5, {"loss": 0.2}),
          (5, {"loss": 0.21}), (3, {"loss": 2 / 7, "acc": 0.7})]
CONFIG = {"lr": 0.001, "opt": "adam"}
PIXELS = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def points(name: str, run: RunInfo, float32: bool) -> list[tuple[str, int, float]]:
    rows = MODULES[name].read_rows(run)
    return sorted((t, s, f32(v) if float32 else v) for t, s, v in rows)


def media(name: str, run: RunInfo) -> dict[tuple[str, int, str], object]:
    found: dict[tuple[str, int, str], object] = {}
    if not KINDS[name]:  # a backend that stores no media has no read_media
        return found
    for tag, step, value in MODULES[name].read_media(run):
        if value.kind == "image":
            found[(tag, step, "image")] = value.array[..., :3].tolist()  # Trackio stores RGBA
        elif value.kind == "histogram":
            found[(tag, step, "histogram")] = (value.edges.tolist(), value.counts.tolist())
        else:
            found[(tag, step, "text")] = value.text
    return found


def write_source(name: str, log_dir) -> RunInfo:
    with Monitor([name], project="move", name="run1", log_dir=log_dir, config=CONFIG) as monitor:
        for step, row in POINTS:
            monitor.log(row, step=step)
        media_row = {"sample": Image(PIXELS), "notes": Text("**step** two"),
                     "weights": Histogram(edges=np.array([0.0, 1.0, 2.0]),
                                          counts=np.array([3.0, 4.0]))}
        kinds = {"sample": "image", "notes": "text", "weights": "histogram"}
        stored = {tag: v for tag, v in media_row.items() if kinds[tag] in KINDS[name]}
        if stored:  # a backend that stores no media (csv) gets none
            monitor.log(stored, step=2)
    return monitor.run


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """One real run per source backend (written once for the module's 20 copies)."""
    root = tmp_path_factory.mktemp("sources")
    return {name: write_source(name, root / name) for name in MODULES}


@pytest.mark.parametrize(("source", "dest"), list(itertools.permutations(MODULES, 2)))
def test_copy_between_every_pair(sources, source, dest, tmp_path, capsys):
    run = sources[source]
    to_dir = tmp_path / "dest"
    code = cli.main(["copy", source, dest, "--project", "move", "--name", "run1",
                     "--log-dir", str(run.log_dir), "--to-log-dir", str(to_dir),
                     "--to-name", "copied"])
    out = capsys.readouterr().out
    assert code == 0, out
    copied = RunInfo(project="move", name="copied", log_dir=to_dir)

    float32 = "tensorboard" in (source, dest)
    expected = points(source, run, float32)
    assert len(expected) == 7
    assert points(dest, copied, float32) == expected
    assert sorted(step for t, step, _ in expected if t == "loss") == [0, 1, 3, 5, 5]
    assert "points: 7 of 7 arrived" in out

    assert set(MODULES[dest].read_config(copied)) == set(MODULES[source].read_config(run)) \
        == set(CONFIG)
    assert "config: 2 of 2 keys arrived" in out

    both = KINDS[source] & KINDS[dest]
    wanted = {k: v for k, v in media(source, run).items() if k[2] in both}
    assert {k[2] for k in wanted} == both
    assert media(dest, copied) == wanted
    assert f"media: {len(wanted)} of {len(wanted)} arrived" in out
    skipped = sorted(KINDS[source] - KINDS[dest])
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
