"""Fixtures shared by the core's tests.

``monitor_factory`` (real monitors, closed at teardown) comes from ``core_monitor.testing``,
the pytest plugin the repository's ``conftest.py`` names.
"""

from __future__ import annotations

import pytest

from core_monitor.testing import MonitorFactory


@pytest.fixture
def make(monitor_factory: MonitorFactory) -> MonitorFactory:
    """``monitor_factory`` defaulting to the JSON-lines test backend, project ``p``, run ``r``."""
    monitor_factory.defaults.update(backends=["jsonl"], project="p", name="r")
    return monitor_factory
