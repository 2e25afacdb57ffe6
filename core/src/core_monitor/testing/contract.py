"""``MonitorContract``: the fixtures a plugin supplies, and the assertions every check uses."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from ..hookspecs import Capabilities
from ..monitor import Monitor
from ..run import RunInfo
from ._media import MediaChecks
from ._messages import same, short, step_hint, stored_as, value_hint
from ._runs import HOOKS, MARK, RunChecks
from ._steps import StepChecks
from .factory import MonitorFactory

Rows = list[tuple[str, int, float]]


class MonitorContract(StepChecks, RunChecks, MediaChecks):
    """Abstract test class: subclass it with fixtures ``backend_class`` and ``read_rows`` (and
    ``read_config`` for a backend with ``stores_config = True``, ``read_media`` for one that
    declares ``media_kinds``).

    The checks themselves live in ``StepChecks`` (the step and value contract), ``RunChecks``
    (flush, close, runs and ranks, config, imports) and ``MediaChecks`` (images, histograms,
    text); this class holds the fixtures and the assertions they share."""

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
    def read_media(self) -> Callable[[RunInfo], list[tuple[str, int, Any]]] | None:
        """Override with a function ``RunInfo -> [(tag, step, value)]``, ``value`` a
        ``core_monitor.Image``/``Histogram``/``Text`` rebuilt from your storage (an image's
        ``array`` as stored, ``(H, W, C)``; a histogram's ``edges`` and ``counts``), in storage
        order; ``None`` (the default) is only right for a backend without ``media_kinds``."""
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
        """Real monitors around the backend only (``strict=True``); closed at teardown.

        ``make_monitor(backend=cls, **monitor_kwargs)`` uses ``cls`` instead of the backend
        class (a subclass the kit made); other keywords go to ``Monitor``. Not the
        ``monitor_factory`` fixture: a plugin's tests may define their own of that name.
        """
        factory = MonitorFactory(project="contract", log_dir=tmp_path / "logs", strict=True)

        def make(backend: type | None = None, **kwargs: Any) -> Monitor:
            cls = backend or backend_class
            kwargs.setdefault(Monitor.backend_name(cls), backend_options)
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
            if callable(method) and getattr(method, MARK, None) is None:
                pytest.fail(f"{backend_class.__qualname__}.{hook} has no @hookimpl marker, so "
                            "the core never calls it: decorate it with core_monitor.hookimpl",
                            pytrace=False)
        if not callable(getattr(backend_class, "monitor_write", None)):
            pytest.fail(f"{backend_class.__qualname__} has no monitor_write hook: it would store "
                        "nothing (see core_monitor.hookspecs.Backend)", pytrace=False)
