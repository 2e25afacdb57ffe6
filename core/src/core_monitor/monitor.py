"""``Monitor``: the one object training code logs through; it fans each batch out to backends.

The public API only: validating each call and deciding its step. Finding and checking backends
is ``core_monitor.discovery``; calling them under the failure policy is ``core_monitor.dispatch``;
closing what was left open at exit is ``core_monitor.shutdown``; the settings rules and file
reader are ``core_monitor.settings``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from . import discovery, shutdown
from .config import sanitize_config
from .dispatch import Dispatcher
from .distributed import Reducer
from .errors import ConfigError
from .events import MAX_STEP, Event, OneRow, check_step, to_float
from .media import split
from .run import RunInfo, default_run_name, detect_rank
from .settings import check_backend_keys, check_keywords, check_options, load_monitor_config


class Monitor:
    """Log scalars once; every selected backend stores them at the caller's step.

    Args:
        backends: backend names as installed (``monitors list``, matched exactly), e.g.
            ``["trackio", "tensorboard"]``, or backend classes (a class's name is its ``name``
            attribute, else its ``__name__``); one name alone may be a ``str``; ``None``: those
            in ``EXPERIMENT_MONITORS``. Those in ``EXPERIMENT_MONITORS_DISABLE`` are skipped
            (``ConfigWarning``); with all skipped the monitor checks calls and writes nothing.
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
            ``wandb={"mode": "offline"}``; an installed backend's are ignored when unselected.

    Raises:
        ConfigError: no backend selected; ``project``, ``name``, ``strict`` or
            ``rank_zero_only`` of the wrong type; a keyword naming no installed backend
            (``logdir``: "did you mean 'log_dir'?"); an option the backend does not accept
            (the message names backend, option and accepted ones); ``strict=True`` and a
            disabled backend selected, or an unknown name in ``EXPERIMENT_MONITORS_DISABLE``.
        UnknownBackendError: a name that no installed distribution declares.
        BackendLoadError: a selected plugin or its SDK fails to import.
    """

    def __init__(
        self,
        backends: Sequence[str | type] | str | None = None,
        *,
        project: str,
        name: str | None = None,
        config: Any = None,
        log_dir: str | os.PathLike[str] | None = None,
        strict: bool = False,
        rank_zero_only: bool = True,
        **backend_options: Mapping[str, Any],
    ) -> None:
        backends = check_keywords(backends, project, name, strict, rank_zero_only)
        rank, world_size = detect_rank()
        self.run = RunInfo(
            project=project,
            name=name or default_run_name(),
            config=sanitize_config(config),
            log_dir=Path(log_dir) if log_dir is not None else None,
            rank=rank,
            world_size=world_size,
        )
        self._dispatch = Dispatcher(strict=strict)
        #: Failures per backend name: how many hook calls raised.
        self.failures: dict[str, int] = self._dispatch.failures
        #: (backend, media kind) -> media values not sent there: the backend lacks the kind.
        self.media_skipped: dict[tuple[str, str], int] = self._dispatch.media_skipped
        self._write = self._dispatch.write  # log()'s hot path: one bound method, no look-up
        self._next_step = 0
        self._reducer = Reducer()  # log(reduce=...): the ranks' agreed tags
        self._closed = False

        found = discovery.select(backends, strict=strict)  # all checked before any import
        check_backend_keys(backend_options, backends)
        classes = {
            k: v if isinstance(v, type) else discovery.load_backend(v) for k, v in found.items()
        }
        for backend_name, cls in classes.items():
            check_options(backend_name, cls, backend_options.get(backend_name) or {})
        if rank == 0 or not rank_zero_only:
            try:
                for backend_name, cls in classes.items():
                    options = dict(backend_options.get(backend_name) or {})
                    self._dispatch.start(backend_name, cls, self.run, options)
            except Exception:  # a ConfigError, or any start failure with strict=True
                self.close()
                raise
        shutdown.register(self)

    @staticmethod
    def backend_name(cls: type) -> str:
        """The name a backend class passed directly is known by: ``cls.name`` or ``__name__``."""
        return discovery.backend_name(cls)

    @property
    def strict(self) -> bool:
        """Whether a backend's exception is re-raised (``True``) or warned about once."""
        return self._dispatch.strict

    @classmethod
    def from_config(
        cls, source: Mapping[str, Any] | str | os.PathLike[str], **overrides: Any
    ) -> Monitor:
        """Build a monitor from a mapping or a ``.toml``/``.json`` file.

        See ``core_monitor.settings.load_monitor_config`` for the format. ``overrides`` are
        ``Monitor`` keyword arguments that win over the file (e.g. ``name=...``), applied
        before its sections are checked (``backends=[...]`` selects instead of the file).

        Raises:
            ConfigError: as ``load_monitor_config`` and ``Monitor`` do; when ``source`` is a
                file, the message starts with its path (e.g. an unknown option in a section).
        """
        kwargs = load_monitor_config(source, **overrides)
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
        return [backend.name for backend in self._dispatch.backends]

    # Logging ---------------------------------------------------------------------------------

    def log(
        self, metrics: Mapping[str, Any], step: int | None = None, *, reduce: str | None = None
    ) -> int:
        """Log scalars and media at one step, as ``wandb.log``/``accelerate.Accelerator.log`` do.

        Args:
            metrics: ``{tag: value}``; nested mappings are flattened with ``/``. Values are
                numbers or anything with ``.item()`` (numpy/torch scalars, 0-d arrays), or
                media (``Image``, ``Histogram``, ``Text``: see ``core_monitor.media``).
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
                is neither a number nor media of the right type or dtype (the message names the
                tag), or ``step`` is a ``bool``/``float``. Nothing of this call is written.
            ValueError: ``step`` out of range or no next step after ``2**63 - 1``, or a media
                value of a wrong shape or range (names the tag). Nothing of this call is written.
            RuntimeError: the monitor is closed.
            ConfigError: ``reduce`` is not an operation, or ``WORLD_SIZE`` > 1 but no process
                group is initialised.
            core_monitor.distributed.TagMismatchError: (``reduce`` only) the ranks gave
                different tags or operations; raised on every rank, nothing is logged.
        """
        if self._closed:
            raise self._closed_error("log")
        if reduce is not None:
            metrics = self._reducer.reduce_metrics(metrics, reduce)
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
        events: list[Event] = []
        media: list[Any] = []
        append = events.append
        plain = True  # every value a float under a str tag: the batch is `metrics` itself
        for tag, value in metrics.items():
            if type(value) is float and type(tag) is str and tag:  # the common case, kept fast
                append(new(Event, (tag, value, step, now)))
                continue
            plain = False
            split(tag, value, step, now, events, media)  # scalars to events, media to media
        if step >= self._next_step:
            self._next_step = step + 1
        if plain and events:
            batch = OneRow(events)
            batch.row = dict(metrics)
            self._write(batch)
        elif events:
            self._write(tuple(events))
        if media:
            self._dispatch.write_media(media)
        return step

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
        self._dispatch.warn_lacking("monitor_config", "the config given to log_config() is not "
                                    "stored there (it was stored by the other backends)")
        self._dispatch.call("monitor_config", config=update)

    def flush(self) -> None:
        """Ask every backend to make what it has so far durable and readable (no-op once closed)."""
        if not self._closed:
            self._dispatch.call("monitor_flush")

    def close(self) -> None:
        """Flush and close every backend, in reverse start order. A second call does nothing.

        Every backend is flushed and closed even when another one raises.
        """
        if self._closed:
            return
        self._closed = True
        shutdown.unregister(self)
        self._dispatch.close()

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
        return f"<Monitor {self.run.project}/{self.run.name} {self.backends} {state}>"

    def _closed_error(self, method: str) -> RuntimeError:
        return RuntimeError(
            f"{method}() on the closed Monitor of run {self.run.name!r}; call it before "
            "close(), or create a new Monitor"
        )
