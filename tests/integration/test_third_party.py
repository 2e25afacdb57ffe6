"""Plugins from other authors, installed from wheels next to the first-party ones.

A new backend is a distribution declaring an entry point in ``experiment_monitors``; nothing in
``core-monitor`` is edited, rebuilt or configured for it (the venv's core is the same wheel
throughout). ``jsonl-monitor`` (tests/fixtures) is a healthy one; ``broken-monitor``'s module
raises ``ModuleNotFoundError`` on import.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Venv

LOG_THREE_POINTS = """
import json, sys
from core_monitor import Monitor
with Monitor([sys.argv[1]], project="third", name="r1", log_dir="runs",
             config={"lr": 0.1}) as monitor:
    monitor.log({"loss": 0.5}, step=0)
    monitor.log({"loss": 0.25, "acc": 0.75}, step=10)
    monitor.log({"loss": 0.125})
print(json.dumps(monitor.backends))
"""

SELECT = """
import json, sys
from core_monitor import Monitor
try:
    Monitor([sys.argv[1]], project="third", name="r2", log_dir="runs")
except Exception as error:
    print(json.dumps({"raised": type(error).__name__, "message": str(error)}))
else:
    print(json.dumps({"raised": None}))
"""

READ_TRACKIO = """
import json, pathlib, trackio_monitor
from core_monitor import RunInfo
run = RunInfo(project="third", name="r1", log_dir=pathlib.Path("runs"))
print(json.dumps(trackio_monitor.read_rows(run)))
"""

EXPECTED = [["loss", 0, 0.5], ["loss", 10, 0.25], ["acc", 10, 0.75], ["loss", 11, 0.125]]


def listed(venv: Venv, cwd: Path) -> dict[str, dict[str, str]]:
    rows = json.loads(venv.run(["monitors", "list", "--json"], cwd=cwd).stdout)
    return {row["name"]: row for row in rows}


def installed(venv: Venv, wheels: dict[str, Path], distribution: str) -> Iterator[Venv]:
    """``venv`` with ``distribution``'s wheel installed, uninstalled again afterwards."""
    venv.install(wheels[distribution])
    try:
        yield venv
    finally:
        venv.uninstall(distribution)


@pytest.fixture
def with_jsonl(full_venv: Venv, wheels: dict[str, Path]) -> Iterator[Venv]:
    yield from installed(full_venv, wheels, "jsonl-monitor")


def test_installed_third_party_plugin_is_listed_used_then_gone_after_uninstall(
    with_jsonl: Venv, tmp_path: Path
) -> None:
    venv = with_jsonl
    row = listed(venv, tmp_path)["jsonl"]
    assert (row["distribution"], row["version"]) == ("jsonl-monitor", "1.0.0")

    assert venv.python_json(LOG_THREE_POINTS, "jsonl", cwd=tmp_path) == ["jsonl"]
    lines = [json.loads(line) for line in
             (tmp_path / "runs" / "third" / "r1.jsonl").read_text().splitlines()]
    assert lines[0] == {"config": {"lr": 0.1}}
    assert [[d["tag"], d["step"], d["value"]] for d in lines[1:]] == EXPECTED

    venv.uninstall("jsonl-monitor")
    assert "jsonl" not in listed(venv, tmp_path)
    result = venv.python_json(SELECT, "jsonl", cwd=tmp_path)
    assert result["raised"] == "UnknownBackendError"
    assert "'jsonl'" in result["message"]
    assert "trackio" in result["message"]  # the installed names are listed


@pytest.fixture
def with_broken(full_venv: Venv, wheels: dict[str, Path]) -> Iterator[Venv]:
    yield from installed(full_venv, wheels, "broken-monitor")


def test_a_plugin_failing_on_import_breaks_neither_the_cli_nor_other_backends(
    with_broken: Venv, tmp_path: Path
) -> None:
    venv = with_broken
    done = venv.run(["monitors", "list"], cwd=tmp_path, expect=0)  # metadata only: no import
    assert any(line.split()[:2] == ["broken", "broken-monitor"]
               for line in done.stdout.splitlines())

    done = venv.run(["monitors", "list", "--check", "--json"], cwd=tmp_path, expect=1)
    statuses = {row["name"]: row["status"] for row in json.loads(done.stdout)}
    assert statuses["broken"].startswith("error")
    assert "experiment_monitors_missing_sdk" in statuses["broken"]
    assert {statuses[n] for n in ("trackio", "tensorboard", "wandb")} == {"ok"}

    selected = venv.python_json(SELECT, "broken", cwd=tmp_path)
    assert selected["raised"] == "BackendLoadError"
    assert "broken-monitor" in selected["message"]

    assert venv.python_json(LOG_THREE_POINTS, "trackio", cwd=tmp_path) == ["trackio"]
    assert venv.python_json(READ_TRACKIO, cwd=tmp_path) == EXPECTED
