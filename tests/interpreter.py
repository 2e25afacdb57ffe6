"""Fresh interpreters for the plugin tests: what an import pulls in, what a changed SDK raises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh ``sys.executable``; assert it exits 0."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result


def imported_after(statement: str, candidates: tuple[str, ...]) -> list[str]:
    """The ``candidates`` found in ``sys.modules`` after running ``statement`` alone."""
    code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {candidates!r} " \
           "if m in sys.modules]))"
    return json.loads(run_python(code).stdout.splitlines()[-1])


def load_error_after(sdk_change: str, call: str) -> str:
    """The ``BackendLoadError`` message ``call`` raises after ``sdk_change`` altered the SDK in
    a fresh interpreter (how a future SDK release that changed shape looks to the plugin);
    ``""`` when nothing was raised."""
    code = (f"from core_monitor import BackendLoadError\n{textwrap.dedent(sdk_change)}\n"
            f"try:\n    {call}\nexcept BackendLoadError as error:\n    print(error)\n")
    return run_python(code).stdout
