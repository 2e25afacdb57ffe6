"""The contract kit: one test suite every backend runs (model: ``fsspec.tests.abstract``).

Needs pytest: ``pip install 'core-monitor[testing]'``. A plugin's tests subclass
``MonitorContract`` and say, in class attributes, which backend to test and how to read its
storage back::

    import my_monitor
    from core_monitor.testing import MonitorContract

    class TestMyBackend(MonitorContract):
        backend_class = my_monitor.MyMonitor   # the class your entry point names
        read_rows = staticmethod(my_monitor.read_rows)      # RunInfo -> [(tag: str, step: int,
                                                            # value: float)], from YOUR storage
        read_config = staticmethod(my_monitor.read_config)  # only with stores_config=True;
                                                            # else the config checks are skipped
        read_media = staticmethod(my_monitor.read_media)    # only with media_kinds declared
        read_crash = staticmethod(my_monitor.read_crash)    # the crash reason, or None
        backend_options = {"flush_secs": 1}                 # optional: the backend's options

Each may instead be a pytest fixture of the same name, for a value that depends on another
fixture (a reader bound to a test server's address). The kit builds a real ``Monitor`` around
the class with ``log_dir=tmp_path / "logs"`` and checks what ``read_rows`` returns after
``flush()``, or after ``close()`` for a backend whose class says
``rows_readable_after="close"``. What the kit reads of the class is its one declaration,
``capabilities = core_monitor.Capabilities(...)`` (``rows_readable_after``, ``value_dtype``,
``stores_config``, ``media_kinds``, ``supports_resume``), the same the core reads; it also
checks that the core can read the types of the options (the annotations of ``__init__``) and
refuses an ill-typed one. Every failure says what was expected and what was stored,
at which tag and step, and which hook or capability to look at. ``monitors new NAME`` writes a
plugin whose tests run this kit.

The test class needs no pytest plugin. The ``monitor_factory`` fixture (a ``MonitorFactory``:
real monitors, closed at teardown) does: name this module in your ``conftest.py``,
``pytest_plugins = ["core_monitor.testing"]``. Installing ``core-monitor`` does not register
it (no ``pytest11`` entry point), so the test runs of other projects in the same environment
stay as they were, as with pytest's own ``pytester``.

What the core guarantees a backend (so a backend need not be thread-safe): its hooks are never
called concurrently (one writer process per backend by default, one worker thread per backend
with ``dispatch="thread"``, a lock in sync mode), they may run on a thread other than the
constructor's, batches arrive in the order logged, and no hook is ever called from a forked
child of the process that built it. By default the backend is constructed in a writer process
(``core_monitor.dispatch.writer``), so it must be importable by module path there, and its
options and the ``RunInfo`` must pickle: ``test_the_backend_runs_in_a_writer_process`` checks
that. The other checks run the backend on a worker thread (``dispatch = "thread"``, the
default of the kit: the SDK is imported once per test process instead of once per monitor);
a test class may set ``dispatch = "process"`` to run them all in writer processes.

Modules: ``contract`` (``MonitorContract``: fixtures and assertions), ``_steps`` (the step and
value checks), ``_runs`` (flush, close, runs, ranks, config, imports), ``_media`` (images,
histograms, text), ``_crash`` (how a run ended: ``read_crash`` after SIGKILL, SIGTERM and an
exception in ``with``), ``_messages`` (what a failure says), ``factory`` (``MonitorFactory``).
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
