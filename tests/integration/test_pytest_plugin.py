"""Installing ``core-monitor`` leaves other projects' pytest runs as they were.

The contract kit, ``core_monitor.testing``, is a pytest plugin a plugin author opts into
(``pytest_plugins = ["core_monitor.testing"]`` in ``conftest.py``), as pytest's own
``pytester`` is; it is not registered through a ``pytest11`` entry point, which would load it
(and import the core) into every pytest run of every project sharing the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Venv

# An unrelated project's test: the kit is neither imported nor registered, and its fixture is
# unknown there.
UNRELATED_TEST = '''
import sys
from importlib.metadata import entry_points


def test_the_kit_is_not_loaded(request):
    assert "core_monitor" not in sys.modules
    assert not request.config.pluginmanager.has_plugin("core_monitor.testing")
    assert [e.value for e in entry_points(group="pytest11") if "core_monitor" in e.value] == []
    assert "monitor_factory" not in request.fixturenames


def test_the_kits_fixture_is_not_there(monitor_factory):
    pass
'''

# The same project once it names the kit in its conftest.py.
OPTED_IN_TEST = '''
def test_the_kits_fixture_is_there(monitor_factory):
    assert type(monitor_factory).__name__ == "MonitorFactory"
'''


def test_an_unrelated_project_does_not_load_the_kit_until_it_names_it(
    core_venv: Venv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    core_venv.install(f"{wheels['core-monitor']}[testing]")  # core-monitor and pytest
    project = tmp_path / "unrelated"
    project.mkdir()
    # A project of its own: its own pytest configuration makes it pytest's rootdir, so no
    # configuration or conftest.py of a folder above it applies (under nox, tmp_path lies
    # inside this repository, whose conftest.py names the kit).
    (project / "pyproject.toml").write_text('[project]\nname = "unrelated"\nversion = "1"\n\n'
                                            "[tool.pytest.ini_options]\n")
    (project / "test_unrelated.py").write_text(UNRELATED_TEST)
    done = core_venv.run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=project, expect=1)
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("1 passed, 1 error"), done.stdout
    assert "fixture 'monitor_factory' not found" in done.stdout

    (project / "test_unrelated.py").unlink()
    (project / "conftest.py").write_text('pytest_plugins = ["core_monitor.testing"]\n')
    (project / "test_opted_in.py").write_text(OPTED_IN_TEST)
    done = core_venv.run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=project)
    assert done.stdout.strip().splitlines()[-1].startswith("1 passed"), done.stdout
