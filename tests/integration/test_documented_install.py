"""The README's first install, run as written in a fresh venv with pip, from the repository.

``tests/core/test_documented_installs.py`` checks every documented command's shape; this runs
the one a newcomer types first (the same line leads the README, the site's home page and
Getting started), then the ``monitors`` commands beside it.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Venv

ROOT = Path(__file__).resolve().parents[2]


def _first_install() -> str:
    """``first_install`` of tests/core/test_documented_installs.py (one parser for both)."""
    path = ROOT / "tests" / "core" / "test_documented_installs.py"
    spec = importlib.util.spec_from_file_location("documented_installs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.first_install(ROOT / "README.md"))


def test_the_readmes_first_install_works_as_written(stdlib_venv: Venv, tmp_path: Path) -> None:
    command = _first_install()
    words = shlex.split(command)
    assert words[:4] == ["python3", "-m", "pip", "install"]
    venv = stdlib_venv
    started = time.monotonic()
    venv.run(["python", *words[1:], "--quiet", "--disable-pip-version-check"], cwd=ROOT,
             timeout=900)
    seconds = time.monotonic() - started
    listed = json.loads(venv.run(["monitors", "list", "--json"], cwd=tmp_path).stdout)
    assert [(row["name"], row["distribution"]) for row in listed] == [
        ("trackio", "trackio-monitor")]
    checked = venv.run(["monitors", "list", "--check"], cwd=tmp_path, timeout=300)
    assert any(line.startswith("trackio") and line.rstrip().endswith("ok")
               for line in checked.stdout.splitlines()), checked.stdout
    # No PyTorch for a backend that does not need it (the reason it takes seconds, not minutes).
    done = venv.run(["python", "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
                    cwd=tmp_path)
    assert done.stdout.strip() == "None"
    print(f"{command}: {seconds:.1f} s")
