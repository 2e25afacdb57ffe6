"""Wheels installed into clean venvs, driven through subprocesses, exactly as a user would.

The distributions (core, the plugins, the test backends of ``tests/fixtures``) are taken from
``MONITORS_WHEELS`` (an ``os.pathsep``-separated list of wheel paths; ``nox -s tests`` sets it)
or, when it is unset, built here with ``uv build --wheel``. Venvs are made with ``uv venv`` and
filled with ``uv pip install --python <venv python>``: no editable install, no ``PYTHONPATH``.
Every command runs with ``cwd`` under ``tmp_path``, offline, with each SDK folder under
``tmp_path`` (the environment the repository's ``conftest.py`` sets up). Every test here is
marked ``slow`` (it builds venvs): ``nox -s dev`` leaves them out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sdk_env import offline_env  # tests/sdk_env.py (tests/ is on pytest's pythonpath)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SOURCES = {
    "core-monitor": ROOT / "core",
    "trackio-monitor": ROOT / "plugins" / "trackio_monitor",
    "tensorboard-monitor": ROOT / "plugins" / "tensorboard_monitor",
    "wandb-monitor": ROOT / "plugins" / "wandb_monitor",
    "mlflow-monitor": ROOT / "plugins" / "mlflow_monitor",
    "jsonl-monitor": ROOT / "tests" / "fixtures" / "jsonl_monitor",
    "broken-monitor": ROOT / "tests" / "fixtures" / "broken_monitor",
}
PLUGINS = ("trackio-monitor", "tensorboard-monitor", "wandb-monitor", "mlflow-monitor")
HERE = Path(__file__).resolve().parent
# Variables that must not leak from the test process into a user's venv. A user's Python
# caches the bytecode of what it imports: with PYTHONDONTWRITEBYTECODE (set in some container
# images) every process in these venvs compiled each SDK it imported again, seconds each time.
_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "CONDA_PREFIX",
         "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS", "__PYVENV_LAUNCHER__", "PYTHONDONTWRITEBYTECODE")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this folder ``slow`` (each builds or drives real venvs) and
    ``process``: what a user's script or ``monitors`` command does, with the users' default
    dispatch (writer processes), not the suite's thread."""
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.process)


def _uv() -> str:
    try:
        from uv import find_uv_bin  # the `uv` package from PyPI, as in `nox -s tests`

        return find_uv_bin()
    except ImportError:
        found = shutil.which("uv")
        if found is None:
            pytest.fail("uv is needed to build the integration venvs: `pip install uv`")
        return found


def _uv_env() -> dict[str, str]:
    """The caller's environment for uv, so it uses the user's package cache.

    The repository's ``conftest.py`` points ``HOME`` and ``XDG_CACHE_HOME``/``XDG_CONFIG_HOME``
    under a temporary folder; uv would then start from an empty cache in each pytest process
    (each xdist worker downloaded the four SDKs and scikit-learn again, about 850 MB, about a
    minute of the tests session). ``UV_CACHE_DIR`` (``nox -s tests`` sets it to the cache its
    own installs filled) wins; without it, ``~/.cache/uv`` of the user's real home.
    """
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    if not env.get("UV_CACHE_DIR") and os.name == "posix":  # Windows: under LOCALAPPDATA
        import pwd

        env["UV_CACHE_DIR"] = str(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "uv")
    return env


def uv(*args: str) -> str:
    """Run ``uv`` with ``args``; fail the test with its output when it fails."""
    done = subprocess.run([_uv(), *args], env=_uv_env(), capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"uv {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def _dist_of(wheel: Path) -> str:
    return wheel.name.split("-")[0].replace("_", "-").lower()


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Wheel path per distribution name (``core-monitor``, ``trackio-monitor``, ...)."""
    listed = os.environ.get("MONITORS_WHEELS")
    if listed:
        paths = [Path(p) for p in listed.split(os.pathsep) if p]
    else:
        out = tmp_path_factory.mktemp("wheels")
        for folder in SOURCES.values():
            uv("build", "--wheel", "--quiet", "--out-dir", str(out), str(folder))
        paths = sorted(out.glob("*.whl"))
    found = {_dist_of(p): p for p in paths}
    missing = sorted(set(SOURCES) - set(found))
    if missing:
        pytest.fail(f"no wheel for {missing} in MONITORS_WHEELS={listed!r}")
    return found


@dataclass
class Venv:
    """A venv built from wheels; runs its commands with a user's environment."""

    path: Path

    @property
    def bin(self) -> Path:
        return self.path / ("Scripts" if os.name == "nt" else "bin")

    @property
    def python(self) -> Path:
        return self.bin / ("python.exe" if os.name == "nt" else "python")

    def install(self, *requirements: str | Path, no_deps: bool = False) -> None:
        extra = ["--no-deps"] if no_deps else []
        uv("pip", "install", "--quiet", "--python", str(self.python), *extra,
           *map(str, requirements))

    def uninstall(self, *dists: str) -> None:
        uv("pip", "uninstall", "--quiet", "--python", str(self.python), *dists)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROP}
        env["PATH"] = str(self.bin) + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = str(self.path)
        env.update(extra or {})
        return env

    def run(self, args: Sequence[str | Path | int], *, cwd: Path, expect: int | None = 0,
            sdk_root: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a command (``monitors``, ``python``, ...) of this venv; check its exit status.

        The environment is this process's (offline, SDK folders under the test's ``tmp_path``,
        set by the repository's ``conftest.py``); ``sdk_root`` moves every SDK folder under it
        instead.
        """
        name = str(args[0])
        command = [str(self.bin / name) if (self.bin / name).exists() else name,
                   *map(str, args[1:])]
        env = self.env(None if sdk_root is None else offline_env(sdk_root))
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if expect is not None and done.returncode != expect:
            pytest.fail(f"{' '.join(command)} exited {done.returncode}, expected {expect}\n"
                        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}")
        return done

    def python_json(self, code: str, *argv: str, cwd: Path) -> Any:
        """Run ``python -c code *argv`` in the venv; parse the last stdout line as JSON."""
        done = self.run(["python", "-c", code, *argv], cwd=cwd)
        return json.loads(done.stdout.strip().splitlines()[-1])


def make_venv(path: Path, *requirements: str | Path) -> Venv:
    uv("venv", "--quiet", "--python", sys.executable, str(path))
    venv = Venv(path)
    venv.install(*requirements)
    return venv


@pytest.fixture(scope="session")
def full_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Venv:
    """core-monitor, the four plugins the example logs to (with their SDKs) and scikit-learn."""
    path = tmp_path_factory.mktemp("venvs") / "full"
    return make_venv(path, wheels["core-monitor"], *(wheels[d] for d in PLUGINS), "scikit-learn")


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Venv:
    """``core-monitor`` alone: no backend installed."""
    return make_venv(tmp_path_factory.mktemp("venvs") / "core-only", wheels["core-monitor"])


@pytest.fixture(scope="session")
def build_wheel() -> Any:
    """``build_wheel(folder, out)``: build ``folder`` with ``uv build --wheel`` into ``out``;
    return the wheel's path (for distributions a test generates, such as ``monitors new``)."""

    def build(folder: Path, out: Path) -> Path:
        before = set(out.glob("*.whl")) if out.exists() else set()
        uv("build", "--wheel", "--quiet", "--out-dir", str(out), str(folder))
        (wheel,) = set(out.glob("*.whl")) - before
        return wheel

    return build


@pytest.fixture
def stdlib_venv(tmp_path: Path) -> Venv:
    """An empty venv made as a user makes one, ``python3 -m venv`` (with its own pip, no uv)."""
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return Venv(path)
