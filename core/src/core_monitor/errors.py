"""The errors and warnings the core raises, all importable from ``core_monitor``."""

from __future__ import annotations


class ConfigError(ValueError):
    """The monitor's configuration is wrong: an unknown backend or option, a bad config file."""


class UnknownBackendError(ConfigError):
    """No installed distribution declares the selected backend name.

    Attributes:
        name: the name asked for.
        installed: the names that are installed.
        suggestion: the installed name closest to ``name`` (``difflib``), or ``None``.
    """

    def __init__(self, name: str, installed: list[str], suggestion: str | None) -> None:
        self.name = name
        self.installed = installed
        self.suggestion = suggestion
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        have = ", ".join(installed) if installed else "none"
        # Never tell a user with a typo to pip-install the misspelt name: anyone may own it.
        install = (
            f"select {suggestion!r}, or install another backend's plugin "
            "(`pip install <backend>-monitor`)"
            if suggestion
            else f"install its plugin, e.g. `pip install {name}-monitor`"
        )
        super().__init__(
            f"unknown backend {name!r}.{hint} Installed backends: {have}. "
            f"Fix: {install}; `monitors list` shows what is installed."
        )


class BackendLoadError(ImportError):
    """A selected backend's plugin module, or the SDK it needs, failed to import, or the SDK
    lacks what the plugin relies on (a plugin's capability check).

    Constructed as ``BackendLoadError(backend, distribution, version, target, error)``.

    Attributes:
        backend: the backend name, e.g. ``"trackio"``.
        distribution: the distribution that declares it, e.g. ``"trackio-monitor"``.
        version: that distribution's version.
        target: the entry point's value, ``"module:Class"``.
        missing: the module that could not be found (``ModuleNotFoundError.name``), or ``None``.
        cause: ``error``, the exception that made loading fail. For a missing package the core
            raises this error without chaining it (the message says all a user needs, so no
            traceback of the plugin's imports is printed); ``cause`` keeps it reachable.

    ``name`` and ``path`` keep their ``ImportError`` meaning (unset here); the backend name is
    ``backend``.
    """

    def __init__(
        self, backend: str, distribution: str, version: str, target: str, error: BaseException
    ) -> None:
        self.backend = backend
        self.distribution = distribution
        self.version = version
        self.target = target
        self.cause = error
        self.missing = getattr(error, "name", None) if isinstance(error, ImportError) else None
        if self.missing:
            fix = (
                f"the package {self.missing!r} is missing: `pip install {self.missing}` "
                f"(or reinstall the plugin with its dependencies: `pip install {distribution}`)"
            )
        else:
            fix = f"the plugin is broken; reinstall or upgrade it: `pip install -U {distribution}`"
        super().__init__(
            f"backend {backend!r} ({distribution} {version}, {target}) could not be loaded: "
            f"{type(error).__name__}: {error}. Fix: {fix}."
        )


class ConfigWarning(UserWarning):
    """The configuration names something the core skips instead of failing on: a selected
    backend disabled by ``EXPERIMENT_MONITORS_DISABLE`` (not started; the others run), or a
    name in that variable that no installed backend has. ``strict=True`` raises
    ``ConfigError`` instead."""


class SdkVersionWarning(UserWarning):
    """The installed SDK of a backend is outside the range its plugin was tested with
    (``tested_sdk`` on the backend class), yet has every internal the plugin checks for, so the
    backend runs. Issued once per backend class and process; the message names the SDK version
    and the tested range."""


class BackendWarning(RuntimeWarning):
    """A backend raised in a hook and the others carried on. Issued once per backend and monitor;
    every failure is counted in ``Monitor.failures``."""


class FlushTimeout(TimeoutError):
    """``Monitor.flush(timeout=...)`` ran out of time before every backend had written and
    flushed what was logged before the call.

    Attributes:
        pending: backend name -> hook calls (``log()`` batches, config updates) still queued
            or in progress for it when the time ran out; backends that finished are absent.
        timeout: the limit, in seconds.
    """

    def __init__(self, pending: dict[str, int], timeout: float | None) -> None:
        self.pending = pending
        self.timeout = timeout
        counts = ", ".join(f"{name!r}: {count}" for name, count in pending.items())
        super().__init__(
            f"flush(timeout={timeout}) ran out of time; calls not yet written per backend: "
            f"{counts}. They stay queued and are written as the backend catches up (close() "
            "waits for them)."
        )


class TagMismatchError(RuntimeError):
    """The ranks called ``Monitor.log(..., reduce=...)`` with different tags or operations.

    Raised on every rank by the same collective call, so no rank is left waiting in a later
    one. Nothing of that call is logged. Also importable as
    ``core_monitor.distributed.TagMismatchError``.

    Attributes:
        local: this rank's sorted tags.
    """

    def __init__(self, message: str, local: tuple[str, ...]) -> None:
        super().__init__(message)
        self.local = local


class RemoteTraceback(Exception):
    """The traceback text of an exception raised in a backend's writer process, set as the
    ``__cause__`` of the exception re-raised in the training process (the convention of
    ``concurrent.futures.ProcessPoolExecutor``), so the original traceback is printed."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class BackendError(Exception):
    """An exception a backend raised in its writer process whose class is not rebuilt in the
    training process (its module is not imported there, and ``strict`` is off: importing it
    could import the SDK). ``remote_type`` is the original class's qualified name; the
    message is the original message; ``__cause__`` holds the original traceback text."""

    def __init__(self, remote_type: str, message: str) -> None:
        super().__init__(message)
        self.remote_type = remote_type


class WriterDied(BackendError):
    """A backend's writer process ended without being asked to (a segfault in a native
    extension, the OOM killer, ``os._exit`` in a hook). What was logged after its last flush
    may not have been written; the other backends are not affected."""


class TrackerLost(Exception):
    """Raised by a backend's hook when its tracker lost what the backend had handed it and not
    yet stored: the tracker's own process died under the run (wandb's service, ``wandb-core``,
    exits at once on the SIGTERM a scheduler sends every process of a job).

    In a writer process (``Monitor(dispatch="process")``, the default) the writer starts the
    backend again at once, in the same process: a new instance continuing the run
    (``resume="allow"``), handed every call from the backend's journal cursor (its last
    confirmed flush) on that its storage lacks (``core_monitor.stored``), then the call that
    raised; at most ``core_monitor.dispatch.writer.TRACKER_RESTARTS`` times per writer, each
    reported with a ``BackendWarning``. This holds while the monitor closes too (a job-wide
    SIGTERM). The instance that raised is dropped without ``monitor_close``: its tracker is
    gone. In a worker thread or in-line it is a failure of the backend like any other: what its
    tracker did not confirm stays in the run's journal for ``monitors sync``.
    """
