"""One ``Monitor`` per framework run, started lazily; a run after a closed one is named apart."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from ..monitor import Monitor
from ..run import default_run_name


class LazyRun:
    """Creates the ``Monitor`` at first use; after ``close()``, the next use starts a NEW run.

    A framework may run several times with one logger (Lightning's ``fit`` then ``test``, a
    second ``Trainer.train()``); backends cannot reopen a finished run. The second run is
    named ``<name>-2`` (then ``-3``, ...) and a ``UserWarning`` says so, so it is never a
    silent second run under the same name.

    Args:
        backends: as ``Monitor``'s ``backends``.
        project: the project.
        name: the run name; ``None``: made up once, here (``core_monitor.run.default_run_name``).
        source: the integration's name, for the warning.
        **monitor_kwargs: other ``Monitor`` keyword arguments.
    """

    def __init__(self, backends: Sequence[str | type] | str, *, project: str, name: str | None,
                 source: str, **monitor_kwargs: Any) -> None:
        self.backends = backends
        self.project = project
        self.base_name = name or default_run_name()
        self.source = source
        self.monitor_kwargs = monitor_kwargs
        self.count = 0
        self._monitor: Monitor | None = None

    @property
    def name(self) -> str:
        """The current (or next) run's name."""
        return self.base_name if self.count <= 1 else f"{self.base_name}-{self.count}"

    @property
    def last(self) -> Monitor | None:
        """The latest ``Monitor``, open or closed, or ``None``."""
        return self._monitor

    @property
    def started(self) -> Monitor | None:
        """The open ``Monitor``, or ``None``."""
        monitor = self._monitor
        return monitor if monitor is not None and not monitor.closed else None

    def monitor(self) -> Monitor:
        """The open ``Monitor``, created now if there is none (see the class docstring)."""
        if self._monitor is not None and not self._monitor.closed:
            return self._monitor
        self.count += 1
        if self.count > 1:
            warnings.warn(
                f"{self.source}: run {self.base_name!r} was closed; logging again starts a new "
                f"run {self.name!r} in project {self.project!r} (backends cannot reopen a "
                "finished run)", UserWarning, stacklevel=3,
            )
        self._monitor = Monitor(self.backends, project=self.project, name=self.name,
                                **self.monitor_kwargs)
        return self._monitor

    def close(self) -> None:
        """Close the open run, if any."""
        if self._monitor is not None:
            self._monitor.close()
