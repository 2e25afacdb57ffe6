"""Fixtures shared by the core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core_monitor import Monitor


@pytest.fixture
def monitors() -> Iterator[list[Monitor]]:
    """A list a test appends the monitors it opens to; every one is closed at teardown."""
    made: list[Monitor] = []
    yield made
    for monitor in made:
        monitor.close()
