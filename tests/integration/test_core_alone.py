"""``core-monitor`` installed alone, then a plugin whose SDK is missing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Venv

# What a user runs: select trackio (its plugin is installed, its SDK is not).
SELECT_TRACKIO = """
import json
from core_monitor import BackendLoadError, Monitor
try:
    Monitor(["trackio"], project="p", name="r", log_dir="runs")
except BackendLoadError as error:
    print(json.dumps({"raised": type(error).__name__, "message": str(error),
                      "backend": error.backend, "distribution": error.distribution,
                      "missing": error.missing}))
else:
    print(json.dumps({"raised": None}))
"""


def test_monitors_list_without_plugins_says_how_to_install_one(
    core_venv: Venv, tmp_path: Path
) -> None:
    done = core_venv.run(["monitors", "list"], cwd=tmp_path, expect=0)
    assert "No backend is installed" in done.stdout
    assert "`pip install <tracker>-monitor`" in done.stdout
    assert "'experiment_monitors'" in done.stdout
    assert "trackio" not in done.stdout  # the core names no plugin of its own
    assert json.loads(core_venv.run(["monitors", "list", "--json"], cwd=tmp_path).stdout) == []


@pytest.fixture
def trackio_plugin_without_sdk(core_venv: Venv, wheels: dict[str, Path]) -> Iterator[Venv]:
    core_venv.install(wheels["trackio-monitor"], no_deps=True)
    try:
        yield core_venv
    finally:
        core_venv.uninstall("trackio-monitor")


def test_selecting_a_backend_whose_sdk_is_missing_raises_backend_load_error(
    trackio_plugin_without_sdk: Venv, tmp_path: Path
) -> None:
    venv = trackio_plugin_without_sdk
    result = venv.python_json(SELECT_TRACKIO, cwd=tmp_path)
    assert result["raised"] == "BackendLoadError"
    assert result["backend"] == "trackio"
    assert result["distribution"] == "trackio-monitor"
    assert result["missing"] == "trackio"
    assert "pip install trackio" in result["message"]
    assert not (tmp_path / "runs").exists()


def test_monitors_list_check_shows_the_plugin_broken_and_exits_1(
    trackio_plugin_without_sdk: Venv, tmp_path: Path
) -> None:
    venv = trackio_plugin_without_sdk
    # Without --check nothing is imported, but the metadata already shows the SDK is absent.
    listed = json.loads(venv.run(["monitors", "list", "--json"], cwd=tmp_path, expect=0).stdout)
    assert [(r["name"], r["status"]) for r in listed] == [
        ("trackio", "broken: requires trackio, not installed (`pip install trackio`)")
    ]
    done = venv.run(["monitors", "list", "--check"], cwd=tmp_path, expect=1)
    row = next(line for line in done.stdout.splitlines() if line.startswith("trackio"))
    assert "trackio-monitor" in row
    assert "error" in row
    assert "pip install trackio" in row


def test_a_missing_sdk_is_one_short_error_not_a_chained_traceback(
    trackio_plugin_without_sdk: Venv, tmp_path: Path
) -> None:
    """What a user sees who forgot the SDK: the message alone, no traceback of the plugin's
    imports (it used to be 43 lines, two chained tracebacks)."""
    script = tmp_path / "train.py"
    script.write_text("from core_monitor import Monitor\n"
                      "Monitor(['trackio'], project='p', name='r', log_dir='runs')\n")
    done = trackio_plugin_without_sdk.run(["python", script], cwd=tmp_path, expect=1)
    lines = done.stderr.strip().splitlines()
    assert "direct cause" not in done.stderr and "During handling" not in done.stderr
    assert "trackio_monitor" not in "".join(lines[:-1])  # no frame inside the plugin
    assert lines[-1].startswith("core_monitor.errors.BackendLoadError: backend 'trackio' "
                                "(trackio-monitor ")
    assert "`pip install trackio`" in lines[-1]
    assert len(lines) <= 20, done.stderr
