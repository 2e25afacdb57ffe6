"""``dispatch="sync"``: every hook runs on the caller's thread before ``log()`` returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..resume import backend_state
from .backends import Backend, new_manager, start_backend
from .strategy import BackendSpec, Dispatch


class SyncDispatch(Dispatch):
    """Backends constructed and called in this process, on the caller's thread.

    Attributes:
        backends: the started backends, in start order.
    """

    mode = "sync"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.backends: list[Backend] = []
        #: (name, monitor_write function) per backend: ``write`` runs on every ``log()``.
        self._writers: list[tuple[str, Callable[..., Any]]] = []
        self._manager = new_manager()

    def start(self, specs: Sequence[BackendSpec], run: Any) -> None:
        for spec in specs:
            try:
                backend = start_backend(self._manager, spec.name, spec.cls, run, spec.options)
            except Exception as error:
                try:
                    self._start_failed(spec.name, error)
                except BaseException:
                    self.close(None)
                    raise
                continue
            self.add(backend, getattr(spec.cls, "media_kinds", ()))

    def add(self, backend: Backend, media_kinds: Any) -> None:
        """Take ``backend`` (started) into this dispatch."""
        self.media.add(backend.name, media_kinds, backend.hooks)
        self.backends.append(backend)
        self.hooks[backend.name] = frozenset(backend.hooks)
        self.facts[backend.name] = {"state": backend_state(backend.instance)}
        if "monitor_write" in backend.hooks:
            self._writers.append((backend.name, backend.hooks["monitor_write"]))

    def get(self, name: str) -> Backend:
        """The started backend called ``name``.

        Raises:
            KeyError: no started backend has that name.
        """
        for backend in self.backends:
            if backend.name == name:
                return backend
        raise KeyError(name)

    # Calls -------------------------------------------------------------------------------

    def send(self, hook: str, kwargs: dict[str, Any]) -> None:
        if hook == "monitor_write":
            batch = kwargs["events"]
            for name, write in self._writers:
                try:
                    write(events=batch)
                except Exception as error:
                    self.policy.failed(name, "monitor_write", error)
            self.policy.raise_pending()
        else:
            self.call(hook, **kwargs)

    def call(self, hook: str, **kwargs: Any) -> None:
        """Call ``hook(**kwargs)`` on every backend implementing it, in start order; then
        raise a strict failure, if any."""
        for backend in self.backends:
            function = backend.hooks.get(hook)
            if function is not None:
                try:
                    function(**kwargs)
                except Exception as error:
                    self.policy.failed(backend.name, hook, error)
        self.policy.raise_pending()

    def flush(self, lock: Any, timeout: float | None) -> None:
        with lock:
            self.call("monitor_flush")

    def before_fork(self) -> None:
        """``monitor_flush`` on every backend under the policy, never raising."""
        for backend in self.backends:
            function = backend.hooks.get("monitor_flush")
            if function is not None:
                try:
                    function()
                except Exception as error:
                    self.policy.failed(backend.name, "monitor_flush", error)

    def close(self, timeout: float | None, only: Sequence[str] | None = None, *,
              report: bool = True) -> None:
        """Flush every backend, then close every backend, both in reverse start order.

        Args:
            timeout: unused here (calls on the caller's thread cannot be given up on).
            only: the names of the backends to flush and close (``None``: all); with worker
                threads, those whose thread ended.

        Every backend is flushed and closed even when another one raises; a strict failure
        (also one kept from another thread) is raised at the end, unless ``report`` is false
        (the caller, which holds more backends, reports and raises).
        """
        self.policy.deliver(raising=False)
        backends = [b for b in self.backends if only is None or b.name in only]
        self.backends, self._writers = [], []  # closed (or given up on): never called again
        for hook in ("monitor_flush", "monitor_close"):
            for backend in reversed(backends):
                function = backend.hooks.get(hook)
                if function is None:
                    continue
                try:
                    function()
                except Exception as error:
                    self.policy.failed(backend.name, hook, error)
        if report:
            self.policy.raise_pending()
