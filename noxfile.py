"""Sessions that build the distributions into wheels, install them for real and run them.

    nox               the default sessions lint, typecheck, docs, tests, frameworks, lowest,
                      newest, release (the CI command)
    nox -s tests      core, plugin and integration tests, against wheels in a fresh venv
    nox -s demo       a real training loop logging to trackio, tensorboard, wandb (offline) and
                      mlflow (a local SQLite store)
    nox -s lint       ruff
    nox -s typecheck  mypy: the core and the plugins (SDKs installed), the Python examples of
                      the README and of docs/, and a plugin from `monitors new` (--strict)
    nox -s docs       the documentation site (mkdocs build --strict) into ./site
    nox -s bench      benchmarks (prints ratios, writes benchmarks/results/)
    nox -s "plugin(name='trackio')"   one plugin's wheel next to the core, its tests
                      (plugins/trackio_monitor/tests) and the kit
    nox -s lowest     the oldest environment: Python 3.10, every requirement at the lowest
                      version declared; the core's tests and every plugin's kit and SDK checks
    nox -s newest     the newest environment: Python 3.13, the newest SDKs the index offers;
                      the same tests
    nox -s pythons    the same tests on Python 3.10 and 3.13, SDKs inside their tested ranges
    nox -s release    sdists and wheels from a clean tree, checked, installed as a user would
                      (--no-index --find-links), logged to and read back; nothing is uploaded
    nox -s frameworks real DeepSpeed, accelerate, Lightning and HF Trainer runs on CPU, and
                      torchrun --nproc_per_node 2 (gloo), against the wheels (tests/frameworks)
    nox -s dev        the development loop: editable installs in a reused venv, every test but
                      the slow ones; `nox -s dev -- --lf` reruns what failed last

Outside `dev` nothing is installed editable and nothing relies on PYTHONPATH: the tests see the
packages exactly as a user who ran `pip install core-monitor trackio-monitor` would.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.append(str(ROOT / "tests"))  # tests/sdk_env.py: standard library only
import sdk_env  # noqa: E402

CORE = ROOT / "core"
PLUGINS = {
    "trackio": ROOT / "plugins" / "trackio_monitor",
    "tensorboard": ROOT / "plugins" / "tensorboard_monitor",
    "wandb": ROOT / "plugins" / "wandb_monitor",
    "mlflow": ROOT / "plugins" / "mlflow_monitor",
    "csv": ROOT / "plugins" / "csv_monitor",
    "comet": ROOT / "plugins" / "comet_monitor",
    "aim": ROOT / "plugins" / "aim_monitor",
    "dvclive": ROOT / "plugins" / "dvclive_monitor",
    "swanlab": ROOT / "plugins" / "swanlab_monitor",
    "clearml": ROOT / "plugins" / "clearml_monitor",
    "prometheus": ROOT / "plugins" / "prometheus_monitor",
}
#: Plugins whose SDK cannot be installed on a supported Python, and those Pythons: the
#: sessions of those Pythons (``newest``, ``pythons``) leave them out, naming them. Aim's
#: storage engine (aimrocks) has no wheel for Python 3.13 (aim-monitor: requires-python <3.13).
UNSUPPORTED_PYTHONS = {"aim": ("3.13",)}
#: The plugins that wrap an SDK (a ``_compat.py`` with its tested range): ``lowest`` and
#: ``newest`` run for these; a plugin without an SDK (csv) has no range to cover.
SDK_PLUGINS = [name for name, folder in PLUGINS.items() if any(folder.glob("src/*/_compat.py"))]
FIXTURES = sorted(p for p in (ROOT / "tests" / "fixtures").iterdir() if p.is_dir())
#: Every test but the framework runs (`nox -s frameworks`): the core's, the integration tests
#: and each plugin's own tests, beside its code.
SUITE = ["tests", *(str(folder / "tests") for folder in PLUGINS.values()),
         "--ignore=tests/frameworks"]
#: psycopg2-binary: the MLflow server of the delivery tests keeps its store in PostgreSQL
#: (tests/postgres_server.py); psutil and nvidia-ml-py: the system metrics sampler.
TEST_DEPS = ["pytest>=8", "pytest-timeout", "pytest-xdist", "numpy",
             "uv", "psutil",
             "nvidia-ml-py", "fsspec", "psycopg2-binary"]
#: pytest-xdist: one worker more than the CPUs, each test module (or test class) on one worker,
#: so that a module's shared fixtures (an MLflow server, the copy tests' source runs) start
#: once. Much of a test's time is spent waiting for processes it started (a server, a writer
#: importing its SDK, a subprocess at a deadline): on 2 cores the suite kept them busy 56% of
#: the time with 2 workers; 3 workers took the tests session from 887 s to 758 s (on a machine
#: busier than CI); 4 took it from 800 s to 852 s (a clean clone, idle machine, 2026-12-06).
#: The frameworks session, which trains torch models, keeps one per CPU.
#: tests and frameworks also print their 15 slowest tests (`--durations`), the first place to
#: look when CI slows down.
WORKERS = str((os.cpu_count() or 1) + 1)
PARALLEL = ["-n", WORKERS, "--dist", "loadscope"]
CPU_BOUND = ["-n", "auto", "--dist", "loadscope"]


def pytest_runs(session: nox.Session, *args: str, marks: str = "",
                env: dict[str, str]) -> None:
    """pytest over ``args`` (paths and options, no ``-m``) on the ``PARALLEL`` workers, limited
    to the marker expression ``marks`` when given. No test asserts a speed (figures live in
    benchmarks/, tests assert exact counts that hold on a loaded machine), so every test runs
    in this one parallel run; pytest's exit 5 (nothing collected) fails the session."""
    session.run("pytest", *PARALLEL, *args, *(["-m", marks] if marks else []), env=env)

nox.options.default_venv_backend = "uv|virtualenv"
#: Python caches the bytecode of each module it imports (``__pycache__``) unless
#: ``PYTHONDONTWRITEBYTECODE`` is set, as some container images set it (the machine CI ran on
#: had it: no venv under .nox/ held a .pyc). uv installs no bytecode, so with it set every
#: process of a session (each xdist worker, writer process, script, torchrun rank) compiled
#: every module of the SDKs and frameworks it imported from source, every time: importing
#: mlflow, wandb, trackio and TensorBoard took 8 s instead of 3.5 s, and the writer-process
#: tests twice as long. The venvs under .nox/ are this file's: bytecode is cached there, once.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# `nox`: what CI runs (bench and bench_dist measure, never gate; dev, pythons and bench_dist are
# left out on purpose: lowest and newest run the edge Pythons). `CI=true bash .ci/run` on a clean
# clone, 2 cores, nothing else running (2026-12-06): about 35 min from start to exit, nox's
# sessions 31 min (lint seconds, typecheck 52 s, docs 4 s, tests 14 min, frameworks 8 min,
# lowest 4 min, newest 4 min, release 1 min), uv's package cache nearly empty at the start.
nox.options.sessions = ["lint", "typecheck", "docs", "tests", "frameworks", "lowest", "newest",
                        "release"]
nox.options.error_on_external_run = True


#: Folder -> the wheel built from it in this nox run: every session installs the same wheels,
#: and building them again in each of a dozen sessions cost CI minutes.
_BUILT: dict[Path, str] = {}


def build_wheels(session: nox.Session, folders: list[Path]) -> list[str]:
    """One wheel per folder, built once per nox run: the first session that needs it builds it
    into its own temporary folder (``.nox/<session>/tmp/wheels/<folder name>``, replacing a
    wheel an earlier run left there), the later ones install that file; their paths."""
    wheels = Path(session.create_tmp()) / "wheels"
    missing = [folder for folder in folders if folder not in _BUILT]
    if missing:
        session.install("uv")
    for folder in missing:
        out = wheels / folder.name
        if out.exists():
            shutil.rmtree(out)
        session.run_install("uv", "build", "--wheel", "--quiet", "--out-dir", str(out),
                            str(folder))  # run_install: also under `nox --install-only`
        (wheel,) = out.glob("*.whl")
        _BUILT[folder] = str(wheel)
    return sorted(_BUILT[folder] for folder in folders)


def tested_ranges() -> dict[str, str]:
    """Plugin name -> the SDK versions it is tested with, e.g. ``"trackio>=0.42,<0.44"``.

    Read from each plugin's ``_compat.TESTED`` (the one place the range is kept; the plugin
    checks it at run time), without importing the plugin: nox runs before anything is installed.
    """
    ranges = {}
    for name in SDK_PLUGINS:
        (compat,) = PLUGINS[name].glob("src/*/_compat.py")
        found = re.search(r'^TESTED = "([^"]+)"$', compat.read_text(), flags=re.MULTILINE)
        if found is None:
            raise RuntimeError(f"{compat}: no TESTED = \"<sdk requirement>\" line")
        ranges[name] = found.group(1)
    return ranges


def tested_constraints(session: nox.Session) -> list[str]:
    """``-c <file>`` holding every plugin's tested SDK range: the distributions declare only the
    lowest version, so without it a session would take whatever the index offers newest, and a
    new SDK release would change what an unrelated change is tested against. ``nox -s newest``
    runs without it."""
    path = Path(session.create_tmp()) / "tested-sdks.txt"
    path.write_text("".join(f"{r}\n" for r in tested_ranges().values()))
    return ["-c", str(path)]


def install_wheels(session: nox.Session, wheels: list[str], *requirements: str,
                   tested: bool = True) -> None:
    """Install ``wheels`` and ``requirements``, the SDKs inside their tested ranges unless
    ``tested=False``; our wheels always replace an installed copy, so a reused venv
    (``nox -R``) runs the code of this checkout, not of an earlier build."""
    session.install(*(tested_constraints(session) if tested else []), *wheels, *requirements)
    force = "--reinstall" if session.venv_backend == "uv" else "--force-reinstall"
    session.install(force, "--no-deps", *wheels)


def uv_cache(session: nox.Session) -> dict[str, str]:
    """``UV_CACHE_DIR``: the package cache this nox run's installs filled, for the venvs
    tests/integration builds (``offline_env`` moves ``HOME`` and ``XDG_CACHE_HOME``, so uv there
    would start from an empty cache and download every SDK again, in each xdist worker)."""
    if os.environ.get("UV_CACHE_DIR"):
        return {"UV_CACHE_DIR": os.environ["UV_CACHE_DIR"]}
    found = session.run("uv", "cache", "dir", silent=True)
    if found is None:  # `nox --install-only` runs nothing
        return {}
    return {"UV_CACHE_DIR": found.strip().splitlines()[-1]}


def offline_env(session: nox.Session) -> dict[str, str]:
    """What every session's processes see: offline, and every SDK folder under the session's
    temporary directory (the one definition is tests/sdk_env.py)."""
    return sdk_env.offline_env(Path(session.create_tmp()) / "home")


@nox.session
def tests(session: nox.Session) -> None:
    """Build and install all wheels (core, plugins, test backends); run the whole test suite."""
    wheels = build_wheels(session, [CORE, *PLUGINS.values(), *FIXTURES])
    install_wheels(session, wheels, *TEST_DEPS)
    session.run("monitors", "list", "--json")
    env = {**offline_env(session), "MONITORS_WHEELS": os.pathsep.join(wheels),
           **uv_cache(session)}
    if session.posargs:
        session.run("pytest", "--timeout=600", *PARALLEL, *session.posargs, env=env)
    else:
        pytest_runs(session, "--timeout=600", "--durations=15", *SUITE, env=env)


# The framework versions tests/frameworks runs against on CPU. core-monitor's extras name the
# lowest of each, without the caps kept here so that CI does not move when a framework releases.
FRAMEWORKS = [
    "deepspeed>=0.19.8,<0.20",
    "accelerate>=1.15,<2",
    "lightning>=2.6.6,<2.7",
    "transformers>=5.24,<6",
]
#: The torch release tested with them; its CPU wheel when one lies in pip's find-links folders.
TORCH = "2.13.0"


def torch_requirement() -> list[str]:
    """``uv pip install`` arguments for torch.

    PyPI's Linux torch wheel is the CUDA build, with about 3 GB of NVIDIA wheels (a download on
    every fresh CI machine, for tests that run on the CPU). When a folder in pip's
    ``find-links`` (``PIP_FIND_LINKS`` or pip's config, which uv does not read) holds the CPU
    wheel of ``TORCH`` for this Python, that wheel is used: about 200 MB from disk, no download.
    Otherwise the index's ``torch==TORCH``.
    """
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    try:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                                capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):  # no pip next to nox: PIP_FIND_LINKS only
        listed = ""
    for line in listed.splitlines():
        if "find-links=" in line:
            folders += line.split("=", 1)[1].strip("'\" ").split()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for folder in folders:
        if folder.startswith("file://"):
            folder = folder[len("file://"):]
        if list(Path(folder).glob(f"torch-{TORCH}+cpu-{tag}-{tag}-*linux*.whl")):
            return ["--find-links", folder, f"torch=={TORCH}+cpu"]
    return [f"torch=={TORCH}"]


@nox.session
def frameworks(session: nox.Session) -> None:
    """Real framework runs on CPU against the built wheels: DeepSpeed, accelerate, Lightning,
    the Hugging Face Trainer, and torchrun --nproc_per_node 2 (gloo). `-- -k lightning` etc.
    select tests."""
    wheels = build_wheels(session, [CORE, *PLUGINS.values()])
    install_wheels(session, wheels, *TEST_DEPS, *torch_requirement())
    # DeepSpeed ships an sdist whose setup.py imports torch: build it against the torch above
    # instead of an isolated build environment (which would download torch once more).
    session.install("--no-build-isolation-package", "deepspeed", *FRAMEWORKS)
    env = offline_env(session)
    # DeepSpeed compiles a small shared-memory op on CPU on first use (about a minute); keep it.
    env["TORCH_EXTENSIONS_DIR"] = str((Path(session.cache_dir) / "torch_extensions").resolve())
    env["DS_ACCELERATOR"] = "cpu"
    session.run("pytest", "--timeout=900", *CPU_BOUND, "--durations=15",
                *(session.posargs or ["tests/frameworks"]), env=env)


@nox.session
def demo(session: nox.Session) -> None:
    """Train on scikit-learn's digits logging to trackio, tensorboard, wandb (offline) and mlflow
    (a local SQLite store, no server), then
    read every backend's storage back and check they agree. Extra arguments go to the example,
    e.g. `nox -s demo -- --steps 500`. Output: ./demo-runs (replaced on each run)."""
    wheels = build_wheels(session, [CORE, *PLUGINS.values()])
    install_wheels(session, wheels, "scikit-learn")
    env = offline_env(session)
    log_dir = ROOT / "demo-runs"
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir()
    record = log_dir / "logged.json"
    session.log("monitors list --check: imports each plugin and its SDK (about 15 s)")
    session.run("monitors", "list", "--check", env=env)
    session.run("python", str(ROOT / "examples" / "train_digits.py"),
                "--backends", "trackio,tensorboard,wandb,mlflow", "--log-dir", str(log_dir),
                "--project", "digits", "--name", "demo", "--record", str(record),
                *session.posargs, env=env)
    session.log("reading every backend's storage back through its plugin's reader...")
    session.run("python", str(ROOT / "examples" / "readback.py"), "--record", str(record),
                env=env)
    session.log(f"demo runs are in {log_dir} (what was logged: {record}); the commands above "
                f"open each one ({session.bin} holds the tools)")


@nox.session
@nox.parametrize("name", list(PLUGINS))
def plugin(session: nox.Session, name: str) -> None:
    """One plugin's wheel next to the core's: its tests, which run the contract kit."""
    wheels = build_wheels(session, [CORE, PLUGINS[name]])
    install_wheels(session, wheels, *TEST_DEPS)
    session.run("monitors", "list", "--check")
    session.run("pytest", "--timeout=600", str(PLUGINS[name] / "tests"), *session.posargs,
                env=offline_env(session))


@nox.session(reuse_venv=True)
def dev(session: nox.Session) -> None:
    """The fast loop while developing: the core, the plugins and the test backends installed
    editable in a venv kept between runs, so an edit needs no rebuild, then every test except
    the slow ones (`-m "not slow"`: the wheel-and-venv tests of tests/integration) and the
    framework runs. Arguments after `--` replace the test selection, e.g. `nox -s dev -- --lf`
    (the last failures; pytest's cache is on) or `nox -s dev -- plugins/wandb_monitor/tests`.

    The CI sessions (`tests`, `plugin`, `lowest`, `frameworks`) install wheels instead: what
    an editable install cannot show (a file left out of a wheel, the kit's check that a
    plugin's import pulls in no SDK, which needs installed metadata) shows there.
    """
    editable = [arg for folder in [CORE, *PLUGINS.values(), *FIXTURES]
                for arg in ("--editable", str(folder))]
    session.install(*editable, *TEST_DEPS)
    session.run("pytest", "--timeout=600", *(session.posargs or [*SUITE, "-m", "not slow"]),
                env=offline_env(session))


def lowest_pins(wheel: str) -> list[str]:
    """``name==X`` for every requirement of ``wheel`` declared ``>=X`` (from its METADATA),
    except core-monitor (whose wheel comes from this checkout)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    pins = []
    for requirement in re.findall(r"^Requires-Dist: (.+)$", metadata, flags=re.MULTILINE):
        found = re.match(r"\s*([A-Za-z0-9._-]+)[^;]*?>=\s*([0-9][^,;\s]*)", requirement)
        if found and found.group(1) != "core-monitor" and ";" not in requirement:
            pins.append(f"{found.group(1)}=={found.group(2)}")
    return pins


#: What the SDK-edge sessions (``lowest``, ``newest``) and the Python-edge session (``pythons``)
#: run of each plugin's tests: its contract kit (every write and read path of the plugin
#: through the SDK, one writer-process round trip included) and its SDK checks (tests named
#: for a missing internal, the SDK or its version). The plugin's other tests run in ``tests``
#: (``nox -s "plugin(name='...')"`` runs them all); this keeps CI within its time. ``core``
#: keeps ``PYTHON_TESTS`` whole in the same pytest run (``-k`` matches a test's folder names
#: too; two plugin tests with "core" in their names come along), so that one run's workers
#: share both: two runs cost a pytest start and an idle tail each.
EDGE_TESTS = ["-k", "core or Contract or internal or sdk or version"]


def every_plugins_tests(session: nox.Session) -> list[str]:
    """The folders of the tests of every plugin installable on the session's Python (each
    runs the contract kit)."""
    return [test for name in plugins_on(session) for test in plugin_tests(name)]


def plugins_on(session: nox.Session) -> dict[str, Path]:
    """``PLUGINS`` less those whose SDK cannot be installed on the session's Python
    (``UNSUPPORTED_PYTHONS``), which are named in the session's log."""
    python = str(session.python or "")
    left_out = sorted(name for name, pythons in UNSUPPORTED_PYTHONS.items() if python in pythons)
    if left_out:
        session.log(f"left out on Python {python} (their SDK has no build for it): "
                    f"{', '.join(left_out)}")
    return {name: folder for name, folder in PLUGINS.items() if name not in left_out}


# Supported Pythons -------------------------------------------------------------------------
#: The Python versions every distribution supports: each pyproject.toml's ``requires-python``
#: and classifiers say the same (``nox -s release`` checks that they do).
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: CI tests the edges of that range together with the edges of the SDK ranges: ``lowest`` on
#: the lowest Python, ``newest`` on the highest (the oldest and the newest environment a user
#: can have), ``tests`` and ``frameworks`` on the default interpreter, inside the tested
#: ranges. On each edge Python: the core's tests but the heavy ones (many processes, or a
#: whole pytest run: the same code again), and each plugin's kit and SDK checks
#: (``EDGE_TESTS``). The installed-wheel tests (tests/integration), the cross-backend runs of
#: tests/plugins and the framework runs stay on the default interpreter: what they prove
#: beyond these (a venv, four SDKs at a time, the frameworks) is not Python-version specific.
#: ``nox -s pythons`` runs the edge Pythons with the SDKs inside their tested ranges.
PYTHON_TESTS = ("tests/core",)


def select_pyenv_pythons(versions: tuple[str, ...]) -> None:
    """Let pyenv's shims run ``python3.10`` ... when those versions are installed but not
    selected: nox finds interpreters on PATH, and a pyenv shim runs only the versions that
    ``PYENV_VERSION`` or ``pyenv global`` select. The installed versions are added after the
    ones already selected (so ``python3`` stays what it was), for nox's processes only.
    Without pyenv this does nothing."""
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return
    current = os.environ.get("PYENV_VERSION") or subprocess.run(
        [pyenv, "version-name"], capture_output=True, text=True).stdout.strip()
    selected = [v for v in current.split(":") if v]
    for version in versions:
        if any(s == version or s.startswith(f"{version}.") for s in selected):
            continue
        latest = subprocess.run([pyenv, "latest", version], capture_output=True, text=True)
        if latest.returncode == 0:
            selected.append(latest.stdout.strip())
    if selected:
        os.environ["PYENV_VERSION"] = ":".join(selected)


select_pyenv_pythons((PYTHONS[0], PYTHONS[-1]))


def edge_tests(session: nox.Session, *pytest_args: str) -> None:
    """What the edge sessions run: ``monitors list --check`` over the plugins; then, with the
    test backends added, the core's tests (``PYTHON_TESTS``) and every plugin's kit and SDK
    checks (``EDGE_TESTS``), or ``session.posargs`` instead of both."""
    session.run("monitors", "list", "--check")
    # The test backends include broken ones (for the core's tests): after the check.
    session.install("--no-deps", *build_wheels(session, FIXTURES))
    env = offline_env(session)
    if session.posargs:
        session.run("pytest", "--timeout=600", *pytest_args, *session.posargs, env=env)
        return
    pytest_runs(session, "--timeout=600", *pytest_args, *PYTHON_TESTS,
                *every_plugins_tests(session), *EDGE_TESTS, marks="not heavy", env=env)


# Lowest and newest SDKs ----------------------------------------------------------------------


@nox.session(python=PYTHONS[0])
def lowest(session: nox.Session) -> None:
    """The oldest environment: the lowest supported Python, and every requirement of the core
    and the plugins pinned at the lowest version it declares (``lowest_pins``), all plugins in
    one venv; ``edge_tests``.

    One venv and one pytest run for every plugin, rather than one per plugin: a venv and a
    pytest start cost about a minute each, which ten plugins would pay ten times. A requirement
    two distributions declare with different lowest versions is pinned at the higher of them
    (and named): the lower one is then not what is tested. When the plugins' lowest SDKs cannot
    share one venv, the install fails here, naming the conflict; split ``PLUGINS`` into groups
    then. The interpreter is found as ``select_pyenv_pythons`` says; a missing one is skipped
    locally and fails the run in CI (nox's default when ``CI`` is set).
    """
    wheels = build_wheels(session, [CORE, *plugins_on(session).values()])
    pins: dict[str, str] = {}
    for wheel in wheels:
        for pin in lowest_pins(wheel):
            project, version = pin.split("==")
            if project in pins and pins[project] != version:
                higher = max(pins[project], version, key=version_key)
                session.warn(f"{project}: lowest declared {pins[project]} and {version}; "
                             f"pinned at {higher}")
                version = higher
            pins[project] = version
    pinned = [f"{project}=={version}" for project, version in sorted(pins.items())]
    install_wheels(session, wheels, *TEST_DEPS, *pinned)
    session.log(f"lowest declared: {', '.join(pinned)}")
    edge_tests(session)


def version_key(version: str) -> tuple[int, ...]:
    """``"3.17.1"`` -> ``(3, 17, 1)``, for comparing the plain versions of ``>=`` requirements."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


@nox.session(python=PYTHONS[-1])
def newest(session: nox.Session) -> None:
    """The newest environment: the highest supported Python, and the newest SDKs (and core
    requirements) the index offers, outside the tested ranges too, all plugins in one venv;
    ``edge_tests``. A release that breaks a plugin fails here the day it lands.

    The run-time warning for an SDK outside the tested range (``SdkVersionWarning``) is
    expected here and not an error; the session names each SDK version it tested, and the
    range it was tested with (widen ``_compat.TESTED`` once the tests pass).
    """
    plugins = plugins_on(session)
    wheels = build_wheels(session, [CORE, *plugins.values()])
    ranges = {name: tested for name, tested in tested_ranges().items() if name in plugins}
    sdks = {name: re.match(r"[A-Za-z0-9._-]+", tested).group(0) for name, tested in ranges.items()}
    install_wheels(session, wheels, *TEST_DEPS, tested=False)
    session.install("--upgrade", *sdks.values())  # a reused venv (-R) too
    installed = session.run(
        "python", "-c", "import importlib.metadata as m, sys\n"
        "for sdk in sys.argv[1:]: print(sdk, m.version(sdk))", *sdks.values(), silent=True)
    if installed is not None:  # None under `nox --install-only`, which runs nothing
        versions = dict(line.split() for line in installed.splitlines())
        for name, sdk in sdks.items():
            session.log(f"{sdk} {versions[sdk]} (tested: {ranges[name]})")
    edge_tests(session, "-W", "ignore::core_monitor.SdkVersionWarning")


@nox.session(python=[PYTHONS[0], PYTHONS[-1]])
def pythons(session: nox.Session) -> None:
    """``edge_tests`` on the lowest and the highest supported Python with the SDKs inside their
    tested ranges (not a CI session: ``lowest`` and ``newest`` run those Pythons)."""
    install_wheels(session, build_wheels(session, [CORE, *plugins_on(session).values()]),
                   *TEST_DEPS)
    edge_tests(session)


def plugin_tests(name: str) -> list[str]:
    """The tests of one plugin, beside it (with the contract kit, which they run)."""
    return [str(PLUGINS[name] / "tests")]


# Release ------------------------------------------------------------------------------------
#: Distribution name -> its folder, whose pyproject.toml holds its one version.
DISTRIBUTIONS = {
    "core-monitor": CORE,
    **{f"{name}-monitor": folder for name, folder in PLUGINS.items()},
}


@nox.session
def release(session: nox.Session) -> None:
    """Build, check and install the distributions (the core and one per backend) as a user
    would; nothing is uploaded.

    1. The sdist and wheel of each distribution, built from ``git archive HEAD`` (a clean
       tree, what a fresh clone holds: uncommitted changes are named and left out) into
       ``.nox/release/tmp/dist``; ``uv build`` builds each wheel from its sdist.
    2. ``twine check --strict`` (the long descriptions render) and ``release/check_dists.py``
       (versions, license, Pythons, URLs, entry points, no upper bound on any requirement).
    3. A fresh venv: the requirements our wheels declare, from the index (SDKs inside their
       tested ranges); then ``pip install --no-index --find-links dist core-monitor
       trackio-monitor tensorboard-monitor wandb-monitor mlflow-monitor csv-monitor
       comet-monitor``: ours from
       that folder alone.
    4. ``monitors list --check``, and ``release/smoke.py``: 20 steps to every backend, read
       back through each plugin's reader.
    5. What would be uploaded: each file, its size and sha256, and the upload command.
    """
    tmp = Path(session.create_tmp())
    source, dist, venv = tmp / "source", tmp / "dist", tmp / "user-venv"
    for folder in (source, dist, venv):
        if folder.exists():
            shutil.rmtree(folder)
    clean_tree(session, source)
    session.install("uv", "twine", "packaging")
    for folder in DISTRIBUTIONS.values():
        session.run("uv", "build", "--quiet", "--out-dir", str(dist),
                    str(source / folder.relative_to(ROOT)))
    built = sorted([*dist.glob("*.whl"), *dist.glob("*.tar.gz")])  # uv adds a .gitignore
    if not built:  # `nox --install-only`: session.run runs nothing, so nothing was built
        session.log("nothing built (--install-only): the session's tools are installed")
        return
    session.run("twine", "check", "--strict", *map(str, built))
    session.run("python", str(source / "release" / "check_dists.py"), str(dist))

    session.run("uv", "venv", "--quiet", "--seed", "--python", sys.executable, str(venv))
    python = str(venv / "bin" / "python")
    requirements = sorted({r for w in dist.glob("*.whl") for r in wheel_requirements(w)})
    session.run("uv", "pip", "install", "--quiet", "--python", python,
                *tested_constraints(session), *requirements)
    session.run(python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                str(dist), *DISTRIBUTIONS, external=True)
    env = {**offline_env(session), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    session.run(str(venv / "bin" / "monitors"), "list", "--check", env=env, external=True)
    session.run(python, str(source / "release" / "smoke.py"), "--log-dir", str(tmp / "smoke"),
                "--steps", "20", env=env, external=True)
    session.log("would upload (nothing is uploaded by this session):")
    for file in built:
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        session.log(f"  {file.name:<48} {file.stat().st_size:>9,} bytes  sha256 {digest}")
    session.log(f"with: twine upload {dist}/*.whl {dist}/*.tar.gz")


def clean_tree(session: nox.Session, target: Path) -> None:
    """Export the committed tree (``git archive HEAD``) to ``target``; name what it leaves out."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        session.error("nox -s release builds from git's HEAD: run it in a git clone")
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    if changed:
        session.warn(f"{len(changed)} uncommitted change(s) are not in the build: "
                     + ", ".join(line[3:] for line in changed[:10]))
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")


def wheel_requirements(wheel: Path) -> list[str]:
    """The requirements ``wheel`` declares, other than this project's own distributions and
    extras (what a user's install takes from the index)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    found = []
    for requirement in re.findall(r"^Requires-Dist: (.+)$", metadata, flags=re.MULTILINE):
        project = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        if project not in DISTRIBUTIONS and "extra ==" not in requirement:
            found.append(requirement)
    return found


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks B1-B7 and P3/P7/sustained against installed wheels; `-- --quick`: a short run.

    Prints the table; writes benchmarks/results/latest.json and latest.md. Fails when a backend
    stored fewer scalars than it was sent. Arguments after `--` go to benchmarks/run.py.
    """
    wheels = build_wheels(session, [CORE, *PLUGINS.values()])
    # P7 trains a torch MLP on the CPU: the CPU wheel when one is on disk (torch_requirement).
    # psycopg2-binary: P-outage's MLflow server keeps its store in PostgreSQL (tests/pg_servers.py).
    install_wheels(session, wheels, "tensorboardX", "psutil", "psycopg2-binary",
                   *torch_requirement())
    session.run("python", "benchmarks/run.py", *session.posargs, env=offline_env(session))


@nox.session
def bench_dist(session: nox.Session) -> None:
    """B8: Monitor.log(reduce="mean") against a bare all_reduce, torchrun 2 ranks (gloo).
    Arguments after `--` go to benchmarks/b8_reduce.py (e.g. `-- --rounds 15`). Not run by CI,
    like `bench`: speed goals are measured here, never asserted in timed tests."""
    wheels = build_wheels(session, [CORE])
    install_wheels(session, wheels, *torch_requirement())
    session.run("python", "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", "29581",
                "benchmarks/b8_reduce.py", *session.posargs, env=offline_env(session))


# Documentation --------------------------------------------------------------------------------
#: The site's tools: MkDocs, Material for MkDocs, mkdocstrings (the API reference, read from the
#: sources by griffe: nothing of the project is installed or imported).
DOCS = ["mkdocs>=1.6,<2", "mkdocs-material>=9.6,<10", "mkdocstrings[python]>=0.29,<2"]


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site (docs/, mkdocs.yml) into ./site with ``--strict``: a broken
    link, a missing page or an API reference that does not resolve fails the build. The site
    reads offline from the folder: open site/index.html. `nox -s docs -- serve` serves it on
    127.0.0.1:8000 instead, rebuilding on each edit."""
    session.install(*DOCS)
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # Material's banner about its successor
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", "--dev-addr", "127.0.0.1:8000",
                    *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"),
                    *session.posargs)
        session.log(f"the site: {ROOT / 'site' / 'index.html'} (opens offline)")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole repository."""
    session.install("ruff")
    session.run("ruff", "check", ".")


# Types ----------------------------------------------------------------------------------------
#: The mypy release the types are checked with; a new one adds checks, so it moves on purpose.
MYPY = "mypy>=2.4,<2.5"
#: What the README's and the site's examples leave to the reader (their data, model, loop and
#: framework objects, a plugin of their own), declared for the type checker. Any other name an
#: example uses, it must import or define itself.
README_GIVEN = """\
from typing import Any

import core_monitor

loader: Any
train_step: Any
total_steps: int
scheduler: Any
local_loss: float
step: int
model: Any
params: Any
ds_config: dict[str, Any]
loss: Any
hparams: dict[str, Any]
args: Any
ds: Any
ExampleMonitor: Any
read_rows: Any
read_config: Any
read_media: Any
monitor: core_monitor.Monitor
"""


#: ``--8<-- "path:first:last"``: pymdownx.snippets' include of lines of a repository file (the
#: backend pages include their plugin's README): its examples are the page's examples. An empty
#: ``last`` (``"path:2:"``) reads to the end of the file.
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\d+))?(?::(\d*))?"$')


def markdown_lines(page: Path) -> list[tuple[str, str, int]]:
    """``(text, file, line)`` of each line of ``page``, snippet includes expanded; ``file`` is
    where the line is written (the page, or the file it includes), relative to the root."""
    lines = []
    for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        found = SNIPPET.match(text.strip())
        if found is None:
            lines.append((text, str(page.relative_to(ROOT)), number))
            continue
        included = ROOT / found.group(1)
        first = int(found.group(2) or 1)
        body = included.read_text(encoding="utf-8").splitlines()
        last = int(found.group(3) or len(body))
        lines += [(body[n - 1], found.group(1), n) for n in range(first, min(last, len(body)) + 1)]
    return lines


def readme_examples(target: Path) -> list[Path]:
    """Write each ```python block of README.md and of the site's pages (docs/**/*.md, with the
    files they include) to ``target/<page>_<line>.py`` (``<line>``: where the block starts in the
    file that holds it), after ``README_GIVEN``; return the files. A block included by several
    pages is written once."""
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.py"):
        old.unlink()
    files: dict[tuple[str, int], Path] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = markdown_lines(page)
        start = None
        for index, (text, _, _) in enumerate(lines):
            if start is None and text.strip() == "```python":
                start = index
            elif start is not None and text.strip() == "```":
                _, where, first = lines[start]
                if (where, first) not in files:
                    name = re.sub(r"[^A-Za-z0-9]+", "_", where.removesuffix(".md"))
                    file = target / f"{name}_{first}.py"
                    body = "\n".join(t for t, _, _ in lines[start + 1:index])
                    file.write_text(f"{README_GIVEN}\n# {where}, line {first}\n{body}\n",
                                    encoding="utf-8")
                    files[where, first] = file
                start = None
    return list(files.values())


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy with the project's configuration (pyproject.toml) over the core and the plugins,
    each SDK installed inside its tested range so the plugins are checked against its types;
    then under ``--strict`` the Python examples of the README and the site (``readme_examples``)
    and the plugin
    ``monitors new`` writes (its module and its tests), as a user's type checker sees them.
    The framework integrations are checked without the frameworks (their imports are ``Any``).
    """
    editable = [arg for folder in [CORE, *PLUGINS.values()] for arg in ("--editable", str(folder))]
    session.install(*tested_constraints(session), *editable, "pytest>=8", "numpy", MYPY)
    sources = [str(CORE / "src" / "core_monitor"),
               *(str(path) for folder in PLUGINS.values() for path in folder.glob("src/*")
                 if (path / "__init__.py").exists())]
    tmp = Path(session.create_tmp())
    examples = readme_examples(tmp / "examples")
    scaffold = tmp / "scaffold" / "example-monitor"
    if scaffold.exists():
        shutil.rmtree(scaffold)
    scaffold.parent.mkdir(parents=True, exist_ok=True)
    session.run("monitors", "new", "example", "--dir", str(scaffold), silent=True)
    failed = []
    for what, command in (
        ("the core and the plugins", ["--cache-dir", str(tmp / "mypy-cache"), *sources]),
        ("the README's and the site's examples and the generated plugin (--strict)",
         ["--strict", "--cache-dir", str(tmp / "mypy-strict-cache"), *map(str, examples),
          str(scaffold / "src"), str(scaffold / "tests")]),
    ):
        try:  # both checks run, so one run shows every error
            session.run("mypy", *command)
        except nox.command.CommandFailed:
            failed.append(what)
    if failed:
        session.error(f"mypy found errors in {' and in '.join(failed)}")

