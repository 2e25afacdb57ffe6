"""``MonitorFactory`` and the ``monitor_factory`` fixture: real monitors for tests, closed at
teardown."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest

from ..monitor import Monitor

_run_numbers = count()
#: Seconds each monitor's backends get to finish at teardown (``close(timeout=...)``): a test
#: that failed with a backend hung in a hook must not hold the rest of the session until the
#: test runner's own timeout. A closed monitor is left alone.
TEARDOWN_TIMEOUT = 60.0


class MonitorFactory:
    """Builds real ``Monitor`` objects with test defaults; ``close()`` closes every one.

    ``factory(backends=None, **kwargs)`` is ``Monitor(backends, **kwargs)`` with ``defaults``
    filled in where ``kwargs`` lacks them (``backends`` too, when not given); a run name not
    given is ``run-<n>``, unique in the process. ``factory.add(monitor)`` adopts a monitor built
    elsewhere (``Monitor.from_config``, a subprocess-free test of construction) for ``close()``.

    Attributes:
        defaults: the keyword arguments every monitor gets unless the call gives them; a test
            or fixture may update it.
    """

    def __init__(self, **defaults: Any) -> None:
        self.defaults = defaults
        self.made: list[Monitor] = []

    def __call__(self, backends: Any = None, **kwargs: Any) -> Monitor:
        kwargs = {**self.defaults, **kwargs}
        default = kwargs.pop("backends", None)
        kwargs.setdefault("name", f"run-{next(_run_numbers)}")
        return self.add(Monitor(default if backends is None else backends, **kwargs))

    def add(self, monitor: Monitor) -> Monitor:
        """Close ``monitor`` with the others; return it."""
        self.made.append(monitor)
        return monitor

    def close(self, timeout: float | None = TEARDOWN_TIMEOUT) -> None:
        """Close every monitor made or added, in that order (a closed one is left alone), each
        with ``timeout`` seconds for its backends (``Monitor.close``; ``None``: no limit)."""
        for monitor in self.made:
            monitor.close(timeout=timeout)


@pytest.fixture
def monitor_factory(tmp_path: Any) -> Iterator[MonitorFactory]:
    """A ``MonitorFactory`` with ``project="test"`` and ``log_dir=tmp_path / "logs"``; every
    monitor it made is closed at teardown (``TEARDOWN_TIMEOUT`` seconds each at most).
    Backends have no default: pass them, or set ``monitor_factory.defaults["backends"]``."""
    factory = MonitorFactory(project="test", log_dir=tmp_path / "logs")
    yield factory
    factory.close()
