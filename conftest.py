"""Keep every test away from the user's home and the network: the core's and integration tests
under ``tests/`` and each plugin's under ``plugins/<name>_monitor/tests/``.

The SDKs read their folders from the environment, some of them once at import (Trackio reads
``TRACKIO_DIR`` when first imported), so the session-wide values are set here, at import, before
any test module imports an SDK; each test then gets its own folders under ``tmp_path``. What
"offline" means is defined once, in ``tests/sdk_env.py``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from sdk_env import DROP_ENV, offline_env  # tests/sdk_env.py (tests/ is on pytest's pythonpath)

# pytester: tests/core/test_contract_kit.py runs the kit on broken backends. The kit's plugin
# (its monitor_factory fixture) is opt-in, as for any project that installs core-monitor.
pytest_plugins = ["pytester", "core_monitor.testing"]

_SESSION_HOME = Path(tempfile.mkdtemp(prefix="monitors-tests-"))

os.environ.update(offline_env(_SESSION_HOME))
for _var in DROP_ENV:
    os.environ.pop(_var, None)
#: Where a test's monitors run their backends when it names no dispatch: a worker thread (each
#: ``Monitor`` with writer processes starts fresh interpreters, which is most of a test's time).
#: Tests about writer processes are marked ``@pytest.mark.process`` and get the users' default.
TEST_DISPATCH = "thread"


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 request: pytest.FixtureRequest) -> dict[str, str]:
    """Every SDK folder under this test's ``tmp_path/env``; offline; no rank variables; the
    monitors' default dispatch a worker thread, or writer processes (the users' default) for a
    test marked ``process`` (``EXPERIMENT_MONITORS_DISPATCH``, inherited by the scripts a test
    runs)."""
    env = offline_env(tmp_path / "env")
    env["EXPERIMENT_MONITORS_DISPATCH"] = (
        "process" if request.node.get_closest_marker("process") else TEST_DISPATCH)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
