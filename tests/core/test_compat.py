"""``core_monitor.sdk``: the SDK checks the core runs for a plugin (``ensure_sdk``), and the
errors and warnings it builds from what the plugin's ``check_sdk()`` reports."""

from __future__ import annotations

import warnings
from importlib import metadata

import pytest

from core_monitor import BackendLoadError, Capabilities, SdkVersionWarning
from core_monitor.discovery import installed_backends
from core_monitor.sdk import Plugin, ensure_sdk, require_sdk, sdk_error

PLUGGY = metadata.version("pluggy")


def backend_class(tested: str | None, problems: list[str] | Exception) -> type:
    """A backend class (new each call, so each is checked afresh) whose SDK is pluggy."""

    class PluggyMonitor:
        name = "pluggy-test"
        calls = 0

        @classmethod
        def check_sdk(cls) -> list[str]:
            cls.calls += 1
            if isinstance(problems, Exception):
                raise problems
            return problems

    if tested is not None:
        PluggyMonitor.capabilities = Capabilities(tested_sdk=tested)  # type: ignore[attr-defined]
    return PluggyMonitor


def test_require_sdk_is_refused_naming_the_declaration_that_replaces_it():
    with pytest.raises(TypeError, match=r"require_sdk\('pluggy', 'core-monitor'\) is removed: "
                                        r"delete the call and declare .*Capabilities\(tested_sdk="):
        require_sdk("pluggy", "core-monitor")


def test_require_sdk_at_its_old_import_path_is_refused_and_no_longer_exported():
    """A third-party plugin written before this release imports it from ``compat`` and calls it
    at import time: the import works (for one release), the call names the replacement."""
    import core_monitor.compat
    import core_monitor.sdk
    from core_monitor.compat import require_sdk as old

    assert "require_sdk" not in core_monitor.sdk.__all__ + core_monitor.compat.__all__
    with pytest.raises(TypeError, match=r"is removed: delete the call and declare the SDK on the "
                                        r"backend class, capabilities = Capabilities\(tested_sdk="):
        old("mysdk", "mysdk")


def test_ensure_sdk_from_a_plugin_is_refused_naming_what_replaces_it():
    with pytest.raises(TypeError, match=r"ensure_sdk\('stale_monitor'\) takes the backend class, "
                                        r"and a plugin no longer calls it: delete the call"):
        ensure_sdk("stale_monitor")  # type: ignore[arg-type]


def test_reported_problems_become_a_backend_load_error_naming_the_tested_range():
    cls = backend_class("pluggy>=1,<99", ["no Run.log", "no Run.x"])
    with pytest.raises(BackendLoadError) as caught:
        ensure_sdk(cls)
    error = caught.value
    assert (error.backend, error.distribution, error.version) == ("pluggy-test", "unknown",
                                                                   "unknown")
    assert error.target == f"{cls.__module__}:{cls.__qualname__}"
    text = str(error)
    assert f"pluggy {PLUGGY} is not supported (no Run.log; no Run.x)" in text
    assert "this plugin supports pluggy>=1,<99: `pip install 'pluggy>=1,<99'`" in text
    assert isinstance(error.cause, RuntimeError)


def test_the_check_runs_once_per_class_and_its_error_is_raised_again():
    cls = backend_class("pluggy>=1", ["no Run.log"])
    with pytest.raises(BackendLoadError) as first:
        ensure_sdk(cls)
    with pytest.raises(BackendLoadError) as second:
        ensure_sdk(cls)
    assert second.value is first.value and cls.calls == 1
    fine = backend_class("pluggy>=1", [])
    assert ensure_sdk(fine) is fine and ensure_sdk(fine) is fine and fine.calls == 1


def test_an_sdk_outside_the_tested_range_warns_once_naming_version_and_range():
    cls = backend_class("pluggy<1.0", [])
    with pytest.warns(SdkVersionWarning) as caught:
        ensure_sdk(cls)
    (warning,) = caught
    assert f"pluggy {PLUGGY} is outside the range unknown unknown was tested with (pluggy<1.0)" \
        in str(warning.message)
    assert "`pip install 'pluggy<1.0'`" in str(warning.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ensure_sdk(cls)  # once per class: no second warning


def test_an_sdk_inside_the_tested_range_or_no_range_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ensure_sdk(backend_class(f"pluggy>={PLUGGY}", []))
        ensure_sdk(backend_class(None, []))
        ensure_sdk(backend_class(None, None))  # an old-style check that returns None


def test_problems_win_over_the_range_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BackendLoadError, match="not supported"):
            ensure_sdk(backend_class("pluggy<1.0", ["no Run.log"]))


def test_a_check_that_raises_is_wrapped_naming_the_plugin_and_kept_as_the_cause():
    cls = backend_class("pluggy>=1", ImportError("No module named 'pluggy.sub'"))
    with pytest.raises(BackendLoadError) as caught:
        ensure_sdk(cls)
    assert isinstance(caught.value.cause, ImportError)
    assert caught.value.__cause__ is caught.value.cause
    assert "ImportError: No module named 'pluggy.sub'" in str(caught.value)
    own = BackendLoadError("x", "x-monitor", "1", "x:X", RuntimeError("own"))
    with pytest.raises(BackendLoadError) as kept:
        ensure_sdk(backend_class(None, own))
    assert kept.value is own


def test_sdk_error_without_a_tested_range_names_the_problems():
    error = sdk_error(backend_class(None, []), ["no Run.log"])
    assert "the SDK lacks what unknown uses (no Run.log)" in str(error)


def test_an_installed_plugin_is_known_by_its_entry_point():
    (info,) = installed_backends()["stale"]
    cls = info.entry_point.load()
    assert Plugin.of(cls) == info  # one record per plugin: the one discovery read
    assert info.who == ("stale", "stale-monitor", "0.0.1", "stale_monitor:StaleMonitor")
    with pytest.raises(BackendLoadError, match=r"stale-monitor 0\.0\.1"):
        ensure_sdk(cls)


def test_the_old_module_name_still_imports_for_one_release():
    import core_monitor.compat
    import core_monitor.sdk

    assert core_monitor.compat.ensure_sdk is core_monitor.sdk.ensure_sdk
    assert core_monitor.compat.Plugin is core_monitor.plugins.Plugin
