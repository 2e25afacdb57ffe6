"""``MonitorContract``: what a plugin supplies (class attributes or fixtures), and the assertions
every check uses."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from ..hookspecs import HOOKS, Capabilities
from ..monitor import Monitor
from ..run import RunInfo
from ._crash import CrashChecks
from ._media import MediaChecks
from ._messages import same, short, step_hint, stored_as, value_hint
from ._resume import ResumeChecks
from ._runs import RunChecks, marked
from ._steps import StepChecks
from .factory import MonitorFactory

Rows = list[tuple[str, int, float]]


#: What a plugin's test class supplies, each as a class attribute (or as a pytest fixture of
#: that name), with the message the kit fails with when a needed one is missing.
SUPPLIED: dict[str, str | None] = {
    "backend_class": "set the class attribute backend_class = YourMonitor (the class your "
                     "entry point names)",
    "read_rows": "set the class attribute read_rows = staticmethod(your_read_rows), a function "
                 "RunInfo -> [(tag, step, value)] read from your storage",
    "read_config": None,
    "read_media": None,
    "read_crash": None,
    "backend_options": None,
    "dispatch": None,
}
#: Callables a supplied class attribute may hold, as opposed to a pytest fixture of the same
#: name (a fixture is an object pytest made, or on pytest < 8.4 a function taking ``self``).
_VALUES = (staticmethod, type, functools.partial)


def _is_value(raw: Any) -> bool:
    if not callable(raw) or isinstance(raw, _VALUES):
        return True
    if isinstance(raw, types.FunctionType):  # read_rows = my_plugin.read_rows, no staticmethod
        return next(iter(inspect.signature(raw).parameters), None) != "self"
    return False


class MonitorContract(StepChecks, RunChecks, MediaChecks, ResumeChecks, CrashChecks):
    """Abstract test class: subclass it and say what to test with class attributes::

        class TestMyBackend(MonitorContract):
            backend_class = MyMonitor                      # the class your entry point names
            read_rows = staticmethod(my_monitor.read_rows)
            read_config = staticmethod(my_monitor.read_config)   # with stores_config = True
            read_media = staticmethod(my_monitor.read_media)     # with media_kinds declared
            read_crash = staticmethod(my_monitor.read_crash)     # how a run ended
            backend_options = {"flush_secs": 1}            # optional: the backend's options
            dispatch = "process"   # optional: the kit's monitors run the backend on a
                                   # worker thread ("thread", the default), or "process"/"sync"

    Each of these may instead be a pytest fixture of the same name, which is how a value that
    depends on another fixture is given (a reader bound to a test server's address, say).

    The checks themselves live in ``StepChecks`` (the step and value contract), ``RunChecks``
    (flush, close, runs and ranks, config, imports), ``MediaChecks`` (images, histograms,
    text) and ``CrashChecks`` (how a run ended: SIGKILL, SIGTERM, an exception in ``with``);
    this class holds the fixtures and the assertions they share.

    Raises:
        TypeError: when the subclass is defined, ``backend_options`` is neither a mapping nor a
            fixture.
    """

    #: The values given as class attributes, ``{name: value}`` (filled per subclass).
    _supplied: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Turn each class attribute of ``SUPPLIED`` into the kit's fixture of that name.

        A class attribute would hide the kit's fixture from pytest, so its value is kept in
        ``_supplied`` and the fixture put back; a fixture the subclass defines stays its own.
        """
        super().__init_subclass__(**kwargs)
        supplied = dict(cls._supplied)  # what a parent test class gave
        for name in SUPPLIED:
            owner = next(k for k in cls.__mro__ if name in vars(k))
            raw = vars(owner)[name]
            if owner is MonitorContract or raw is vars(MonitorContract)[name]:
                continue  # the kit's own fixture: the value, if any, came with ``_supplied``
            if not _is_value(raw):
                supplied.pop(name, None)  # a fixture of the subclass's own
                continue
            value = raw.__func__ if isinstance(raw, staticmethod) else raw
            if name == "backend_options" and not isinstance(value, Mapping):
                raise TypeError(f"{cls.__qualname__}.backend_options = {value!r}: give a dict "
                                "of the backend's keyword options, or a fixture returning one")
            supplied[name] = value
            setattr(cls, name, vars(MonitorContract)[name])
        cls._supplied = supplied

    def _given(self, name: str) -> Any:
        if name in self._supplied:
            return self._supplied[name]
        missing = SUPPLIED[name]
        if missing is not None:
            pytest.fail(f"{type(self).__qualname__} does not say what to test: {missing} (or "
                        f"define a fixture {name})", pytrace=False)
        return {} if name == "backend_options" else None

    if TYPE_CHECKING:
        # What a subclass supplies: a class attribute (``backend_class = MyMonitor``,
        # ``read_rows = staticmethod(read_rows)``) or a fixture of that name; either is right,
        # so a type checker sees these loosely. At run time they are the kit's fixtures below.
        backend_class: Any
        read_rows: Any
        read_config: Any
        read_media: Any
        read_crash: Any
        backend_options: Any
        dispatch: Any
    else:
        @pytest.fixture
        def backend_class(self) -> type:
            """The backend class under test (class attribute or fixture ``backend_class``)."""
            return self._given("backend_class")

        @pytest.fixture
        def read_rows(self) -> Callable[[RunInfo], Rows]:
            """``RunInfo -> [(tag, step, value)]``: the run's scalars read back from the backend's
            own storage, in storage order."""
            return self._given("read_rows")

        @pytest.fixture
        def read_config(self) -> Callable[[RunInfo], Mapping[str, Any]] | None:
            """A function ``RunInfo -> dict`` (the stored config, the plugin's key escaping undone,
            ``{}`` when none); ``None`` (the default) skips the config checks."""
            return self._given("read_config")

        @pytest.fixture
        def read_media(self) -> Callable[[RunInfo], list[tuple[str, int, Any]]] | None:
            """A function ``RunInfo -> [(tag, step, value)]``, ``value`` a
            ``core_monitor.Image``/``Histogram``/``Text`` rebuilt from your storage (an image's
            ``array`` as stored, ``(H, W, C)``; a histogram's ``edges`` and ``counts``), in storage
            order; ``None`` (the default) is only right for a backend without ``media_kinds``."""
            return self._given("read_media")

        @pytest.fixture
        def read_crash(self) -> Callable[[RunInfo], str | None] | None:
            """A function ``RunInfo -> str | None``: the reason the run crashed, as
            ``monitor_crash`` got it (``""`` from a tracker that keeps a failed state but no
            text), ``None`` for a run that did not (``core_monitor.readers``); ``None`` (the
            default) skips the crash checks."""
            return self._given("read_crash")

        @pytest.fixture
        def backend_options(self) -> dict[str, Any]:
            """The backend's keyword options for every monitor the kit builds (default none)."""
            return dict(self._given("backend_options"))

        @pytest.fixture
        def dispatch(self) -> str:
            """The ``Monitor(dispatch=...)`` of the kit's monitors: ``"thread"`` by default (the
            SDK is imported once per test process, not once per monitor), ``"process"`` to run
            every check in writer processes. ``test_the_backend_runs_in_a_writer_process``
            checks what the default mode of users adds, whatever this says."""
            return self._given("dispatch") or "thread"

    @pytest.fixture
    def capabilities(self, backend_class: type) -> Capabilities:
        """The class attributes the kit reads (``hookspecs.Capabilities``), checked."""
        try:
            return Capabilities.of(backend_class)
        except TypeError as error:
            pytest.fail(str(error), pytrace=False)

    @pytest.fixture
    def make_monitor(
        self, backend_class: type, backend_options: dict[str, Any], dispatch: str, tmp_path: Any
    ) -> Iterator[Callable[..., Monitor]]:
        """Real monitors around the backend only (``strict=True``); closed at teardown.

        ``make_monitor(backend=cls, **monitor_kwargs)`` uses ``cls`` instead of the backend
        class (a subclass the kit made); other keywords go to ``Monitor``. Not the
        ``monitor_factory`` fixture: a plugin's tests may define their own of that name.
        """
        factory = MonitorFactory(project="contract", log_dir=tmp_path / "logs", strict=True)

        def make(backend: type | None = None, **kwargs: Any) -> Monitor:
            cls = backend or backend_class
            kwargs.setdefault(Monitor.backend_name(cls), backend_options)
            kwargs.setdefault("dispatch", dispatch)
            return factory([cls], **kwargs)

        yield make
        factory.close()

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
    def stored(self, read_rows: Callable[[RunInfo], Rows], settle: Callable[[Monitor], None],
               capabilities: Capabilities):
        """``stored(monitor)`` -> ``{tag: [(step, value), ...]}`` read back from the backend.

        Flushes (or closes, for ``rows_readable_after = "close"`` backends) first. For a
        ``history="latest"`` backend, ``assert_stored`` then expects each tag's last point only.
        """
        self._latest_only = capabilities.history == "latest"

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
        if getattr(self, "_latest_only", False):  # Capabilities.history == "latest"
            want = {tag: points[-1:] for tag, points in want.items()}
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if want and not got:
            pytest.fail(f"{where}expected tags {short(sorted(want))} (as logged), read_rows "
                        "returned no row at all: check that monitor_write stores the events, "
                        "that monitor_flush makes them readable (else declare "
                        "rows_readable_after = 'close'), and that read_rows reads this run's "
                        "storage (project, name, log_dir, rank)", pytrace=False)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"tags logged but not stored: {short(missing)} (monitor_write must "
                             "store every event of the batch)")
            if extra:
                parts.append(f"tags stored but never logged: {short(extra)} (read_rows must "
                             "return each tag as logged: undo any renaming or escaping your "
                             "storage needs)")
            pytest.fail(f"{where}expected tags {short(sorted(want))} (as logged), stored "
                        f"{short(sorted(got))}: " + "; ".join(parts), pytrace=False)
        for tag, points in want.items():
            want_steps = [s for s, _ in points]
            got_steps = [s for s, _ in got[tag]]
            if got_steps != want_steps:
                pytest.fail(f"{where}tag {tag!r}: expected steps {short(want_steps)} (as "
                            f"logged), stored {short(got_steps)}: "
                            f"{step_hint(want_steps, got_steps)}", pytrace=False)
            for (step, stored_value), (_, logged) in zip(got[tag], points, strict=True):
                expected = stored_as(logged, dtype)
                if not same(stored_value, expected):
                    rounded = ", rounded to float32 as value_dtype says" if (
                        dtype == "float32" and expected != logged) else ""
                    pytest.fail(f"{where}tag {tag!r} at step {step}: expected value "
                                f"{expected!r} (as logged{rounded}), stored {stored_value!r}: "
                                f"{value_hint(logged, stored_value, dtype)}", pytrace=False)

    @pytest.fixture
    def dtype(self, capabilities: Capabilities) -> str:
        return capabilities.value_dtype

    # The backend's shape ----------------------------------------------------------------------

    def test_hooks_are_marked_for_the_core(self, backend_class, capabilities):
        """A hook method without ``@hookimpl`` is never called; capabilities are valid values."""
        for hook in HOOKS:
            method = getattr(backend_class, hook, None)
            if callable(method) and not marked(backend_class, hook):
                pytest.fail(f"{backend_class.__qualname__}.{hook} has no @hookimpl marker, so "
                            "the core never calls it: decorate it with core_monitor.hookimpl",
                            pytrace=False)
        if not callable(getattr(backend_class, "monitor_write", None)):
            pytest.fail(f"{backend_class.__qualname__} has no monitor_write hook: it would store "
                        "nothing (see core_monitor.hookspecs.Backend)", pytrace=False)
