"""The contract kit: one test suite every backend runs (model: ``fsspec.tests.abstract``).

A plugin's tests subclass ``MonitorContract`` and supply two fixtures::

    from core_monitor.testing import MonitorContract

    class TestMyBackend(MonitorContract):
        @pytest.fixture
        def backend_class(self):
            return MyMonitor            # the class your entry point names

        @pytest.fixture
        def read_rows(self):
            def read(run):              # run: core_monitor.RunInfo of the finished run
                ...                     # read YOUR backend's own storage under run.log_dir
                return rows             # [(tag: str, step: int, value: float)], storage order
            return read

Optionally override ``backend_options`` (a dict of the backend's keyword options). The kit
builds a real ``Monitor`` around the class with ``log_dir=tmp_path / "logs"`` and checks what
``read_rows`` returns after ``flush()`` (or after ``close()`` for a backend whose class says
``rows_readable_after = "close"``). A backend that stores float32 (TensorBoard) sets
``value_dtype = "float32"``. Installing ``core-monitor`` registers this module as a pytest plugin
(entry point ``pytest11``), so its fixtures need no ``conftest.py`` import. Its
``monitor_factory`` fixture (a ``MonitorFactory``: real monitors, closed at teardown) serves
any test that builds monitors, the kit's own ``make_monitor`` included.

What the core guarantees a backend (so a backend need not be thread-safe): its hooks are never
called concurrently (one worker thread per backend in background dispatch, a lock in sync
mode), they may run on a thread other than the constructor's, batches arrive in the order
logged, and no hook is ever called from a forked child of the process that built it.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import re
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any

import pytest

from .monitor import Monitor
from .run import RunInfo

Rows = list[tuple[str, int, float]]

_CORE_DISTRIBUTION = "core-monitor"

_run_numbers = count()


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

    def close(self) -> None:
        """Close every monitor made or added, in that order (a closed one is left alone)."""
        for monitor in self.made:
            monitor.close()


@pytest.fixture
def monitor_factory(tmp_path: Any) -> Iterator[MonitorFactory]:
    """A ``MonitorFactory`` with ``project="test"`` and ``log_dir=tmp_path / "logs"``; every
    monitor it made is closed at teardown. Backends have no default: pass them, or set
    ``monitor_factory.defaults["backends"]``."""
    factory = MonitorFactory(project="test", log_dir=tmp_path / "logs")
    yield factory
    factory.close()


def _stored(value: float, dtype: str) -> float:
    """``value`` as a backend of ``dtype`` stores it."""
    if dtype == "float32" and math.isfinite(value):
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


class MonitorContract:
    """Abstract test class: subclass it with fixtures ``backend_class`` and ``read_rows``."""

    @pytest.fixture
    def backend_class(self) -> type:
        raise NotImplementedError("override the backend_class fixture: return your backend class")

    @pytest.fixture
    def read_rows(self) -> Callable[[RunInfo], Rows]:
        raise NotImplementedError(
            "override the read_rows fixture: return a function RunInfo -> [(tag, step, value)]"
        )

    @pytest.fixture
    def backend_options(self) -> dict[str, Any]:
        return {}

    @pytest.fixture
    def make_monitor(
        self, backend_class: type, backend_options: dict[str, Any], tmp_path: Any
    ) -> Iterator[MonitorFactory]:
        """Real monitors around the backend only (``strict=True``); closed at teardown. Not
        the ``monitor_factory`` fixture: a plugin's tests may define their own of that name."""
        factory = MonitorFactory(
            backends=[backend_class], project="contract", log_dir=tmp_path / "logs",
            strict=True, **{Monitor.backend_name(backend_class): backend_options},
        )
        yield factory
        factory.close()

    @pytest.fixture
    def stored(self, backend_class: type, read_rows: Callable[[RunInfo], Rows]):
        """``stored(monitor)`` -> ``{tag: [(step, value), ...]}`` read back from the backend.

        Flushes (or closes, for ``rows_readable_after = "close"`` backends) first.
        """

        def stored(monitor: Monitor) -> dict[str, list[tuple[int, float]]]:
            if getattr(backend_class, "rows_readable_after", "flush") == "close":
                monitor.close()
            else:
                monitor.flush()
            by_tag: dict[str, list[tuple[int, float]]] = {}
            for tag, step, value in read_rows(monitor.run):
                assert type(step) is int, f"read_rows gave step {step!r} for {tag!r}: not an int"
                by_tag.setdefault(tag, []).append((step, float(value)))
            return by_tag

        return stored

    def assert_stored(
        self, got: dict[str, list[tuple[int, float]]], want: dict[str, list[tuple[int, float]]],
        dtype: str,
    ) -> None:
        assert sorted(got) == sorted(want), "the tags stored differ from the tags logged"
        for tag, points in want.items():
            expected = [(s, _stored(v, dtype)) for s, v in points]
            assert [s for s, _ in got[tag]] == [s for s, _ in expected], f"steps of {tag!r}"
            for (_, g), (_, w) in zip(got[tag], expected, strict=True):
                assert _same(g, w), f"{tag!r}: stored {g!r}, logged {w!r}"

    @pytest.fixture
    def dtype(self, backend_class: type) -> str:
        return getattr(backend_class, "value_dtype", "float64")

    # The contract ------------------------------------------------------------------------

    def test_explicit_steps_are_stored_exactly(self, make_monitor, stored, dtype):
        """The caller's steps are stored, not a counter of the backend's own."""
        monitor = make_monitor()
        for step, loss in zip([0, 10, 20, 120], [0.3, 0.25, 0.2, 0.1], strict=True):
            monitor.log({"loss": loss}, step=step)
        self.assert_stored(
            stored(monitor), {"loss": [(0, 0.3), (10, 0.25), (20, 0.2), (120, 0.1)]}, dtype
        )

    def test_step_lower_than_previous_is_stored(self, make_monitor, stored, dtype):
        """5, then 3, then no step -> 6 (the largest step seen + 1); all three stored."""
        monitor = make_monitor()
        monitor.log({"loss": 1.0}, step=5)
        monitor.log({"loss": 2.0}, step=3)
        assert monitor.log({"loss": 3.0}) == 6
        self.assert_stored(stored(monitor), {"loss": [(5, 1.0), (3, 2.0), (6, 3.0)]}, dtype)

    def test_repeated_step_is_stored_twice(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"loss": 1.0}, step=7)
        monitor.log({"loss": 2.0}, step=7)
        self.assert_stored(stored(monitor), {"loss": [(7, 1.0), (7, 2.0)]}, dtype)

    def test_auto_steps_start_at_zero(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        for value in (1.0, 2.0, 3.0):
            monitor.log({"loss": value})
        self.assert_stored(stored(monitor), {"loss": [(0, 1.0), (1, 2.0), (2, 3.0)]}, dtype)

    def test_largest_step_is_stored(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"loss": 1.5}, step=2**63 - 1)
        self.assert_stored(stored(monitor), {"loss": [(2**63 - 1, 1.5)]}, dtype)

    def test_nan_and_infinities_round_trip(self, make_monitor, stored, dtype):
        """NaN, +inf and -inf are stored as such, next to finite values of the same tags."""
        monitor = make_monitor()
        monitor.log({"a": math.nan, "b": math.inf, "c": -math.inf}, step=1)
        monitor.log({"a": 1.0, "b": 2.0, "c": 3.0}, step=2)
        self.assert_stored(
            stored(monitor),
            {
                "a": [(1, math.nan), (2, 1.0)],
                "b": [(1, math.inf), (2, 2.0)],
                "c": [(1, -math.inf), (2, 3.0)],
            },
            dtype,
        )

    def test_many_tags_in_one_batch(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        for step in range(3):
            monitor.log({f"layer{i}/grad_norm": i + step / 4 for i in range(64)}, step=step)
        want = {f"layer{i}/grad_norm": [(s, i + s / 4) for s in range(3)] for i in range(64)}
        self.assert_stored(stored(monitor), want, dtype)

    def test_nested_metrics_are_flattened_with_slash(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"train": {"loss": 0.5, "acc": 0.75}, "lr": 0.001}, step=4)
        want = {"train/loss": [(4, 0.5)], "train/acc": [(4, 0.75)], "lr": [(4, 0.001)]}
        self.assert_stored(stored(monitor), want, dtype)

    def test_deepspeed_event_tuples(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.write_events([("Train/loss", 0.5, 100), ("Train/lr", 0.1, 100)])
        monitor.write_events([("Train/loss", 0.25, 90)])
        want = {"Train/loss": [(100, 0.5), (90, 0.25)], "Train/lr": [(100, 0.1)]}
        self.assert_stored(stored(monitor), want, dtype)

    def test_same_tag_twice_in_one_batch_keeps_both(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.write_events([("loss", 1.0, 3), ("loss", 2.0, 3), ("loss", 3.0, 2)])
        self.assert_stored(stored(monitor), {"loss": [(3, 1.0), (3, 2.0), (2, 3.0)]}, dtype)

    def test_unicode_tags(self, make_monitor, stored, dtype):
        monitor = make_monitor()
        monitor.log({"损失/训练": 0.5, "Größe": 2.0, "loss 🔥": 1.0}, step=1)
        want = {"损失/训练": [(1, 0.5)], "Größe": [(1, 2.0)], "loss 🔥": [(1, 1.0)]}
        self.assert_stored(stored(monitor), want, dtype)

    def test_tags_a_backend_reserves_round_trip(self, make_monitor, stored, dtype):
        """Names SDKs use for themselves (Trackio renames these) come back as logged."""
        monitor = make_monitor()
        logged = {"step": 1.0, "time": 2.0, "timestamp": 3.0, "metrics": 4.0, "__x": 5.0}
        monitor.log(logged, step=2)
        self.assert_stored(stored(monitor), {t: [(2, v)] for t, v in logged.items()}, dtype)

    def test_rows_are_readable_after_flush_while_run_is_open(
        self, backend_class, make_monitor, read_rows
    ):
        if getattr(backend_class, "rows_readable_after", "flush") == "close":
            pytest.skip("backend declares rows_readable_after = 'close'")
        monitor = make_monitor()
        monitor.log({"loss": 0.5}, step=1)
        monitor.flush()
        assert [(t, s) for t, s, _ in read_rows(monitor.run)] == [("loss", 1)]
        monitor.log({"loss": 0.25}, step=2)
        monitor.flush()
        assert [(t, s) for t, s, _ in read_rows(monitor.run)] == [("loss", 1), ("loss", 2)]

    def test_close_is_idempotent(self, make_monitor, read_rows):
        monitor = make_monitor()
        monitor.log({"loss": 0.5}, step=1)
        monitor.close()
        monitor.close()
        assert [(t, s) for t, s, _ in read_rows(monitor.run)] == [("loss", 1)]
        assert monitor.failures == {}

    def test_close_without_writes(self, make_monitor, read_rows):
        monitor = make_monitor()
        monitor.close()
        assert read_rows(monitor.run) == []
        assert monitor.failures == {}

    def test_log_after_close_raises_and_stores_nothing(self, make_monitor, read_rows):
        monitor = make_monitor()
        monitor.log({"loss": 0.5}, step=1)
        monitor.close()
        with pytest.raises(RuntimeError):
            monitor.log({"loss": 0.25}, step=2)
        assert [(t, s) for t, s, _ in read_rows(monitor.run)] == [("loss", 1)]

    def test_two_runs_in_one_process_are_kept_apart(self, make_monitor, stored, dtype):
        first = make_monitor(name="first")
        first.log({"loss": 1.0}, step=1)
        first.close()
        second = make_monitor(name="second")
        second.log({"loss": 2.0}, step=1)
        self.assert_stored(stored(second), {"loss": [(1, 2.0)]}, dtype)
        self.assert_stored(stored(first), {"loss": [(1, 1.0)]}, dtype)

    def test_importing_the_backend_module_imports_no_sdk(self, backend_class):
        """A rank that writes nothing imports the backend's module (the core checks options
        from the class on every rank) but must not import its SDK: the modules of the
        distribution's requirements (other than core-monitor) stay out of ``sys.modules``
        after ``import <module>`` in a fresh interpreter. Import them in the constructor."""
        module = backend_class.__module__
        sdk_modules = _requirement_modules(module)
        if sdk_modules is None:
            pytest.skip(f"{module!r} is not provided by an installed distribution")
        if not sdk_modules:
            pytest.skip(f"the distribution providing {module!r} requires nothing besides "
                        f"{_CORE_DISTRIBUTION}")
        code = (f"import json, sys, {module}\n"
                f"print(json.dumps(sorted(m for m in {sorted(sdk_modules)!r} "
                "if m in sys.modules)))")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, f"import {module} failed:\n{result.stderr}"
        imported = json.loads(result.stdout.strip().splitlines()[-1])
        assert imported == [], (
            f"import {module} imported {imported}: import the SDK in the backend's constructor"
        )


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_modules(module: str) -> set[str] | None:
    """Top-level import names of the requirements (without extras-only ones and without
    core-monitor) of the distribution providing ``module``; ``None`` when no installed
    distribution provides it."""
    providers = importlib.metadata.packages_distributions()
    distributions = providers.get(module.partition(".")[0])
    if not distributions:
        return None
    wanted = set()
    for distribution in distributions:
        for requirement in importlib.metadata.requires(distribution) or []:
            name, _, marker = requirement.partition(";")
            if "extra" in marker:
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name)
            if match and _normalise(match.group(1)) != _CORE_DISTRIBUTION:
                wanted.add(_normalise(match.group(1)))
    return {top for top, dists in providers.items()
            if any(_normalise(d) in wanted for d in dists)}
