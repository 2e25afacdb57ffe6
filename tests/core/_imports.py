"""Which modules a fresh interpreter imported: how the tests prove that listing imports nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

MARK = "@@MODULES@@"


def modules_after(code: str, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run ``code`` in a fresh ``sys.executable``; return the names in its ``sys.modules`` after."""
    code = textwrap.dedent(code) + (
        f"\nimport json as _j, sys as _s\nprint({MARK!r} + _j.dumps(sorted(_s.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env or dict(os.environ),
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith(MARK))
    return json.loads(line[len(MARK):])


def imported(modules: list[str], package: str) -> bool:
    """Whether ``package`` or any of its submodules is among ``modules``."""
    return any(m == package or m.startswith(package + ".") for m in modules)
