"""``core_monitor.compat``: the helpers every plugin's ``_compat.py`` uses."""

from __future__ import annotations

import pytest

from core_monitor import BackendLoadError
from core_monitor.compat import require_sdk, sdk_changed, supported_range


def test_require_sdk_names_the_missing_module_and_the_plugin():
    with pytest.raises(ModuleNotFoundError) as caught:
        require_sdk("no_such_sdk_for_compat_test", "nosuch-monitor")
    assert caught.value.name == "no_such_sdk_for_compat_test"
    assert "nosuch-monitor needs it" in str(caught.value)


def test_require_sdk_accepts_an_installed_module_without_importing_it():
    require_sdk("pluggy", "core-monitor")  # no error


def test_supported_range_reads_the_installed_metadata_else_the_fallback():
    declared = supported_range("core-monitor", "pluggy", "pluggy>=0")
    assert declared.startswith("pluggy") and ">=1.3" in declared
    assert supported_range("core-monitor", "no-such-sdk", "no-such-sdk>=1") == "no-such-sdk>=1"
    assert supported_range("no-such-distribution-xyz", "x", "x>=1,<2") == "x>=1,<2"


def test_sdk_changed_names_backend_problems_and_the_supported_range():
    error = sdk_changed("fake", "no-such-distribution-xyz", "fake_monitor:FakeMonitor",
                        sdk="fake_sdk", sdk_version="9.0", problems=["no Run.log", "no Run.x"],
                        supported="fake_sdk>=1,<2")
    assert isinstance(error, BackendLoadError)
    assert (error.backend, error.distribution, error.version, error.target) == (
        "fake", "no-such-distribution-xyz", "unknown", "fake_monitor:FakeMonitor")
    text = str(error)
    assert "fake_sdk 9.0 is not supported (no Run.log; no Run.x)" in text
    assert "supports fake_sdk>=1,<2" in text and "pip install 'fake_sdk>=1,<2'" in text
