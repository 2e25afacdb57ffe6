"""Discovery: installed backends come from entry-point metadata; only the selected one is imported.

Uses the test distributions in ``tests/fixtures`` (installed in the test environment):
``jsonl-monitor`` (``jsonl``, ``twin``), ``twin-monitor`` (``twin``: a conflict) and
``broken-monitor`` (``broken``: its module raises ``ModuleNotFoundError``).
"""

from __future__ import annotations

import json
from importlib import metadata

import pytest
from interpreter import imported, modules_after, run_python
from jsonl_monitor import read_rows

from core_monitor import (
    BackendLoadError,
    ConfigError,
    ConfigWarning,
    Monitor,
    UnknownBackendError,
)
from core_monitor.discovery import (
    DISABLE_ENV,
    GROUP,
    check_backend,
    find_backend,
    installed_backends,
    load_backend,
)

PLUGIN_MODULES = ("jsonl_monitor", "twin_monitor", "broken_monitor")


# Listing -----------------------------------------------------------------------------------


def test_installed_backends_lists_the_test_distributions_with_metadata_versions():
    found = installed_backends()
    assert {"jsonl", "twin", "broken"} <= set(found)
    assert list(found) == sorted(found)

    (jsonl,) = found["jsonl"]
    assert jsonl.distribution == "jsonl-monitor"
    assert jsonl.version == metadata.version("jsonl-monitor") == "1.0.0"
    assert jsonl.target == "jsonl_monitor:JsonlMonitor"
    assert jsonl.entry_point.group == GROUP

    (broken,) = found["broken"]
    assert broken.distribution == "broken-monitor"
    assert broken.version == metadata.version("broken-monitor") == "0.0.1"
    assert broken.target == "broken_monitor:BrokenMonitor"


def test_a_name_claimed_by_two_distributions_lists_both():
    twins = installed_backends()["twin"]
    assert sorted((i.distribution, i.version) for i in twins) == [
        ("jsonl-monitor", metadata.version("jsonl-monitor")),
        ("twin-monitor", metadata.version("twin-monitor")),
    ]


def test_listing_backends_imports_no_plugin(tmp_path):
    modules = modules_after(
        """
        from core_monitor.discovery import installed_backends
        assert "broken" in installed_backends()
        """,
        tmp_path,
    )
    for package in PLUGIN_MODULES:
        assert not imported(modules, package), f"listing imported {package}"


# Conflicts ---------------------------------------------------------------------------------


def test_selecting_a_conflicting_name_with_find_backend_names_both_distributions():
    with pytest.raises(ConfigError) as info:
        find_backend("twin")
    assert not isinstance(info.value, UnknownBackendError)
    assert "jsonl-monitor" in str(info.value)
    assert "twin-monitor" in str(info.value)


def test_selecting_a_conflicting_name_in_monitor_is_an_error_and_jsonl_still_works(
    tmp_path, monitor_factory
):
    with pytest.raises(ConfigError, match="twin") as info:
        Monitor(["twin"], project="conflict", log_dir=tmp_path)
    assert "jsonl-monitor" in str(info.value)
    assert "twin-monitor" in str(info.value)

    monitor = Monitor(["jsonl"], project="conflict", name="after", log_dir=tmp_path)
    monitor_factory.add(monitor)
    monitor.log({"loss": 0.5}, step=7)
    monitor.close()
    assert read_rows(monitor.run) == [("loss", 7, 0.5)]


def test_conflict_with_a_healthy_name_selects_nothing(tmp_path):
    """The conflict is found before any backend starts: no jsonl file is written."""
    with pytest.raises(ConfigError, match="twin-monitor"):
        Monitor(["jsonl", "twin"], project="conflict", name="both", log_dir=tmp_path)
    assert not (tmp_path / "conflict" / "both.jsonl").exists()


# Unknown names -------------------------------------------------------------------------------


def test_misspelt_name_suggests_the_installed_one_and_lists_installed_names():
    with pytest.raises(UnknownBackendError) as info:
        Monitor(["jsnol"], project="typo")
    error = info.value
    message = str(error)
    assert isinstance(error, ConfigError)
    assert error.name == "jsnol"
    assert "Did you mean 'jsonl'?" in message
    for name in ("jsonl", "broken", "twin"):
        assert name in error.installed
        assert name in message.split("Installed backends:")[1]
    assert "pip install" in message


def test_unknown_name_with_no_close_match_has_no_suggestion():
    with pytest.raises(UnknownBackendError) as info:
        find_backend("zzzzzzzz")
    assert "Did you mean" not in str(info.value)
    assert "jsonl" in str(info.value)
    assert "pip install zzzzzzzz-monitor" in str(info.value)


def _trackio_monitor_installed() -> bool:
    try:
        metadata.distribution("trackio-monitor")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _trackio_monitor_installed(), reason="trackio-monitor is not installed")
def test_trakio_suggests_trackio():
    """The misspelling users made: one letter dropped from an installed name."""
    with pytest.raises(UnknownBackendError) as info:
        Monitor(["trakio"], project="typo")
    assert "Did you mean 'trackio'?" in str(info.value)
    assert "trackio" in info.value.installed


# Disabling ---------------------------------------------------------------------------------


def test_disabled_backend_is_refused_by_find_backend_and_skipped_by_monitor(
    monkeypatch, tmp_path, monitor_factory
):
    """``find_backend`` (one name, as ``strict=True`` selects) refuses a disabled name;
    ``Monitor`` skips it with a warning (tests/core/test_selection.py has the rest)."""
    monkeypatch.setenv(DISABLE_ENV, "jsonl")
    with pytest.raises(ConfigError, match="disabled") as info:
        find_backend("jsonl")
    assert DISABLE_ENV in str(info.value)
    with pytest.warns(ConfigWarning, match="'jsonl' is disabled"):
        monitor = monitor_factory(["jsonl"], project="off", name="r", log_dir=tmp_path)
    assert monitor.backends == []
    monitor.log({"x": 1.0}, step=0)
    monitor.close()
    assert not (tmp_path / "off").exists()


def test_disabled_backend_is_still_suggested(monkeypatch):
    """Selecting a disabled backend is not an error, so a typo of one still gets its name."""
    monkeypatch.setenv(DISABLE_ENV, "jsonl")
    with pytest.raises(UnknownBackendError) as info:
        find_backend("jsnol")
    assert "jsonl" in info.value.installed
    assert "Did you mean 'jsonl'" in str(info.value)


def test_disabling_other_backends_leaves_the_selected_one_working(
    monkeypatch, tmp_path, monitor_factory
):
    monkeypatch.setenv(DISABLE_ENV, " broken , twin ")
    monitor = Monitor(["jsonl"], project="on", name="r", log_dir=tmp_path)
    monitor_factory.add(monitor)
    monitor.log({"acc": 1.0}, step=3)
    monitor.close()
    assert read_rows(monitor.run) == [("acc", 3, 1.0)]
    with pytest.raises(ConfigError, match="disabled"):
        find_backend("broken")


def test_monitors_list_shows_a_disabled_backend(tmp_path):
    proc = run_python("import sys\nfrom core_monitor import cli\nsys.exit(cli.main())",
                      "list", "--json", cwd=tmp_path, env={DISABLE_ENV: "jsonl"}, timeout=120)
    rows = {(r["name"], r["distribution"]): r for r in json.loads(proc.stdout)}
    assert rows["jsonl", "jsonl-monitor"]["status"].startswith("disabled")
    assert not rows["broken", "broken-monitor"]["status"].startswith("disabled")


# A broken plugin -----------------------------------------------------------------------------


def test_broken_plugin_raises_backend_load_error_naming_distribution_version_and_package():
    with pytest.raises(BackendLoadError) as info:
        Monitor(["broken"], project="c7")
    error = info.value
    message = str(error)
    assert isinstance(error, ImportError)
    assert error.distribution == "broken-monitor"
    assert error.version == "0.0.1"
    assert error.missing == "experiment_monitors_missing_sdk"
    assert "broken-monitor" in message
    assert "0.0.1" in message
    assert "experiment_monitors_missing_sdk" in message
    assert "pip install" in message
    assert isinstance(error.cause, ModuleNotFoundError)  # kept, but not chained:
    assert error.__cause__ is None and error.__suppress_context__


def test_a_missing_sdk_prints_a_short_traceback_without_the_plugins_imports(tmp_path):
    """The expected case, an SDK not installed: the message says everything, so the traceback
    a user sees is the one error, with no chained traceback of the plugin's own imports."""
    script = "from core_monitor import Monitor\nMonitor(['broken'], project='c7')\n"
    proc = run_python(script, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert "direct cause" not in proc.stderr and "During handling" not in proc.stderr
    assert "broken_monitor/__init__.py" not in proc.stderr
    assert lines[-1].startswith("core_monitor.errors.BackendLoadError: backend 'broken'")
    assert "pip install experiment_monitors_missing_sdk" in lines[-1]
    assert len(lines) <= 20, proc.stderr


def test_check_backend_runs_check_sdk_and_names_the_plugin():
    (info,) = installed_backends()["stale"]
    assert load_backend(info).__name__ == "StaleMonitor"  # loading alone succeeds
    with pytest.raises(BackendLoadError) as raised:
        check_backend(info)
    error = raised.value
    assert (error.backend, error.distribution, error.version) == ("stale", "stale-monitor", "0.0.1")
    assert "is not supported (no Run.log_rows); this plugin supports fake_sdk>=1,<2" in str(error)
    assert isinstance(error.cause, RuntimeError)
    (jsonl,) = installed_backends()["jsonl"]
    assert check_backend(jsonl).__name__ == "JsonlMonitor"  # no check_sdk: loading is the check


def test_backend_load_error_backend_is_the_backend_name():
    """``BackendLoadError.backend`` is the backend name; ``ImportError.name`` is left alone."""
    with pytest.raises(BackendLoadError) as info:
        Monitor(["broken"], project="c7")
    assert info.value.backend == "broken"
    assert info.value.name is None


def test_other_backends_still_log_after_a_plugin_failed_to_load(tmp_path, monitor_factory):
    with pytest.raises(BackendLoadError):
        Monitor(["broken"], project="c7", log_dir=tmp_path)
    with pytest.raises(BackendLoadError):  # nothing half-started when one selected plugin breaks
        Monitor(["jsonl", "broken"], project="c7", name="mixed", log_dir=tmp_path)
    assert not (tmp_path / "c7" / "mixed.jsonl").exists()

    monitor = Monitor(["jsonl"], project="c7", name="healthy", log_dir=tmp_path)
    monitor_factory.add(monitor)
    monitor.log({"loss": 0.25}, step=0)
    monitor.log({"loss": 0.125})
    monitor.close()
    assert read_rows(monitor.run) == [("loss", 0, 0.25), ("loss", 1, 0.125)]


def test_selecting_jsonl_imports_no_other_plugin(tmp_path):
    """Only the selected plugin is imported, even when a conflicting name was tried first."""
    modules = modules_after(
        f"""
        from core_monitor import ConfigError, Monitor
        try:
            Monitor(["twin"], project="p", log_dir={str(tmp_path)!r})
        except ConfigError:
            pass
        else:
            raise SystemExit("selecting 'twin' did not fail")
        with Monitor(["jsonl"], project="p", name="r", log_dir={str(tmp_path)!r}) as m:
            m.log({{"x": 1.0}}, step=0)
        """,
        tmp_path,
    )
    assert imported(modules, "jsonl_monitor")  # the check sees plugin imports at all
    assert not imported(modules, "broken_monitor")
    assert not imported(modules, "twin_monitor")
    rows = [json.loads(line) for line in (tmp_path / "p" / "r.jsonl").read_text().splitlines()]
    assert [(r["tag"], r["step"]) for r in rows if "tag" in r] == [("x", 0)]


def test_a_misspelt_keyword_is_reported_before_any_plugin_is_imported(tmp_path):
    modules = modules_after(
        """
        from core_monitor import ConfigError, Monitor
        try:
            Monitor(["jsonl"], project="p", logdir="runs")
        except ConfigError as error:
            assert "did you mean 'log_dir'" in str(error), error
        else:
            raise AssertionError("no ConfigError")
        """,
        tmp_path,
    )
    assert not imported(modules, "jsonl_monitor")
