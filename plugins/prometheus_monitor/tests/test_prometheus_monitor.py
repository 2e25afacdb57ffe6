"""The core-monitor contract kit against the ``prometheus`` backend, plus this backend's own tests.

Run with ``pytest`` once the package is installed with its test extra:
``pip install '.[test]'`` (the kit comes with ``core-monitor[testing]``).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest
from core_monitor import ConfigError, Monitor
from core_monitor.testing import MonitorContract

from prometheus_monitor import PrometheusMonitor, read_config, read_rows


class TestPrometheusMonitorContract(MonitorContract):
    """Every check of the kit: steps, values, flush, close, config, ranks."""

    backend_class = PrometheusMonitor
    read_rows = staticmethod(read_rows)
    read_config = staticmethod(read_config)


def test_the_entry_point_names_the_backend_class() -> None:
    (found,) = entry_points(group="experiment_monitors", name="prometheus")
    assert found.load() is PrometheusMonitor


def test_fsync_must_be_a_bool(tmp_path: Path) -> None:
    """The core checks the option's type from the annotation of ``__init__``."""
    with pytest.raises(ConfigError, match="fsync='yes'.*True or False"):
        Monitor(["prometheus"], project="p", log_dir=tmp_path, prometheus={"fsync": "yes"})


def test_buffering_zero_is_refused_by_check_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="buffering=0"):
        Monitor(["prometheus"], project="p", log_dir=tmp_path, prometheus={"buffering": 0})


def test_fsync_writes_are_read_back(tmp_path: Path) -> None:
    with Monitor(["prometheus"], project="p", name="r", log_dir=tmp_path,
                 prometheus={"fsync": True}) as monitor:
        monitor.log({"loss": 0.5}, step=3)
    assert read_rows(monitor.run) == [("loss", 3, 0.5)]
