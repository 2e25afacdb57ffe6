"""``monitors new``: the plugin distribution it writes, and the names and folders it refuses.

That the generated plugin builds into a wheel, installs next to the core's wheel, is listed by
``monitors list --check`` and passes its tests in that venv is in
tests/integration/test_new_plugin.py.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest
from interpreter import run_python

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the core's own dependency for reading TOML there
    import tomli as tomllib

from core_monitor import cli, scaffold
from core_monitor.scaffold import ScaffoldError, create_plugin, plugin_names
from core_monitor.testing import MonitorContract
from core_monitor.testing._media import MediaChecks

#: Five files: one module holding the backend and its reader, one test file.
FILES = {
    "README.md", "pyproject.toml", "src/example_monitor/__init__.py",
    "src/example_monitor/py.typed", "tests/test_example_monitor.py",
}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """An empty folder to write plugins into (``tmp_path`` also holds the SDK folders)."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_new_writes_a_distribution_with_the_entry_point_and_the_kit(work, capsys):
    target = work / "example-monitor"
    assert cli.main(["new", "example", "--dir", str(target)]) == 0
    assert files_under(target) == FILES
    assert os.listdir(work) == ["example-monitor"]  # no staging folder left behind

    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["name"] == "example-monitor"
    assert project["entry-points"]["experiment_monitors"] == {
        "example": "example_monitor:ExampleMonitor"}
    assert [d.split(">=")[0] for d in project["dependencies"]] == ["core-monitor"]
    assert project["optional-dependencies"]["test"] == ["core-monitor[testing]"]

    out = capsys.readouterr().out
    assert f"pip install '{target}[test]' && pytest {target}" in out
    module = (target / "src" / "example_monitor" / "__init__.py").read_text()
    assert "class ExampleMonitor:" in module and "def read_rows(run: RunInfo)" in module
    tests = (target / "tests" / "test_example_monitor.py").read_text()
    assert "class TestExampleMonitorContract(MonitorContract):" in tests
    assert "    backend_class = ExampleMonitor\n" in tests  # the kit's class attributes


def test_new_defaults_to_name_monitor_in_the_current_folder(work, monkeypatch):
    monkeypatch.chdir(work)
    assert create_plugin("my-tracker") == work / "my-tracker-monitor"
    assert "src/my_tracker_monitor/__init__.py" in files_under(work / "my-tracker-monitor")
    assert "tests/test_my_tracker_monitor.py" in files_under(work / "my-tracker-monitor")
    pyproject = (work / "my-tracker-monitor" / "pyproject.toml").read_text()
    assert 'my-tracker = "my_tracker_monitor:MyTrackerMonitor"' in pyproject


@pytest.mark.heavy
def test_the_generated_backend_passes_the_contract_kit(work, pytester):
    """The kit as generated, against the generated package from its source folder (so the one
    kit test that needs an installed distribution, the SDK-import check, skips; the venv test
    in tests/integration runs it installed)."""
    target = create_plugin("example", work / "example-monitor")
    result = pytester.runpytest_subprocess(
        str(target / "tests"), "-q", "-k", "TestExampleMonitorContract", "-p", "no:cacheprovider",
        "-o", f"pythonpath={target / 'src'}",
    )
    kit_tests = [n for n in dir(MonitorContract) if n.startswith("test_")]
    # Skipped: the media checks that need a declared kind (the example backend stores no media),
    # the import check, the declared-reader check, the writer-process check and the three crash
    # checks (SIGKILL, SIGTERM, an exception in `with`), which need the plugin installed (it
    # runs from source here), and the two resume checks (the template declares no resume).
    media = [n for n in dir(MediaChecks) if n.startswith("test_") and "declared" not in n]
    result.assert_outcomes(passed=len(kit_tests) - len(media) - 7, skipped=len(media) + 8,
                           deselected=3)
    result.stdout.fnmatch_lines(["*'example_monitor' is not provided by an installed*"])


@pytest.mark.parametrize(("name", "says"), [
    ("CSV", "did you mean 'csv'?"),
    ("my tracker", "use lower-case letters and digits"),
    ("9lives", "starting with a letter"),
    ("csv-", "words joined by '-' or '_'"),
    ("", "is not valid"),
    ("csv-monitor", "use 'csv'"),
    ("core", "clashes with core-monitor's own"),
    ("x" * 41, "at most 40 characters"),
])
def test_a_bad_name_is_refused_and_nothing_is_written(work, capsys, name, says):
    assert cli.main(["new", name, "--dir", str(work / "plugin")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("monitors new: error: backend name")
    assert says in err
    assert os.listdir(work) == []


def test_an_existing_folder_is_refused_and_left_as_it_was(work, capsys):
    target = work / "example-monitor"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert cli.main(["new", "example", "--dir", str(target)]) == 2
    assert "already exists; nothing was written" in capsys.readouterr().err
    assert files_under(target) == {"notes.txt"}
    assert os.listdir(work) == ["example-monitor"]


def test_a_missing_parent_folder_is_refused(work):
    with pytest.raises(ScaffoldError, match=r"parent folder .* does not exist"):
        create_plugin("example", work / "missing" / "example-monitor")
    assert os.listdir(work) == []


def test_a_failure_while_writing_leaves_nothing_behind(work, monkeypatch):
    def render_with_a_clash(names):
        files = dict(original(names))
        files["README.md/impossible"] = "a file under a file"  # fails after README.md exists
        return files

    original = scaffold.render
    monkeypatch.setattr(scaffold, "render", render_with_a_clash)
    with pytest.raises(OSError):
        create_plugin("example", work / "example-monitor")
    assert os.listdir(work) == []


def test_derived_names():
    names = plugin_names("my_tracker2")
    assert (names.name, names.dist, names.package, names.cls) == (
        "my_tracker2", "my-tracker2-monitor", "my_tracker2_monitor", "MyTracker2Monitor")


def test_the_kit_without_pytest_says_which_extra_to_install(work):
    """In a fresh interpreter where ``pytest`` cannot be imported (a ``None`` entry in
    ``sys.modules`` blocks it), importing the kit names the fix."""
    code = ("import sys; sys.modules['pytest'] = None\n"
            "try:\n    import core_monitor.testing\n"
            "except ImportError as error:\n    print(error)\n")
    done = run_python(code, cwd=work)
    assert "pip install 'core-monitor[testing]'" in done.stdout


def test_the_generated_backend_has_every_member_of_the_backend_protocol(work, monkeypatch):
    """At run time (``nox -s typecheck`` also checks the generated module with
    ``mypy --strict``, which proves its ``_shape: type[Backend]`` line)."""
    from core_monitor.hookspecs import HOOKS, Backend, Capabilities, hookimpl_options

    create_plugin("shape", work / "shape-monitor")
    monkeypatch.syspath_prepend(str(work / "shape-monitor" / "src"))
    from shape_monitor import ShapeMonitor

    members = {n for n, v in vars(Backend).items()
               if not n.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))}
    members |= set(Backend.__annotations__)
    assert {"check_sdk", "capabilities", "monitor_write"} <= members
    assert not hasattr(ShapeMonitor, "check_options")  # optional: the types say enough here
    missing = sorted(m for m in members if not hasattr(ShapeMonitor, m))
    assert not missing, f"the generated backend lacks {missing} of hookspecs.Backend"
    # The one declaration: a Capabilities in the class body.
    assert isinstance(vars(ShapeMonitor)["capabilities"], Capabilities)
    assert ShapeMonitor.check_sdk() == [] and ShapeMonitor.capabilities.tested_sdk is None
    for hook in set(HOOKS) & members:
        assert hookimpl_options(ShapeMonitor, hook) is not None, hook
    assert Capabilities.of(ShapeMonitor).name == "shape"
