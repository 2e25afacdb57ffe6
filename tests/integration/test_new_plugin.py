"""``monitors new example`` to a green contract kit, in a real venv, as docs/plugins.md says.

The "Writing a plugin" page's path: generate the plugin with the core's command, build
it into a wheel, install that wheel (with its ``test`` extra, which pulls in
``core-monitor[testing]``) next to the core's wheel in a fresh venv, see it in
``monitors list --check``, and run its generated tests there. Nothing is edited in between.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core_monitor.testing import MonitorContract
from core_monitor.testing._media import MediaChecks

if TYPE_CHECKING:
    from conftest import Venv


def test_monitors_new_builds_installs_is_listed_and_passes_its_tests(
    core_venv: Venv, wheels: dict[str, Path], build_wheel: Any, tmp_path: Path
) -> None:
    venv = core_venv  # core-monitor's wheel alone, no pytest
    done = venv.run(["python", "-c", "import core_monitor.testing"], cwd=tmp_path, expect=1)
    assert "pip install 'core-monitor[testing]'" in done.stderr

    done = venv.run(["monitors", "new", "example"], cwd=tmp_path)
    plugin = tmp_path / "example-monitor"
    assert f"pytest {plugin}" in done.stdout

    wheel = build_wheel(plugin, tmp_path / "dist")
    assert wheel.name.startswith("example_monitor-0.1.0-")
    venv.install(f"{wheel}[test]", wheels["core-monitor"])

    rows = json.loads(venv.run(["monitors", "list", "--check", "--json"], cwd=tmp_path).stdout)
    assert [(r["name"], r["distribution"], r["entry_point"], r["status"]) for r in rows] == [
        ("example", "example-monitor", "example_monitor:ExampleMonitor", "ok")
    ]

    done = venv.run(["python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"],
                    cwd=plugin)
    summary = done.stdout.strip().splitlines()[-1]
    kit_tests = [n for n in dir(MonitorContract) if n.startswith("test_")]
    # Every kit test runs (the example backend stores its config), plus its own four, except the
    # media checks that need a declared kind (the example backend stores no media) and the
    # SDK-import check, which has no SDK to look for in a plugin that needs none, and the two
    # resume checks (the template declares no resume).
    media = [n for n in dir(MediaChecks) if n.startswith("test_") and "declared" not in n]
    assert re.fullmatch(rf"{len(kit_tests) - len(media) + 1} passed, {len(media) + 3} "
                        r"skipped in [\d.]+s( \(\d+:\d\d:\d\d\))?", summary), done.stdout
    assert "'example_monitor' requires nothing besides core-monitor" in done.stdout
    written = sorted(p.relative_to(plugin).as_posix() for p in plugin.rglob("*") if p.is_file()
                     and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts)
    assert written == ["README.md", "pyproject.toml", "src/example_monitor/__init__.py",
                       "src/example_monitor/py.typed", "tests/test_example_monitor.py"]

    # The contract reaches the generated plugin with no core change: the core checks its
    # options' types (from the annotations) and names (from its __init__) at Monitor(), in the
    # training process, with writer processes.
    code = ("import sys\nfrom core_monitor import ConfigError, Monitor\n"
            "for options in ({'fsync': 'yes'}, {'buffering': 0}):\n"
            "    try:\n"
            "        Monitor(['example'], project='p', log_dir=sys.argv[1], dispatch='process', "
            "example=options)\n"
            "    except ConfigError as error:\n        print(error)\n")
    done = venv.run(["python", "-c", code, str(tmp_path / "logs")], cwd=tmp_path)
    assert ("example: option fsync='yes' (a str) must be True or False; e.g. fsync=False"
            in done.stdout), done.stdout
    assert "backend 'example' has no option 'buffering'; accepted options: fsync" in done.stdout
    assert not (tmp_path / "logs").exists()

    venv.install("ruff")  # the generated code passes the ruff rules it ships with
    venv.run(["ruff", "check", "."], cwd=plugin)
