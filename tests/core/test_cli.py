"""The ``monitors`` console script, run as users run it: the installed script, in a subprocess."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from interpreter import imported, modules_after

from core_monitor.discovery import DISABLE_ENV, installed_backends

MONITORS = Path(sys.executable).parent / "monitors"
PLUGIN_MODULES = (
    "jsonl_monitor", "twin_monitor", "broken_monitor",
    "trackio_monitor", "tensorboard_monitor", "wandb_monitor",
)
SDKS = ("trackio", "wandb", "tensorboard")
KEYS = ["name", "distribution", "version", "entry_point", "reader", "status"]


def monitors(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert MONITORS.exists(), f"console script {MONITORS} is not installed next to {sys.executable}"
    return subprocess.run(
        [str(MONITORS), *args], env=env or dict(os.environ),
        capture_output=True, text=True, timeout=120,
    )


def expected_pairs() -> list[tuple[str, str]]:
    """(name, distribution) of every installed backend, from metadata."""
    return sorted((n, i.distribution) for n, infos in installed_backends().items() for i in infos)


def json_rows(proc: subprocess.CompletedProcess[str]) -> dict[tuple[str, str], dict[str, str]]:
    rows = json.loads(proc.stdout)
    assert isinstance(rows, list)
    return {(r["name"], r["distribution"]): r for r in rows}


def modules_after_main(argv: list[str], cwd: Path) -> list[str]:
    return modules_after(f"from core_monitor import cli\ncli.main({argv!r})\n", cwd)


# monitors list -----------------------------------------------------------------------------


def test_list_prints_a_table_with_one_row_per_name_and_distribution():
    proc = monitors("list")
    assert proc.returncode == 0, proc.stderr  # even though broken-monitor is installed
    assert "Traceback" not in proc.stderr
    header, *lines = proc.stdout.strip().splitlines()
    assert header.split() == ["NAME", "DISTRIBUTION", "VERSION", "ENTRY", "POINT", "READER",
                              "STATUS"]
    pairs = sorted((line.split()[0], line.split()[1]) for line in lines)
    assert pairs == expected_pairs()
    by_pair = {(line.split()[0], line.split()[1]): line for line in lines}
    assert "1.0.0" in by_pair["jsonl", "jsonl-monitor"]
    assert "jsonl_monitor:JsonlMonitor" in by_pair["jsonl", "jsonl-monitor"]
    assert "0.0.1" in by_pair["broken", "broken-monitor"]


def test_list_marks_both_rows_of_a_conflict():
    proc = monitors("list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()[1:]
    twin_rows = [line for line in lines if line.split()[0] == "twin"]
    assert sorted(line.split()[1] for line in twin_rows) == ["jsonl-monitor", "twin-monitor"]
    for line in twin_rows:
        assert "conflict" in line
    jsonl_row = next(line for line in lines if line.split()[:2] == ["jsonl", "jsonl-monitor"])
    assert "conflict" not in jsonl_row


def test_list_json_is_valid_json_with_the_documented_keys():
    proc = monitors("list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows, "no rows"
    for row in rows:
        assert list(row) == KEYS
        assert all(isinstance(value, str) for value in row.values())
    by_pair = json_rows(proc)
    assert sorted(by_pair) == expected_pairs()
    jsonl = by_pair["jsonl", "jsonl-monitor"]
    assert jsonl["version"] == metadata.version("jsonl-monitor")
    assert jsonl["entry_point"] == "jsonl_monitor:JsonlMonitor"
    broken = by_pair["broken", "broken-monitor"]
    assert broken["version"] == "0.0.1"
    assert "error" not in broken["status"]  # not imported without --check
    assert by_pair["twin", "twin-monitor"]["status"].startswith("conflict")


@functools.cache
def checked_json() -> subprocess.CompletedProcess[str]:
    """``monitors list --check --json`` as the suite's environment gives it: run once for the
    tests reading it (each run imports every installed SDK)."""
    return monitors("list", "--check", "--json")


def test_list_check_marks_healthy_ok_and_broken_as_error_and_exits_1():
    proc = checked_json()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_pair = json_rows(proc)
    assert by_pair["jsonl", "jsonl-monitor"]["status"] == "ok"
    broken = by_pair["broken", "broken-monitor"]["status"]
    assert broken.startswith("error")
    assert "experiment_monitors_missing_sdk" in broken


def test_list_check_table_shows_the_error_and_exits_1():
    proc = monitors("list", "--check")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    broken_row = next(line for line in proc.stdout.splitlines() if line.startswith("broken "))
    assert "error" in broken_row
    assert "experiment_monitors_missing_sdk" in broken_row


def test_list_check_reports_a_failing_check_sdk_as_an_error():
    """A plugin that imports but whose SDK changed shape: only --check finds it, via check_sdk."""
    plain = json_rows(monitors("list", "--json"))
    assert plain["stale", "stale-monitor"]["status"] == "installed"
    proc = checked_json()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    stale = json_rows(proc)["stale", "stale-monitor"]["status"]
    assert stale.startswith("error")
    assert "stale-monitor 0.0.1" in stale
    assert "supports fake_sdk>=1,<2" in stale
    only_stale = ",".join(name for name in installed_backends() if name != "stale")
    proc = monitors("list", "--check", "--json", env={**os.environ, DISABLE_ENV: only_stale})
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_list_check_exits_0_when_every_listed_backend_loads():
    """With all but jsonl disabled nothing is broken, so --check succeeds."""
    others = ",".join(name for name in installed_backends() if name != "jsonl")
    proc = monitors("list", "--check", "--json", env={**os.environ, DISABLE_ENV: others})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = {name: row["status"] for (name, _), row in json_rows(proc).items()}
    assert statuses["jsonl"] == "ok"
    assert statuses["broken"].startswith("disabled")


@pytest.mark.parametrize("value", ["*", "all"])
def test_list_marks_every_backend_disabled_when_all_are(value):
    proc = monitors("list", "--json", env={**os.environ, DISABLE_ENV: value})
    assert proc.returncode == 0, proc.stderr
    by_pair = json_rows(proc)
    assert sorted(by_pair) == expected_pairs()
    assert all(row["status"].startswith("disabled") for row in by_pair.values()), by_pair


def test_list_imports_no_plugin_and_no_sdk(tmp_path):
    for argv in (["list"], ["list", "--json"]):
        modules = modules_after_main(argv, tmp_path)
        for package in (*PLUGIN_MODULES, *SDKS):
            assert not imported(modules, package), f"`monitors {' '.join(argv)}` imported {package}"


#: The core modules ``monitors list`` needs: the command, the selection rules, the entry-point
#: reader, and the package with its first-use helper. Every other module is start-up time
#: against ``python -c "import importlib.metadata"`` (benchmark B4, target 1.5x).
LIST_CORE_MODULES = {"core_monitor", "core_monitor._lazy", "core_monitor.cli",
                     "core_monitor.discovery", "core_monitor.errors", "core_monitor.plugins"}
#: What ``monitors list`` does without beyond ``import importlib.metadata``: ``inspect`` and
#: ``dataclasses`` (the SDK checks and the readers import them; a third of the command's import
#: time before Python 3.13), the plugin hooks, the engine.
LIST_AVOIDS = ("inspect", "dataclasses", "pluggy", "numpy", "core_monitor.monitor",
               "core_monitor.dispatch")


def test_list_imports_only_the_core_modules_it_needs(tmp_path):
    # B4's baseline: the interpreter's start (.pth files included) and importlib.metadata,
    # which imports ``inspect`` itself from Python 3.13 on.
    before = set(modules_after("import importlib.metadata\n", tmp_path))
    for argv in (["list"], ["list", "--json"]):
        modules = set(modules_after_main(argv, tmp_path))
        core = {m for m in modules if imported([m], "core_monitor")}
        assert {"core_monitor.cli", "core_monitor.discovery"} <= core  # the probe sees them
        assert core - LIST_CORE_MODULES == set(), f"`monitors {' '.join(argv)}` imported them"
        avoidable = sorted(m for m in modules - before
                           if any(imported([m], name) for name in LIST_AVOIDS))
        assert avoidable == [], f"`monitors {' '.join(argv)}` imported them"


def test_list_check_does_import_plugins(tmp_path):
    """The counterpart of the test above: the sys.modules probe does see plugin imports."""
    modules = modules_after_main(["list", "--check"], tmp_path)
    assert imported(modules, "jsonl_monitor")


# The rest of the command line ----------------------------------------------------------------


def test_version_prints_the_installed_core_version():
    proc = monitors("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["monitors", metadata.version("core-monitor")]


def test_no_command_prints_help_and_exits_0():
    proc = monitors()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: monitors")
    assert "list" in proc.stdout


@pytest.mark.parametrize("args", [["frobnicate"], ["list", "--frobnicate"]])
def test_unknown_subcommand_or_option_exits_2(args):
    proc = monitors(*args)
    assert proc.returncode == 2
    assert "usage: monitors" in proc.stderr
    assert proc.stdout == ""
