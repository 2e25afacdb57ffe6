"""The ``comet`` backend: the contract kit reading Comet's offline archives back, and what is
Comet's own (side by side with comet_ml's API, resume, the crash mark, quietness)."""

from __future__ import annotations

from importlib.metadata import entry_points

from comet_monitor import CometMonitor, read_config, read_media, read_rows
from core_monitor.testing import MonitorContract


class TestCometContract(MonitorContract):
    """Every check of the kit, offline (the default)."""

    backend_class = CometMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)
    read_media = staticmethod(read_media)


def test_the_entry_points_name_the_backend_and_its_reader():
    (backend,) = entry_points(group="experiment_monitors", name="comet")
    assert backend.load() is CometMonitor
    (found,) = entry_points(group="experiment_monitor_readers", name="comet")
    assert found.value == "comet_monitor.reader"
