"""The contract kit, run against the JSON-lines backend written for the tests.

This proves the kit itself: every kit test passes for a correct backend. (That the kit fails
for a wrong one is in test_contract_kit_catches.py.)
"""

from __future__ import annotations

import pytest
from jsonl_monitor import JsonlMonitor, read_rows

from core_monitor.testing import MonitorContract


class TestJsonlBackend(MonitorContract):
    @pytest.fixture
    def backend_class(self):
        return JsonlMonitor

    @pytest.fixture
    def read_rows(self):
        return read_rows
