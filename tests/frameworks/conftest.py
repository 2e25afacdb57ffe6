"""Real frameworks on CPU (``nox -s frameworks``): torch, DeepSpeed, accelerate, Lightning, the
Hugging Face Trainer, and ``torchrun --nproc_per_node 2`` with gloo.

Scripts under ``scripts/`` run in fresh interpreters (DeepSpeed and torchrun need their own
processes); they write what the framework itself reports (steps, values) as JSON next to the
logs, and the tests read every backend's own storage back (``readback.py``).

These tests are about frameworks reaching the backends, not about where a backend runs: their
monitors use the suite's thread dispatch (the repository's ``conftest.py``), except one test per
framework marked ``process``, which runs as users get it, with writer processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

# The frameworks' own warnings (deprecations, "few dataloader workers", ...) are theirs, not
# failures of this project; warnings of core_monitor stay errors.
FRAMEWORK_WARNINGS = [
    "ignore::DeprecationWarning",
    "ignore::PendingDeprecationWarning",
    "ignore::FutureWarning",
    "ignore::UserWarning:lightning.*",
    "ignore::UserWarning:pytorch_lightning.*",
    "ignore::UserWarning:torch.*",
    "ignore::UserWarning:transformers.*",
    "ignore::UserWarning:accelerate.*",
    "ignore::ResourceWarning",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.fspath).parents:
            for spec in FRAMEWORK_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(autouse=True)
def close_open_monitors():
    """Close what a failed test left open: an open Trackio run holds Trackio's one folder per
    process, which would fail every later test in this process."""
    yield
    from core_monitor.shutdown import close_all

    close_all()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture
def work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder: a fresh one under ``tmp_path`` (the SDKs write there too)."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def dvc_work_dir(work_dir: Path) -> Path:
    """``work_dir`` holding a DVC repository without Git (``dvc init --no-scm``): DVCLive's
    ``Live()`` takes the nearest one, and without it runs ``dvc init`` in the Git checkout
    around the test's temporary folder when there is one (``nox`` keeps it under ``.nox/``)
    and saves a DVC experiment there (a Git commit) at ``end()``."""
    from dvc.repo import Repo

    Repo.init(str(work_dir), no_scm=True).close()
    return work_dir


@pytest.fixture
def clearml_task_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test that opens a ClearML task in this process (a built-in tracker beside ours):
    ``Task.init`` sets ``CLEARML_PROC_MASTER_ID`` and ``TRAINS_PROC_MASTER_ID`` in
    ``os.environ`` (``<pid>:<task id>``, ``<pid>:`` after ``close()``), which every later
    script of this worker would inherit and ClearML would take for a child of this process.
    Both are unset again after the test."""
    for name in ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID"):
        monkeypatch.setenv(name, "")  # recorded as unset, so the undo removes what is set
        monkeypatch.delenv(name)
