"""``examples/train_digits.py`` logging to all four backends, read back from each one's storage.

The example runs in the venv built from wheels, as a user runs it; ``examples/readback.py`` reads
every backend's own files through the plugins' read-back helpers and prints them as JSON. Each
backend must hold exactly the points the example logged (``--record``): same tags, same steps,
same values (float64 exactly; TensorBoard's float32 after rounding), and its confusion-matrix
images and weight histograms pixel- and count-exact at their steps.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from conftest import Venv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 30
BACKENDS = ("trackio", "tensorboard", "wandb", "mlflow")
#: Backends that store no histograms (MLflow has no such type: the core skips them there).
NO_HISTOGRAMS = {"mlflow"}


def train(venv: Venv, cwd: Path, record: Path, *, backends: str, name: str,
          sdk_root: Path | None = None) -> dict:
    done = venv.run(["python", EXAMPLES / "train_digits.py", "--backends", backends,
                     "--log-dir", cwd / "runs", "--project", "digits", "--name", name,
                     "--steps", STEPS, "--eval-every", 10, "--seed", 3, "--record", record],
                    cwd=cwd, sdk_root=sdk_root)
    record.with_suffix(".out").write_text(done.stdout)  # what the user saw
    return json.loads(record.read_text())


@pytest.fixture(scope="module")
def trained(full_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One 30-step run of the example to all four backends; its folder and its record."""
    cwd = tmp_path_factory.mktemp("example")
    record = train(full_venv, cwd, cwd / "logged.json", backends=",".join(BACKENDS), name="it-1",
                   sdk_root=cwd / "env")
    return cwd, record


def test_example_records_every_step_with_val_metrics_every_ten(trained: tuple[Path, dict]) -> None:
    _, record = trained
    steps = {tag: [s for t, s, _ in record["rows"] if t == tag]
             for tag in ("train/loss", "train/accuracy", "lr", "val/loss", "val/accuracy")}
    assert steps["train/loss"] == steps["train/accuracy"] == steps["lr"] == list(range(STEPS))
    assert steps["val/loss"] == steps["val/accuracy"] == [0, 10, 20, STEPS - 1]


def test_the_closing_hints_name_a_command_that_exists_for_each_backend(
    trained: tuple[Path, dict]
) -> None:
    """The example ends with a command per backend that opens its run: the tool's full path
    (the venv's bin folder, maybe not on the user's PATH), so it runs as printed."""
    cwd, _ = trained
    printed = (cwd / "logged.out").read_text().split("\nrun digits/it-1:")[1].splitlines()
    commands = [line.split() for line in printed if line.startswith("    ")]
    tools = [next(word for word in words if "=" not in word) for words in commands]
    assert [Path(tool).name for tool in tools] == ["trackio", "tensorboard", "wandb", "mlflow"]
    for tool in tools:
        assert Path(tool).is_absolute() and Path(tool).is_file(), tool


def test_each_backend_stores_exactly_the_points_the_example_logged(
    full_venv: Venv, trained: tuple[Path, dict]
) -> None:
    cwd, record = trained
    done = full_venv.run(["python", EXAMPLES / "readback.py", "--log-dir", cwd / "runs",
                          "--project", "digits", "--name", "it-1",
                          "--record", cwd / "logged.json", "--json"], cwd=cwd)
    report = json.loads(done.stdout)
    assert report["agree"], report["problems"]
    assert set(report["backends"]) == set(BACKENDS)

    logged = {(tag, step): value for tag, step, value in record["rows"]}
    for name, stored in report["backends"].items():
        rows = {(tag, step): value for tag, step, value in stored["rows"]}
        assert len(rows) == len(stored["rows"]), f"{name} stored a point twice"
        assert rows.keys() == logged.keys(), name
        if name == "tensorboard":  # float32 storage
            assert all(np.float32(rows[k]) == np.float32(v) for k, v in logged.items())
        else:
            assert rows == logged, name
        assert stored["steps"] == STEPS
        assert stored["last_val_accuracy"] == pytest.approx(logged[("val/accuracy", STEPS - 1)])
        media = sorted((tag, step, kind) for tag, step, kind in stored["media"])
        histograms = [] if name in NO_HISTOGRAMS else [
            ("weights/w1", 0, "histogram"), ("weights/w1", STEPS - 1, "histogram")]
        assert media == [("val/confusion", 0, "image"), ("val/confusion", STEPS - 1, "image"),
                         *histograms], name


def test_readback_exits_nonzero_when_a_stored_image_or_histogram_differs(
    full_venv: Venv, trained: tuple[Path, dict], tmp_path: Path
) -> None:
    """The media check compares pixels and counts: a record with one count off and one
    image hash changed is refused, for every backend (histograms where it stores them)."""
    cwd, logged = trained
    record = copy.deepcopy(logged)
    image = next(m for m in record["media"] if m[2] == "image")
    histogram = next(m for m in record["media"] if m[2] == "histogram")
    image[3] = "0" * 64
    histogram[3][0] += 1
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(record))
    done = full_venv.run(["python", EXAMPLES / "readback.py", "--record", altered,
                          "--log-dir", cwd / "runs"], cwd=cwd, expect=1)
    for name in BACKENDS:
        assert f"{name}: image 'val/confusion' at step {image[1]} differs" in done.stdout
        compared = f"{name}: histogram 'weights/w1' at step {histogram[1]}: counts" in done.stdout
        assert compared == (name not in NO_HISTOGRAMS), name


def test_readback_exits_nonzero_when_a_backend_disagrees(
    full_venv: Venv, trained: tuple[Path, dict], tmp_path: Path
) -> None:
    cwd, logged = trained
    record = copy.deepcopy(logged)
    record["rows"][-1][2] += 0.25  # a value no backend stored
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(record))
    done = full_venv.run(["python", EXAMPLES / "readback.py", "--log-dir", cwd / "runs",
                          "--project", "digits", "--name", "it-1", "--record", altered],
                         cwd=cwd, expect=1)
    assert "values differ" in done.stdout


def test_example_is_deterministic_given_the_seed(
    full_venv: Venv, trained: tuple[Path, dict], tmp_path: Path
) -> None:
    _, first = trained
    again = train(full_venv, tmp_path, tmp_path / "again.json", backends="tensorboard",
                  name="it-2")
    assert again["rows"] == first["rows"]
