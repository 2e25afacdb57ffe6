"""The reader contract: how a plugin reads a run back from its tracker's own storage, for
``monitors copy`` (a run as a copy source) and the contract kit.

A plugin declares its reader as a module in the entry-point group ``GROUP``, under its
backend's name, e.g. in ``pyproject.toml``::

    [project.entry-points.experiment_monitor_readers]
    csv = "csv_monitor.reader"

so ``monitors list`` can tell from metadata alone (nothing imported) which backends can be a
copy source. The module holds:

* ``read_rows(run: RunInfo, **options) -> list[tuple[str, int, float]]`` (required): every
  scalar point of the run named by ``run`` (``project``, ``name``, ``log_dir``, ``rank``), as
  ``(tag, step, value)``: ``tag`` a non-empty ``str`` as logged (the plugin's own escaping
  undone), ``step`` an ``int`` (not a ``bool``) exactly as logged, ``value`` a ``float`` at the
  storage's precision (NaN and +-inf as such). Storage order: points of one step and tag in
  the order they were logged (a repeated step appears twice); the order across tags and
  steps is free (row by row, or tag by tag as TensorBoard's): ``monitors copy`` groups the
  points of a step into one ``log()`` call whatever it is. ``[]`` when the run holds no
  point; a run that does not exist may raise ``FileNotFoundError`` or ``LookupError``.
* ``read_config(run, **options) -> dict[str, Any]`` (optional): the stored config, flat
  ``str`` keys; values as the tracker keeps them (MLflow: strings).
* ``read_media(run, **options) -> list[tuple[str, int, Image | Histogram | Text]]``
  (optional): the stored media at their steps, as ``core_monitor.media`` values.
* ``read_crash(run, **options) -> str | None`` (every first-party plugin has one): how the run
  ended. The reason the run crashed, as ``monitor_crash`` got it (``""`` from a tracker that
  keeps a failed state but no text, wandb's exit code); ``None`` for a run that did not crash
  (closed, still open). A tracker without a run status keeps one in a file
  (``core_monitor.status_file.StatusFile``).

``options`` are keyword-only, named like the backend's own options they mirror (MLflow's
``tracking_uri``, TensorBoard's ``run_dir``): ``monitors copy --source-option K=V`` passes
them. Resume's ``last_step`` is, by this contract, the largest step ``read_rows`` returns.
``check_rows``/``check_config``/``check_media``/``check_crash`` state the types; the kit runs them.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from ._suggest import closest
from .discovery import check_backend
from .errors import ConfigError
from .plugins import READER_GROUP as GROUP
from .plugins import installed_plugins


@dataclass(frozen=True)
class Reader:
    """A backend's reader, loaded.

    Attributes:
        name: the backend name.
        module: the reader module's name.
        read_rows: the required function; ``read_config``, ``read_media``, ``read_crash``:
            ``None`` when absent.
        options: the keyword options every function of it accepts (their union).
    """

    name: str
    module: str
    read_rows: Callable[..., list[tuple[str, int, float]]]
    read_config: Callable[..., dict[str, Any]] | None
    read_media: Callable[..., list[tuple[str, int, Any]]] | None
    options: frozenset[str]
    read_crash: Callable[..., str | None] | None = None

    def options_for(self, function: Callable[..., Any], options: Mapping[str, Any],
                    ) -> dict[str, Any]:
        """The ``options`` that ``function`` accepts (every one, if it takes ``**kwargs``)."""
        parameters = inspect.signature(function).parameters
        if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return dict(options)
        return {k: v for k, v in options.items() if k in parameters}


def installed_readers() -> dict[str, str]:
    """Backend name -> reader module, from installed metadata only (nothing imported)."""
    return {name: plugin.reader for name, claims in installed_plugins().items()
            for plugin in claims if plugin.reader is not None}


def load_reader(name: str) -> Reader:
    """Import and check the reader of backend ``name``.

    Raises:
        ConfigError: no installed distribution declares a reader for ``name`` (the message
            names the backends that have one), or its module lacks a callable ``read_rows``.
        ImportError: the module (or its SDK) fails to import; ``BackendLoadError`` (an
            ``ImportError``) when the plugin's ``check_sdk()`` reports a problem: the core runs
            the backend's SDK check before its reader too, so a reader calls none.
    """
    readers = installed_readers()
    if name not in readers:
        hint = closest(name, readers)
        have = ", ".join(sorted(readers)) or "none"
        raise ConfigError(
            f"backend {name!r} has no reader (no entry point {name!r} in the group {GROUP!r}), "
            f"so it cannot be a copy source.{f' Did you mean {hint!r}?' if hint else ''} "
            f"Backends with a reader: {have} (`monitors list` shows them)."
        )
    for plugin in installed_plugins().get(name, []):
        if plugin.reader == readers[name] and plugin.entry_point is not None:
            check_backend(plugin)
    module = import_module(readers[name])
    functions = {key: getattr(module, key, None)
                 for key in ("read_rows", "read_config", "read_media", "read_crash")}
    if not callable(functions["read_rows"]):
        raise ConfigError(f"the reader of backend {name!r} ({readers[name]}) has no function "
                          "read_rows(run, **options); see core_monitor.readers")
    options: set[str] = set()
    for function in functions.values():
        if callable(function):
            options.update(p.name for p in inspect.signature(function).parameters.values()
                           if p.kind is p.KEYWORD_ONLY)
    return Reader(name, readers[name], functions["read_rows"],
                  functions["read_config"] if callable(functions["read_config"]) else None,
                  functions["read_media"] if callable(functions["read_media"]) else None,
                  frozenset(options),
                  functions["read_crash"] if callable(functions["read_crash"]) else None)


def check_rows(rows: Any) -> list[str]:
    """What ``rows`` (a ``read_rows`` result) breaks of the contract; ``[]`` when nothing."""
    if not isinstance(rows, list):
        return [f"read_rows returned {type(rows).__name__}, not a list of (tag, step, value)"]
    problems = []
    for row in rows:
        if not (isinstance(row, tuple) and len(row) == 3):
            problems.append(f"row {row!r:.80} is not a (tag, step, value) tuple")
            continue
        tag, step, value = row
        if not isinstance(tag, str) or not tag:
            problems.append(f"row {row!r:.80}: the tag is not a non-empty str")
        if isinstance(step, bool) or not isinstance(step, int):
            problems.append(f"row {row!r:.80}: the step is {type(step).__name__}, not int")
        if not isinstance(value, float):
            problems.append(f"row {row!r:.80}: the value is {type(value).__name__}, not float")
        if len(problems) >= 5:
            break
    return problems


def check_config(config: Any) -> list[str]:
    """What ``config`` (a ``read_config`` result) breaks of the contract."""
    if not isinstance(config, dict):
        return [f"read_config returned {type(config).__name__}, not a dict"]
    return [f"config key {key!r:.80} is not a str" for key in config if not isinstance(key, str)]


def check_crash(crash: Any) -> list[str]:
    """What ``crash`` (a ``read_crash`` result) breaks of the contract."""
    if crash is None or isinstance(crash, str):
        return []
    return [f"read_crash returned {type(crash).__name__}, not the reason (str) or None"]


def check_media(media: Any) -> list[str]:
    """What ``media`` (a ``read_media`` result) breaks of the contract."""
    from .media import Histogram, Image, Text

    if not isinstance(media, list):
        return [f"read_media returned {type(media).__name__}, not a list of (tag, step, value)"]
    problems = []
    for item in media:
        if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str)
                and isinstance(item[1], int) and not isinstance(item[1], bool)
                and isinstance(item[2], (Image, Histogram, Text))):
            problems.append(f"media entry {item!r:.80} is not (tag: str, step: int, "
                            "Image | Histogram | Text)")
    return problems[:5]


def same_value(a: float, b: float, dtype: str) -> bool:
    """Whether two stored values are equal at ``dtype`` (``"float32"`` or ``"float64"``)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if dtype == "float32":
        import struct

        def f32(x: float) -> float:
            try:
                return struct.unpack("f", struct.pack("f", x))[0]
            except OverflowError:
                return math.copysign(math.inf, x)
        return f32(a) == f32(b)
    return a == b
