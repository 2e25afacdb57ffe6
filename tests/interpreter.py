"""Fresh interpreters for the tests: the one way a test runs Python code in a new process.

What an import pulls in, what a changed SDK raises, what a process that exits or is stopped
leaves behind: each needs a ``sys.executable`` of its own. Every such run goes through
``run_python``: this process's environment (offline, SDK folders under the test's ``tmp_path``,
set by the repository's ``conftest.py``), a timeout, and a failure that shows the child's
stderr. ``tests/`` is on ``sys.path`` for every test (``pythonpath`` in ``pyproject.toml``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

MARK = "@@MODULES@@"
#: The end of a script that SIGKILLs its whole job at once, as Slurm does after ``KillWait``
#: (the cgroup): each child's process group (writers run in sessions of their own, with what
#: their SDKs started), then the script itself. Needs ``os`` and ``signal`` imported.
KILL_THE_JOB = """
import subprocess
listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True,
                         check=True).stdout.split()
for pid, ppid in zip(listing[::2], listing[1::2]):
    if int(ppid) == os.getpid() and int(pid) != os.getpid():
        try:
            os.killpg(int(pid), signal.SIGKILL)
        except OSError:
            pass
os.kill(os.getpid(), signal.SIGKILL)
"""


def run_python(
    code: str, *args: str | os.PathLike[str], env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None, timeout: float = 300, check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) as ``sys.executable -c code *args``; return the finished process.

    Args:
        code: the program; ``args`` become its ``sys.argv[1:]``.
        env: variables set on top of this process's environment.
        cwd: the child's working directory (default: this process's).
        timeout: seconds before the child is killed and ``subprocess.TimeoutExpired`` raised.
        check: assert that the child exited 0 (the assertion shows its stderr).
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-6000:]}"
    return done


def modules_after(code: str, cwd: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Run ``code`` in a fresh interpreter; return the names in its ``sys.modules`` after."""
    code = textwrap.dedent(code) + (
        f"\nimport json as _j, sys as _s\nprint({MARK!r} + _j.dumps(sorted(_s.modules)))\n"
    )
    stdout = run_python(code, env=env, cwd=cwd, timeout=120).stdout
    line = next(line for line in stdout.splitlines() if line.startswith(MARK))
    return json.loads(line[len(MARK):])


def imported(modules: list[str], package: str) -> bool:
    """Whether ``package`` or any of its submodules is among ``modules``."""
    return any(m == package or m.startswith(package + ".") for m in modules)


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
