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

Optionally override ``backend_options`` (a dict of the backend's keyword options). The kit
builds a real ``Monitor`` around the class with ``log_dir=tmp_path / "logs"`` and checks what
``read_rows`` returns after ``flush()``, or after ``close()`` for a backend whose class says
``rows_readable_after = "close"``. The capability attributes the kit reads are declared once,
in ``core_monitor.hookspecs.Capabilities`` (``rows_readable_after``, ``value_dtype``,
``stores_config``). Every failure says what was expected and what was stored, at which tag and
step, and which hook or capability to look at. ``monitors new NAME`` writes a plugin whose tests
run this kit. Installing ``core-monitor`` registers this module as a pytest plugin (entry point
``pytest11``), so its fixtures need no ``conftest.py`` import.
"""

from __future__ import annotations

import math
import struct
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import count
from typing import Any

try:
    import pytest
except ModuleNotFoundError as error:  # pragma: no cover - exercised in a venv without pytest
    raise ImportError(
        "core_monitor.testing (the backend contract kit) needs pytest, which is not installed; "
        "install the core with its testing extra: pip install 'core-monitor[testing]'"
    ) from error

from .errors import BackendWarning
from .hookspecs import Capabilities, hookimpl
from .monitor import Monitor
from .run import RunInfo

Rows = list[tuple[str, int, float]]

#: The hooks of ``core_monitor.hookspecs``, in the order the core calls them.
HOOKS = ("monitor_write", "monitor_config", "monitor_flush", "monitor_close")
#: The attribute pluggy's ``hookimpl`` marker sets on a hook implementation.
_MARK = f"{hookimpl.project_name}_impl"

_run_numbers = count()


def _stored(value: float, dtype: str) -> float:
    """``value`` as a backend of ``dtype`` stores it."""
    if dtype == "float32" and math.isfinite(value):
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _short(items: Sequence[Any], limit: int = 12) -> str:
    """``items`` as a list literal, the middle left out when long."""
    if len(items) <= limit:
        return repr(list(items))
    head = ", ".join(map(repr, items[: limit // 2]))
    tail = ", ".join(map(repr, items[-3:]))
    return f"[{head}, ... ({len(items) - limit // 2 - 3} more), {tail}]"


def _is_subsequence(short: Sequence[Any], long: Sequence[Any]) -> bool:
    remaining = iter(long)
    return all(any(x == y for y in remaining) for x in short)


def _step_hint(want: list[int], got: list[int]) -> str:
    """Why ``got`` (steps stored for a tag) differs from ``want`` (steps logged), and the fix."""
    if len(got) == len(want) and got == list(range(len(got))):
        return ("the backend renumbered steps (its own counter from 0) — store event.step as "
                "given in monitor_write")
    if len(got) == len(want) and sorted(got) == sorted(want):
        return ("the same steps in another order — store the events in the order monitor_write "
                "receives them and let read_rows return rows in storage order (do not sort by "
                "step)")
    if len(got) < len(want) and _is_subsequence(got, want):
        missing = list((Counter(want) - Counter(got)).elements())
        return (f"point(s) at step(s) {_short(missing)} were not stored — monitor_write must store "
                "every event, also one whose step is lower than or equal to an earlier one; if "
                "they are the last ones, monitor_flush did not make them readable (declare "
                "rows_readable_after = 'close' when only monitor_close does)")
    if len(got) > len(want) and _is_subsequence(want, got):
        extra = list((Counter(got) - Counter(want)).elements())
        return (f"extra point(s) at step(s) {_short(extra)} — read_rows returned rows this run did "
                "not log (another run's or rank's: each needs storage of its own) or monitor_write "
                "stored an event twice")
    for index, (w, g) in enumerate(zip(want, got)):  # noqa: B905 - lengths may differ
        if w != g:
            return (f"the first difference is point {index}: expected step {w}, stored {g} — store "
                    "event.step as given in monitor_write")
    return "store event.step as given in monitor_write, one row per event"


def _value_hint(want: float, got: float, dtype: str) -> str:
    if not math.isfinite(want):
        return ("NaN and ±inf must be stored as such — store event.value unchanged in "
                "monitor_write and return float('nan') / float('inf') from read_rows")
    if dtype == "float64" and _same(got, _stored(want, "float32")):
        return ("the storage rounds values to single precision — declare the class attribute "
                "value_dtype = 'float32'")
    return "store event.value unchanged in monitor_write, and read it back unchanged in read_rows"


def _config_matches(want: Any, got: Any) -> bool:
    """Whether a stored config value is the one given, as far as the storage's types allow.

    Numbers compare by value (an ``int`` stored as a ``float`` matches); a tracker that keeps
    every value as text (MLflow params) may return ``str(value)``.
    """
    if isinstance(want, bool) or isinstance(got, bool):
        return (type(want) is type(got) and want == got) or got == str(want)
    if want == got:
        return True
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers):
        return float(want) == float(got)
    return isinstance(got, str) and got == str(want)


def _recording(backend_class: type, hook: str, calls: list[str]) -> Callable[..., Any]:
    """A hook implementation that notes ``hook`` in ``calls``, then runs ``backend_class``'s."""
    parent = getattr(backend_class, hook)
    if hook == "monitor_write":
        def monitor_write(self: Any, events: Any) -> None:
            calls.append(hook)
            parent(self, events=events)
        function: Callable[..., Any] = monitor_write
    elif hook == "monitor_config":
        def monitor_config(self: Any, config: Any) -> None:
            calls.append(hook)
            parent(self, config=config)
        function = monitor_config
    else:
        def no_argument(self: Any) -> None:
            calls.append(hook)
            parent(self)
        no_argument.__name__ = hook
        function = no_argument
    return hookimpl(function)


class MonitorContract:
    """Abstract test class: subclass it with fixtures ``backend_class`` and ``read_rows`` (and
    ``read_config`` for a backend with ``stores_config = True``)."""

    @pytest.fixture
    def backend_class(self) -> type:
        raise NotImplementedError("override the backend_class fixture: return your backend class")

    @pytest.fixture
    def read_rows(self) -> Callable[[RunInfo], Rows]:
        raise NotImplementedError(
            "override the read_rows fixture: return a function RunInfo -> [(tag, step, value)]"
        )

    @pytest.fixture
    def read_config(self) -> Callable[[RunInfo], Mapping[str, Any]] | None:
        """Override with a function ``RunInfo -> dict`` (the stored config, the plugin's key
        escaping undone, ``{}`` when none); ``None`` skips the config checks."""
        return None

    @pytest.fixture
    def backend_options(self) -> dict[str, Any]:
        return {}

    @pytest.fixture
    def capabilities(self, backend_class: type) -> Capabilities:
        """The class attributes the kit reads (``hookspecs.Capabilities``), checked."""
        try:
            return Capabilities.of(backend_class)
        except TypeError as error:
            pytest.fail(str(error), pytrace=False)

    @pytest.fixture
    def make_monitor(
        self, backend_class: type, backend_options: dict[str, Any], tmp_path: Any
    ) -> Iterator[Callable[..., Monitor]]:
        """A factory of real monitors around the backend; every one is closed at teardown.

        ``make_monitor(backend=cls, **monitor_kwargs)`` uses ``cls`` instead of the backend
        class (a subclass the kit made); other keywords go to ``Monitor``.
        """
        made: list[Monitor] = []

        def make(backend: type | None = None, **kwargs: Any) -> Monitor:
            cls = backend or backend_class
            name = Monitor.backend_name(cls)
            kwargs.setdefault("project", "contract")
            kwargs.setdefault("name", f"run-{next(_run_numbers)}")
            kwargs.setdefault("log_dir", tmp_path / "logs")
            kwargs.setdefault(name, backend_options)
            monitor = Monitor([cls], strict=True, **kwargs)
            made.append(monitor)
            return monitor

        yield make
        for monitor in made:
            monitor.close()

    @pytest.fixture
    def settle(self, capabilities: Capabilities) -> Callable[[Monitor], None]:
        """``settle(monitor)``: flush, or close for a ``rows_readable_after = "close"`` backend."""

        def settle(monitor: Monitor) -> None:
            if capabilities.rows_readable_after == "close":
                monitor.close()
            else:
                monitor.flush()

        return settle

    @pytest.fixture
    def stored(self, read_rows: Callable[[RunInfo], Rows], settle: Callable[[Monitor], None]):
        """``stored(monitor)`` -> ``{tag: [(step, value), ...]}`` read back from the backend.

        Flushes (or closes, for ``rows_readable_after = "close"`` backends) first.
        """

        def stored(monitor: Monitor) -> dict[str, list[tuple[int, float]]]:
            settle(monitor)
            return self.by_tag(read_rows(monitor.run))

        return stored

    @staticmethod
    def by_tag(rows: Rows) -> dict[str, list[tuple[int, float]]]:
        """Group ``read_rows``'s rows per tag, checking each row's types."""
        by_tag: dict[str, list[tuple[int, float]]] = {}
        for row in rows:
            if not isinstance(row, Sequence) or len(row) != 3:
                pytest.fail(f"read_rows returned the row {row!r}: each row must be a tuple "
                            "(tag: str, step: int, value: float)", pytrace=False)
            tag, step, value = row
            if type(step) is not int:
                pytest.fail(f"read_rows returned step {step!r} ({type(step).__name__}) for tag "
                            f"{tag!r}: return steps as int, as monitor_write received them",
                            pytrace=False)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                pytest.fail(f"read_rows returned value {value!r} ({type(value).__name__}) for tag "
                            f"{tag!r} at step {step}: return values as float", pytrace=False)
            by_tag.setdefault(tag, []).append((step, float(value)))
        return by_tag

    def assert_stored(
        self, got: dict[str, list[tuple[int, float]]], want: dict[str, list[tuple[int, float]]],
        dtype: str, where: str = "",
    ) -> None:
        """Fail, saying expected vs stored and which hook to check, unless ``got == want``.

        ``got``/``want``: ``{tag: [(step, value), ...]}`` in storage / logging order; ``dtype``:
        the backend's ``value_dtype``; ``where``: a prefix naming the run, e.g. ``"rank 1: "``.
        """
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if want and not got:
            pytest.fail(f"{where}expected tags {_short(sorted(want))} (as logged), read_rows "
                        "returned no row at all: check that monitor_write stores the events, "
                        "that monitor_flush makes them readable (else declare "
                        "rows_readable_after = 'close'), and that read_rows reads this run's "
                        "storage (project, name, log_dir, rank)", pytrace=False)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"tags logged but not stored: {_short(missing)} (monitor_write must "
                             "store every event of the batch)")
            if extra:
                parts.append(f"tags stored but never logged: {_short(extra)} (read_rows must "
                             "return each tag as logged: undo any renaming or escaping your "
                             "storage needs)")
            pytest.fail(f"{where}expected tags {_short(sorted(want))} (as logged), stored "
                        f"{_short(sorted(got))}: " + "; ".join(parts), pytrace=False)
        for tag, points in want.items():
            want_steps = [s for s, _ in points]
            got_steps = [s for s, _ in got[tag]]
            if got_steps != want_steps:
                pytest.fail(f"{where}tag {tag!r}: expected steps {_short(want_steps)} (as "
                            f"logged), stored {_short(got_steps)}: "
                            f"{_step_hint(want_steps, got_steps)}", pytrace=False)
            for (step, stored_value), (_, logged) in zip(got[tag], points, strict=True):
                expected = _stored(logged, dtype)
                if not _same(stored_value, expected):
                    rounded = ", rounded to float32 as value_dtype says" if (
                        dtype == "float32" and expected != logged) else ""
                    pytest.fail(f"{where}tag {tag!r} at step {step}: expected value "
                                f"{expected!r} (as logged{rounded}), stored {stored_value!r}: "
                                f"{_value_hint(logged, stored_value, dtype)}", pytrace=False)

    @pytest.fixture
    def dtype(self, capabilities: Capabilities) -> str:
        return capabilities.value_dtype

    # The backend's shape ----------------------------------------------------------------------

    def test_hooks_are_marked_for_the_core(self, backend_class, capabilities):
        """A hook method without ``@hookimpl`` is never called; capabilities are valid values."""
        for hook in HOOKS:
            method = getattr(backend_class, hook, None)
            if callable(method) and getattr(method, _MARK, None) is None:
                pytest.fail(f"{backend_class.__qualname__}.{hook} has no @hookimpl marker, so "
                            "the core never calls it: decorate it with core_monitor.hookimpl",
                            pytrace=False)
        if not callable(getattr(backend_class, "monitor_write", None)):
            pytest.fail(f"{backend_class.__qualname__} has no monitor_write hook: it would store "
                        "nothing (see core_monitor.hookspecs.Backend)", pytrace=False)

    # The step contract ------------------------------------------------------------------------

    def test_explicit_steps_are_stored_exactly(self, make_monitor, stored, dtype):
        """The caller's steps, not the backend's own counter."""
        monitor = make_monitor()
        for step, loss in zip([0, 10, 20, 120], [0.3, 0.25, 0.2, 0.1], strict=True):
            monitor.log({"loss": loss}, step=step)
        self.assert_stored(
            stored(monitor), {"loss": [(0, 0.3), (10, 0.25), (20, 0.2), (120, 0.1)]}, dtype
        )

    def test_step_lower_than_previous_is_stored(self, make_monitor, stored, dtype):
        """5, then 3, then no step -> 6 (the largest step seen + 1)."""
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

    # Flush and close --------------------------------------------------------------------------

    def test_rows_are_readable_after_flush_while_run_is_open(
        self, capabilities, make_monitor, read_rows
    ):
        if capabilities.rows_readable_after == "close":
            pytest.skip("backend declares rows_readable_after = 'close'")
        monitor = make_monitor()
        for step, want in ((1, [("loss", 1)]), (2, [("loss", 1), ("loss", 2)])):
            monitor.log({"loss": 1 / step}, step=step)
            monitor.flush()
            got = [(t, s) for t, s, _ in read_rows(monitor.run)]
            if got != want:
                pytest.fail(f"after monitor_flush with the run still open, expected rows "
                            f"(tag, step) {want}, read_rows returned {got}: monitor_flush must "
                            "make every row written so far readable; if your storage cannot, "
                            "declare rows_readable_after = 'close'", pytrace=False)

    def test_close_is_idempotent(self, make_monitor, read_rows):
        monitor = make_monitor()
        monitor.log({"loss": 0.5}, step=1)
        monitor.close()
        monitor.close()
        got = [(t, s) for t, s, _ in read_rows(monitor.run)]
        if got != [("loss", 1)]:
            pytest.fail(f"after Monitor.close(), expected rows (tag, step) [('loss', 1)], "
                        f"read_rows returned {got}: monitor_close must flush what "
                        "monitor_write received", pytrace=False)
        assert monitor.failures == {}

    def test_close_without_writes(self, make_monitor, read_rows):
        monitor = make_monitor()
        monitor.close()
        got = read_rows(monitor.run)
        if got != []:
            pytest.fail(f"a run that logged nothing: expected read_rows to return [], got "
                        f"{_short(got)}: read_rows must read only this run's storage (project, "
                        "name, log_dir, rank) and return [] when it holds no row", pytrace=False)
        assert monitor.failures == {}

    def test_log_after_close_raises_and_stores_nothing(self, make_monitor, read_rows):
        monitor = make_monitor()
        monitor.log({"loss": 0.5}, step=1)
        monitor.close()
        with pytest.raises(RuntimeError):
            monitor.log({"loss": 0.25}, step=2)
        got = [(t, s) for t, s, _ in read_rows(monitor.run)]
        assert got == [("loss", 1)], f"expected rows (tag, step) [('loss', 1)], stored {got}"

    def test_no_hook_is_called_after_close(self, backend_class, make_monitor):
        """The core guarantees it, so a backend need not guard against it (proved here against
        this backend's hooks, through a subclass that records each call)."""
        calls: list[str] = []
        recorded = {hook: _recording(backend_class, hook, calls) for hook in HOOKS
                    if getattr(getattr(backend_class, hook, None), _MARK, None) is not None}
        recording = type(f"Recording{backend_class.__name__}", (backend_class,),
                         {"name": Monitor.backend_name(backend_class), **recorded})
        monitor = make_monitor(backend=recording)
        monitor.log({"loss": 0.5}, step=1)
        with warnings.catch_warnings():  # a backend without monitor_config: one BackendWarning
            warnings.simplefilter("ignore", BackendWarning)
            monitor.log_config({"lr": 0.1})
        monitor.close()
        at_close = len(calls)
        monitor.flush()
        monitor.close()
        for call in (lambda: monitor.log({"loss": 1.0}), lambda: monitor.log_config({"a": 1}),
                     lambda: monitor.write_events([("loss", 1.0, 2)])):
            with pytest.raises(RuntimeError):
                call()
        after = calls[at_close:]
        if after:
            pytest.fail(f"hooks called after Monitor.close(): {after}; expected none: the "
                        "installed core-monitor broke its guarantee (report it); a backend "
                        "should still tolerate a second monitor_close", pytrace=False)
        closes = calls.count("monitor_close")
        if "monitor_close" in recorded and closes != 1:
            pytest.fail(f"monitor_close was called {closes} times by one Monitor, expected once",
                        pytrace=False)
        assert calls[:1] == ["monitor_write"], f"expected monitor_write first, the calls: {calls}"

    def test_core_runs_a_backend_with_only_monitor_write(self, tmp_path):
        """Every hook but ``monitor_write`` is optional: the installed core runs such a backend
        (this checks the core, not the backend under test; it is here so that every plugin's
        suite proves the core it runs on)."""
        rows: Rows = []

        class WriteOnly:
            name = "write-only"

            def __init__(self, run: RunInfo) -> None:
                self.run = run

            @hookimpl
            def monitor_write(self, events: Any) -> None:
                rows.extend((e.tag, e.step, e.value) for e in events)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            monitor = Monitor([WriteOnly], project="contract", name="write-only",
                              log_dir=tmp_path / "write-only", strict=True)
            monitor.log({"loss": 0.5}, step=3)
            monitor.flush()
            monitor.log_config({"lr": 0.1})
            monitor.log_config({"lr": 0.2})
            monitor.close()
        assert rows == [("loss", 3, 0.5)], f"expected [('loss', 3, 0.5)] written, got {rows}"
        skipped = [w for w in caught if issubclass(w.category, BackendWarning)]
        messages = [str(w.message) for w in caught]
        assert len(skipped) == 1 and "monitor_config" in str(skipped[0].message), (
            f"expected one BackendWarning naming monitor_config, got {messages}"
        )
        assert monitor.failures == {}

    # Runs kept apart --------------------------------------------------------------------------

    def test_two_runs_in_one_process_are_kept_apart(self, make_monitor, stored, dtype):
        first = make_monitor(name="first")
        first.log({"loss": 1.0}, step=1)
        first.close()
        second = make_monitor(name="second")
        second.log({"loss": 2.0}, step=1)
        self.assert_stored(stored(second), {"loss": [(1, 2.0)]}, dtype, "run 'second': ")
        self.assert_stored(stored(first), {"loss": [(1, 1.0)]}, dtype, "run 'first': ")

    def test_rank_above_zero_writes_a_run_of_its_own(
        self, make_monitor, read_rows, monkeypatch, dtype
    ):
        """``rank_zero_only=False`` on rank 1 (``RANK=1``): its rows go to a run of its own,
        which ``read_rows`` reads for the rank-1 ``RunInfo``; rank 0's run holds only rank 0's."""
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "2")
        ranked = make_monitor(name="ddp", rank_zero_only=False)
        monkeypatch.delenv("RANK")
        monkeypatch.delenv("WORLD_SIZE")
        assert ranked.run.rank == 1, f"RANK=1 but the Monitor's run has rank {ranked.run.rank}"
        ranked.log({"loss": 1.0}, step=0)
        ranked.log({"loss": 1.5}, step=1)
        ranked.close()
        chief = make_monitor(name="ddp")
        chief.log({"loss": 2.0}, step=0)
        chief.close()
        hint = ("; on run.rank > 0 the backend must write a run of its own (e.g. named "
                "'<name>-rank<rank>') and read_rows(run) must read that run for run.rank > 0")
        for run, want in ((ranked.run, [(0, 1.0), (1, 1.5)]), (chief.run, [(0, 2.0)])):
            got = self.by_tag(read_rows(run))
            if got.get("loss") != [(s, _stored(v, dtype)) for s, v in want] or set(got) != {"loss"}:
                pytest.fail(f"rank {run.rank} of run {run.name!r}: expected (step, value) {want} "
                            f"for tag 'loss', read_rows returned {got}{hint}", pytrace=False)

    # The config -------------------------------------------------------------------------------

    @pytest.fixture
    def stored_config(self, capabilities, read_config, settle):
        """``stored_config(monitor)``: the config read back after flush (or close); skips the
        test for a backend that stores none or a test class without ``read_config``."""
        if not capabilities.stores_config:
            pytest.skip("the backend declares stores_config = False (set stores_config = True "
                        "when it stores run.config, and supply a read_config fixture)")
        if read_config is None:
            pytest.skip("the backend declares stores_config = True but the test class has no "
                        "read_config fixture: return a function RunInfo -> dict of the stored "
                        "config")

        def stored_config(monitor: Monitor) -> Mapping[str, Any]:
            settle(monitor)
            return read_config(monitor.run)

        return stored_config

    def assert_config(self, got: Mapping[str, Any], want: Mapping[str, Any],
                      late: Mapping[str, Any]) -> None:
        """Fail naming the key, expected vs stored value and the hook, unless ``got`` holds
        ``want`` (extra keys a tracker adds are allowed). ``late``: the keys given through
        ``Monitor.log_config``."""
        if not isinstance(got, Mapping):
            pytest.fail(f"read_config returned {got!r}: return a dict of the stored config",
                        pytrace=False)
        for key, value in want.items():
            if key in late:
                source = "given late through Monitor.log_config"
                fix = ("monitor_config must merge the mapping it receives into the stored "
                       "config, a key given again taking the new value")
            else:
                source = "given at start in RunInfo.config"
                fix = "store run.config when the backend starts (in __init__)"
            if key not in got:
                pytest.fail(f"config key {key!r}: expected {value!r} ({source}), not stored "
                            f"(read_config returned the keys {_short(sorted(got))}): {fix}; "
                            "read_config must undo the storage's key escaping", pytrace=False)
            if not _config_matches(value, got[key]):
                pytest.fail(f"config key {key!r}: expected {value!r} ({source}), stored "
                            f"{got[key]!r}: {fix}", pytrace=False)

    def test_config_given_at_start_is_stored(self, make_monitor, stored_config):
        config = {"lr": 0.001, "epochs": 3, "optimizer": {"name": "adam"}, "use_amp": True}
        monitor = make_monitor(config=config)
        monitor.log({"loss": 0.5}, step=0)
        want = dict(monitor.run.config)
        assert want == {"lr": 0.001, "epochs": 3, "optimizer.name": "adam", "use_amp": True}
        self.assert_config(stored_config(monitor), want, late={})

    def test_config_given_late_is_merged(self, backend_class, make_monitor, stored_config):
        if getattr(getattr(backend_class, "monitor_config", None), _MARK, None) is None:
            pytest.fail(f"{backend_class.__qualname__} declares stores_config = True but has no "
                        "@hookimpl monitor_config: implement it to store config given late "
                        "(Monitor.log_config)", pytrace=False)
        monitor = make_monitor(config={"lr": 0.001, "epochs": 3})
        monitor.log({"loss": 0.5}, step=0)
        late = {"lr": 0.002, "batch_size": 32}
        monitor.log_config(late)
        assert dict(monitor.run.config) == {"lr": 0.002, "epochs": 3, "batch_size": 32}
        self.assert_config(stored_config(monitor), monitor.run.config, late=late)
