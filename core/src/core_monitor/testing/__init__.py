"""The contract kit: one test suite every backend runs (model: ``fsspec.tests.abstract``).

Needs pytest: ``pip install 'core-monitor[testing]'``. A plugin's tests subclass
``MonitorContract`` and supply two fixtures, and a third when the backend stores the config::

    from core_monitor.testing import MonitorContract

    class TestMyBackend(MonitorContract):
        @pytest.fixture
        def backend_class(self):
            return MyMonitor            # the class your entry point names

        @pytest.fixture
        def read_rows(self):
            return my_monitor.read_rows  # RunInfo -> [(tag: str, step: int, value: float)],
                                         # read from YOUR storage, in storage order

        @pytest.fixture
        def read_config(self):          # only with stores_config = True; else the config
            return my_monitor.read_config  # checks are skipped. RunInfo -> dict

        @pytest.fixture
        def read_media(self):           # only with media_kinds declared; else the media
            return my_monitor.read_media   # checks are skipped. RunInfo -> [(tag, step, value)]

Optionally override ``backend_options`` (a dict of the backend's keyword options). The kit
builds a real ``Monitor`` around the class with ``log_dir=tmp_path / "logs"`` and checks what
``read_rows`` returns after ``flush()``, or after ``close()`` for a backend whose class says
``rows_readable_after = "close"``. The capability attributes the kit reads are declared once, in
``core_monitor.hookspecs.Capabilities`` (``rows_readable_after``, ``value_dtype``,
``stores_config``, ``media_kinds``). Every failure says what was expected and what was stored,
at which tag and step, and which hook or capability to look at. ``monitors new NAME`` writes a
plugin whose tests run this kit. Installing ``core-monitor`` registers this module as a pytest
plugin (entry point ``pytest11``), so its fixtures need no ``conftest.py`` import. Its
``monitor_factory`` fixture (a ``MonitorFactory``: real monitors, closed at teardown) serves any
test that builds monitors.

What the core guarantees a backend (so a backend need not be thread-safe): its hooks are never
called concurrently (one worker thread per backend in background dispatch, a lock in sync
mode), they may run on a thread other than the constructor's, batches arrive in the order
logged, and no hook is ever called from a forked child of the process that built it.

Modules: ``contract`` (``MonitorContract``: fixtures and assertions), ``_steps`` (the step and
value checks), ``_runs`` (flush, close, runs, ranks, config, imports), ``_media`` (images,
histograms, text), ``_messages`` (what a failure says), ``factory`` (``MonitorFactory``).
"""

from __future__ import annotations

try:
    import pytest  # noqa: F401  (the kit is pytest fixtures and test classes)
except ModuleNotFoundError as error:  # pragma: no cover - exercised in a venv without pytest
    raise ImportError(
        "core_monitor.testing (the backend contract kit) needs pytest, which is not installed; "
        "install the core with its testing extra: pip install 'core-monitor[testing]'"
    ) from error

from .contract import MonitorContract, Rows
from .factory import MonitorFactory, monitor_factory

__all__ = ["MonitorContract", "MonitorFactory", "Rows", "monitor_factory"]
