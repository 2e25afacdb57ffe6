"""``Monitor``: the one object training code logs through; it fans each batch out to backends."""

from __future__ import annotations

import atexit
import dataclasses
import difflib
import inspect
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pluggy

from . import hookspecs
from .config import load_monitor_config, sanitize_config
from .discovery import BackendInfo, find_backend, load_backend
from .distributed import Reducer
from .errors import BackendWarning, ConfigError
from .events import MAX_STEP, Event, OneRow, check_step, flatten, to_float
from .run import RunInfo, default_run_name, detect_rank

logger = logging.getLogger("core_monitor")

_HOOKS = ("monitor_write", "monitor_flush", "monitor_close", "monitor_config")
_KEYWORDS = ("project", "name", "config", "log_dir", "strict", "rank_zero_only")


class Monitor:
    """Log scalars once; every selected backend stores them at the caller's step.

    Args:
        backends: backend names as installed (``monitors list``), e.g. ``["trackio",
            "tensorboard"]``, or backend classes (a class's name is its ``name`` attribute, else
            its ``__name__``). One name may be given as a plain ``str``. Must not be empty.
        project: project name (wandb/Trackio "project"; TensorBoard's first folder level).
        name: run name; default ``YYYYmmdd-HHMMSS-host``, the same for every backend.
        config: hyperparameters; stored flat and JSON-safe (``config.sanitize_config``).
        log_dir: folder local backends write under (``str`` or ``Path``); ``None`` lets each
            SDK use its own default. When given it wins over ``TRACKIO_DIR``/``WANDB_DIR``.
        strict: re-raise a backend's exception (after every other backend got the call)
            instead of warning once and counting it in ``failures``.
        rank_zero_only: only rank 0 constructs backends; other ranks validate what they log
            and write nothing (they import no SDK). ``False`` writes from every rank.
        **backend_options: one mapping per backend name, its keyword options, e.g.
            ``wandb={"mode": "offline"}``.

    Raises:
        ConfigError: no backend selected; ``project``, ``name``, ``strict`` or
            ``rank_zero_only`` of the wrong type; a misspelt keyword (``logdir``: "did you mean
            'log_dir'?"); options for an unselected backend; or an option the backend does not
            accept (the message names backend, option and accepted ones).
        UnknownBackendError: a name that no installed distribution declares.
        BackendLoadError: a selected plugin or its SDK fails to import.
    """

    def __init__(
        self,
        backends: Sequence[str | type] | str,
        *,
        project: str,
        name: str | None = None,
        config: Any = None,
        log_dir: str | os.PathLike[str] | None = None,
        strict: bool = False,
        rank_zero_only: bool = True,
        **backend_options: Mapping[str, Any],
    ) -> None:
        if isinstance(backends, (str, type)):
            backends = [backends]
        if not backends:
            raise ConfigError(
                "no backend selected: pass at least one name, e.g. Monitor(['trackio'], ...); "
                "`monitors list` shows the installed ones"
            )
        if not isinstance(project, str) or not project:
            raise ConfigError(f"project={project!r} must be a non-empty str")
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigError(f"name={name!r} must be a non-empty str, or None for a made-up one")
        for flag, value in (("strict", strict), ("rank_zero_only", rank_zero_only)):
            if not isinstance(value, bool):
                raise ConfigError(f"{flag}={value!r} must be True or False (a bool, not "
                                  f"{type(value).__name__})")
        rank, world_size = detect_rank()
        self.run = RunInfo(
            project=project,
            name=name or default_run_name(),
            config=sanitize_config(config),
            log_dir=Path(log_dir) if log_dir is not None else None,
            rank=rank,
            world_size=world_size,
        )
        self.strict = strict
        #: Failures per backend name: how many hook calls raised.
        self.failures: dict[str, int] = {}
        self._next_step = 0
        self._closed = False
        self._names: list[str] = []
        self._config_warned: set[str] = set()
        self._calls: dict[str, list[tuple[str, Callable[..., Any]]]] = {h: [] for h in _HOOKS}
        self._writers = self._calls["monitor_write"]  # log()'s hot path reads it directly
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)

        found = _find(backends)  # every name and keyword is checked before any plugin import
        unused = set(backend_options) - set(found)
        for key in sorted(unused):
            close = difflib.get_close_matches(key, _KEYWORDS, n=1, cutoff=0.7)
            if close:
                raise ConfigError(
                    f"Monitor() got an unknown keyword argument {key!r}; did you mean "
                    f"{close[0]!r}? (other keywords are per-backend options, named after "
                    "a selected backend)"
                )
        if unused:
            raise ConfigError(
                f"options given for {sorted(unused)}, which are not selected "
                f"(selected: {list(found)}); select them or drop their options"
            )
        classes = {k: v if isinstance(v, type) else load_backend(v) for k, v in found.items()}
        for backend_name, cls in classes.items():
            _check_options(backend_name, cls, backend_options.get(backend_name) or {})
        if rank == 0 or not rank_zero_only:
            for backend_name, cls in classes.items():
                self._start(backend_name, cls, dict(backend_options.get(backend_name) or {}))
        _register(self)

    @staticmethod
    def backend_name(cls: type) -> str:
        """The name a backend class passed directly is known by: ``cls.name`` or ``__name__``."""
        name = getattr(cls, "name", None)
        return name if isinstance(name, str) and name else cls.__name__

    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str], **overrides: Any
    ) -> Monitor:
        """Build a monitor from a mapping or a ``.toml``/``.json`` file.

        See ``core_monitor.config.load_monitor_config`` for the format. ``overrides`` are
        ``Monitor`` keyword arguments that win over the file (e.g. ``name=...``).

        Raises:
            ConfigError: as ``load_monitor_config`` and ``Monitor`` do; when ``source`` is a
                file, the message starts with its path (e.g. an unknown option in a section).
        """
        kwargs = load_monitor_config(source)
        kwargs.update(overrides)
        try:
            return cls(kwargs.pop("backends"), **kwargs)
        except ConfigError as error:
            if not isinstance(source, Mapping) and error.args:
                # Same exception (and class, e.g. UnknownBackendError), pointing at the file.
                error.args = (f"{os.fspath(source)}: {error.args[0]}", *error.args[1:])
            raise

    @property
    def backends(self) -> list[str]:
        """Names of the backends this process writes to, in start order (empty off rank 0)."""
        return list(self._names)

    # Logging ---------------------------------------------------------------------------------

    def log(
        self, metrics: Mapping[str, Any], step: int | None = None, *, reduce: str | None = None
    ) -> int:
        """Log scalars at one step, as ``wandb.log``/``accelerate.Accelerator.log`` do.

        Args:
            metrics: ``{tag: value}``; nested mappings are flattened with ``/``. Values are
                numbers or anything with ``.item()`` (numpy/torch scalars, 0-d arrays).
            step: ``int`` with ``0 <= step < 2**63``, stored exactly, even when lower than an
                earlier step; ``None`` for the largest step seen so far + 1 (0 at first).
            reduce: ``None``, or ``"mean"``, ``"sum"``, ``"max"``, ``"min"`` to reduce each value
                across ranks first. A collective: every rank calls it with the same tags; one
                ``torch.distributed.all_reduce`` per call (``core_monitor.distributed``).
                Without a process group and a world size of 1 the values stay as they are.

        Returns:
            The step the scalars were stored at.

        Raises:
            TypeError: ``metrics`` is not a mapping, a tag is not a non-empty ``str``, a value
                is not a number (the message names the tag), or ``step`` is a
                ``bool``/``float``. Nothing of this call is written.
            ValueError: ``step`` is out of range, or ``step=None`` after step ``2**63 - 1``
                (no next step exists). Nothing of this call is written.
            RuntimeError: the monitor is closed.
            ConfigError: ``reduce`` is not an operation, or ``WORLD_SIZE`` > 1 but no process
                group is initialised.
            core_monitor.distributed.TagMismatchError: (``reduce`` only) the ranks gave
                different tags or operations; raised on every rank, nothing is logged.
        """
        if self._closed:
            raise self._closed_error("log")
        if reduce is not None:
            metrics = self._reduce(metrics, reduce)
        if step is None:
            step = self._next_step
            if step > MAX_STEP:
                raise ValueError(f"the next step would be {step}, past the largest step "
                                 "2**63 - 1; pass explicit steps")
        elif type(step) is not int or not 0 <= step <= MAX_STEP:
            step = check_step(step)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"log() takes a mapping of {{tag: value}}, not "
                            f"{type(metrics).__name__}; e.g. monitor.log({{'loss': 0.5}}, step=1)")
        now = time.time()
        new = tuple.__new__
        events = []
        append = events.append
        plain = True  # every value a float under a str tag: the batch is `metrics` itself
        for tag, value in metrics.items():
            if type(value) is float and type(tag) is str and tag:  # the common case, kept fast
                append(new(Event, (tag, value, step, now)))
                continue
            plain = False
            if isinstance(value, Mapping) or type(tag) is not str or not tag:
                for sub_tag, sub_value in flatten({tag: value}):
                    append(new(Event, (sub_tag, to_float(sub_tag, sub_value), step, now)))
            else:
                append(new(Event, (tag, to_float(tag, value), step, now)))
        if step >= self._next_step:
            self._next_step = step + 1
        if not events:
            return step
        if plain:
            batch = OneRow(events)
            batch.row = dict(metrics)
            self._write(batch)
        else:
            self._write(tuple(events))
        return step

    def _reduce(self, metrics: Mapping[str, Any], op: str) -> dict[str, float]:
        if not isinstance(metrics, Mapping):
            raise TypeError(f"log() takes a mapping of {{tag: value}}, not "
                            f"{type(metrics).__name__}")
        if self._reducer is None:
            self._reducer = Reducer()
        return self._reducer.reduce({t: to_float(t, v) for t, v in flatten(metrics)}, op)

    _reducer: Reducer | None = None

    def write_events(self, events: Iterable[tuple[str, Any, int | None]]) -> None:
        """Log DeepSpeed-style event tuples ``(tag, value, step)`` as one batch.

        The convention is DeepSpeed's monitor API (``deepspeed.monitor.Monitor.write_events``).
        Each tuple carries its own step; a ``None`` step means the next step (the largest seen
        so far + 1), the same number for every ``None`` of this call.

        Raises:
            TypeError, ValueError: as ``log`` does; nothing of this call is written.
            RuntimeError: the monitor is closed.
        """
        if self._closed:
            raise self._closed_error("write_events")
        now = time.time()
        auto = self._next_step
        batch = []
        top = auto - 1
        for item in events:
            if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 3:
                raise TypeError(f"event {item!r:.80} is not a (tag, value, step) tuple")
            tag, value, step = item
            if type(tag) is not str or not tag:
                raise TypeError(f"event tag {tag!r} is not a non-empty str")
            if step is None and auto > MAX_STEP:
                raise ValueError(f"the next step would be {auto}, past the largest step "
                                 "2**63 - 1; pass explicit steps")
            step = auto if step is None else check_step(step)
            top = max(top, step)
            batch.append(Event(tag, to_float(tag, value), step, now))
        self._next_step = max(self._next_step, top + 1)
        if batch:
            self._write(tuple(batch))

    def log_config(self, config: Any) -> None:
        """Add hyperparameters after the start, e.g. a framework's config handed over late.

        The config is sanitised as ``Monitor(config=...)`` is (flat, ``.``-joined keys,
        JSON-safe values; odd values never raise), merged into ``self.run.config`` (a key given
        again takes the new value) and sent to every backend's ``monitor_config`` hook, which
        stores it where the tracker shows a run's config. A backend without that hook is
        skipped for it, with one ``BackendWarning`` per monitor.

        Args:
            config: a mapping, dataclass instance, ``argparse.Namespace`` or ``None``.

        Raises:
            RuntimeError: the monitor is closed.
        """
        if self._closed:
            raise self._closed_error("log_config")
        update = sanitize_config(config)
        if not update:
            return
        self.run = dataclasses.replace(
            self.run, config=MappingProxyType({**self.run.config, **update})
        )
        having = {name for name, _ in self._calls["monitor_config"]}
        for backend_name in self._names:
            if backend_name not in having and backend_name not in self._config_warned:
                self._config_warned.add(backend_name)
                warnings.warn(
                    f"backend {backend_name!r} has no monitor_config hook: the config given "
                    "to log_config() is not stored there (it was stored by the other backends)",
                    BackendWarning, stacklevel=2,
                )
        for backend_name, function in self._calls["monitor_config"]:
            try:
                function(config=update)
            except Exception as error:
                self._failed(backend_name, "monitor_config", error)
        self._raise_pending()

    def flush(self) -> None:
        """Ask every backend to make what it has so far durable and readable (no-op once closed)."""
        if not self._closed:
            self._call("monitor_flush")

    def close(self) -> None:
        """Flush and close every backend, in reverse start order. A second call does nothing.

        Every backend is flushed and closed even when another one raises.
        """
        if self._closed:
            return
        self._closed = True
        _unregister(self)
        for backend_name, flush in reversed(self._calls["monitor_flush"]):
            self._guarded(backend_name, "monitor_flush", flush)
        for backend_name, close in reversed(self._calls["monitor_close"]):
            self._guarded(backend_name, "monitor_close", close)
        self._raise_pending()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run."""
        return self._closed

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Monitor {self.run.project}/{self.run.name} {self._names} {state}>"

    # Dispatch --------------------------------------------------------------------------------

    def _write(self, batch: tuple[Event, ...]) -> None:
        for backend_name, write in self._writers:
            try:
                write(events=batch)
            except Exception as error:
                self._failed(backend_name, "monitor_write", error)
        if self._pending is not None:
            self._raise_pending()

    def _closed_error(self, method: str) -> RuntimeError:
        return RuntimeError(
            f"{method}() on the closed Monitor of run {self.run.name!r}; call it before "
            "close(), or create a new Monitor"
        )

    def _call(self, hook: str) -> None:
        for backend_name, function in self._calls[hook]:
            self._guarded(backend_name, hook, function)
        self._raise_pending()

    def _guarded(self, backend_name: str, hook: str, function: Callable[..., Any]) -> None:
        try:
            function()
        except Exception as error:
            self._failed(backend_name, hook, error)

    _pending: BaseException | None = None

    def _failed(self, backend_name: str, hook: str, error: Exception) -> None:
        count = self.failures.get(backend_name, 0)
        self.failures[backend_name] = count + 1
        if self.strict:
            if self._pending is None:
                if hasattr(error, "add_note"):
                    error.add_note(f"(raised by backend {backend_name!r} in {hook})")
                self._pending = error
            return
        if count == 0:
            message = (
                f"backend {backend_name!r} failed in {hook}: {type(error).__name__}: {error}. "
                "The other backends carry on; further failures of this backend are counted in "
                "Monitor.failures, not reported (strict=True raises instead)."
            )
            logger.error(message, exc_info=error)
            warnings.warn(message, BackendWarning, stacklevel=4)

    def _raise_pending(self) -> None:
        error, self._pending = self._pending, None
        if error is not None:
            raise error

    def _start(self, backend_name: str, cls: type, options: dict[str, Any]) -> None:
        instance = None
        try:
            instance = cls(self.run, **options)
            # pluggy checks the hook signatures; check_pending catches a misspelt hook name.
            self._pm.register(instance, name=backend_name)
            self._pm.check_pending()
        except ConfigError:
            self.close()
            raise
        except Exception as error:
            if self.strict:
                self.close()
                raise
            self._failed(backend_name, "start", error)
            if instance is not None and self._pm.is_registered(instance):
                self._pm.unregister(instance)
            return
        for hook in _HOOKS:
            for impl in getattr(self._pm.hook, hook).get_hookimpls():
                if impl.plugin is instance:
                    self._calls[hook].append((backend_name, impl.function))
        self._names.append(backend_name)


def _find(backends: Sequence[str | type]) -> dict[str, BackendInfo | type]:
    """Map each selected name to its entry point (or the class given); imports nothing."""
    found: dict[str, BackendInfo | type] = {}
    for backend in backends:
        if isinstance(backend, type):
            key = Monitor.backend_name(backend)
            value: BackendInfo | type = backend
        elif isinstance(backend, str) and backend:
            key, value = backend, find_backend(backend)
        else:
            raise ConfigError(f"backend {backend!r} is neither a backend name nor a class")
        if key in found:
            raise ConfigError(f"backend {key!r} is selected twice; list each backend once")
        found[key] = value
    return found


def _check_options(backend_name: str, cls: type, options: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` for an option the backend's ``__init__`` does not take."""
    if not isinstance(options, Mapping):
        raise ConfigError(f"options of backend {backend_name!r} must be a mapping, not "
                          f"{type(options).__name__}")
    params = list(inspect.signature(cls).parameters.values())[1:]  # after `run`
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for option in options:
        if option not in accepted:
            raise ConfigError(
                f"backend {backend_name!r} has no option {option!r}; accepted options: "
                f"{', '.join(accepted) or 'none'}"
            )


# Safety net: close monitors the user forgot, at exit and on SIGTERM ----------------------------

#: Monitors not yet closed, oldest first. Strong references: a monitor the user dropped without
#: closing must still be closed at exit, or its buffered rows are lost (case C3).
_open: dict[int, Monitor] = {}
_previous_sigterm: Any = None
_sigterm_installed = False


def close_all() -> None:
    """Close every open ``Monitor`` of this process (newest first). Called at exit."""
    for monitor in reversed(list(_open.values())):
        try:
            monitor.close()
        except Exception:  # at exit there is nobody left to raise to
            logger.exception("closing %r at exit failed", monitor)


def _register(monitor: Monitor) -> None:
    _open[id(monitor)] = monitor
    # Last registered runs first: re-registering after the backends started puts this ahead
    # of the atexit handlers the SDKs registered in their own init (Trackio's, for one).
    atexit.unregister(close_all)
    atexit.register(close_all)
    _install_sigterm()


def _unregister(monitor: Monitor) -> None:
    _open.pop(id(monitor), None)


def _install_sigterm() -> None:
    """Close monitors on SIGTERM, then let the previous handler (or the default) run."""
    global _sigterm_installed, _previous_sigterm
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return
    _previous_sigterm = previous
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    close_all()
    if callable(_previous_sigterm):
        _previous_sigterm(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
