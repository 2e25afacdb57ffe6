"""Running the scripts under ``scripts/``: plain, or under ``torchrun`` with gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This test's environment (offline, SDK folders under ``tmp_path``) for a script.

    DeepSpeed compiles a small shared-memory op on first use on CPU (about a minute);
    ``TORCH_EXTENSIONS_DIR`` (set by ``nox -s frameworks`` to a folder kept between runs) keeps
    that compile out of every test after the first.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.setdefault("DS_ACCELERATOR", "cpu")
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    env.update(extra or {})
    return env


def run_script(name: str, *args: str | Path, nproc: int = 0, timeout: float = 480,
               expect: int = 0, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>`` with this interpreter, or under ``torchrun --nproc_per_node
    nproc`` (gloo, a free loopback port); fail the test with its output unless it exits
    ``expect``."""
    script = str(SCRIPTS / name)
    if nproc:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                   "--tee", "3", script, *map(str, args)]
    else:
        command = [sys.executable, script, *map(str, args)]
    done = subprocess.run(command, env=script_env(env), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)
    if done.returncode != expect:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}, expected {expect}\n"
                    f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-8000:]}")
    return done


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
