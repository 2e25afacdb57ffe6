"""Flush, close, runs kept apart, ranks, config and imports: what a backend's lifecycle owes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from ..capabilities import Capabilities
from ..errors import BackendWarning, ConfigError
from ..hookspecs import HOOKS, hookimpl, hookimpl_options
from ..monitor import Monitor
from ..options import option_types, unresolved_options
from ..run import RunInfo
from ._imports import CORE_DISTRIBUTION, requirement_modules
from ._messages import config_matches, short, stored_as


def marked(backend_class: type, hook: str) -> bool:
    """Whether ``backend_class`` has ``hook`` marked with ``@hookimpl`` (what the core calls)."""
    return hookimpl_options(backend_class, hook) is not None


def recording_hook(backend_class: type, hook: str, calls: list[str]) -> Callable[..., Any]:
    """A hook implementation that notes ``hook`` in ``calls``, then runs ``backend_class``'s.

    It takes the parameters ``backend_class``'s own implementation takes (pluggy reads them
    from its signature, which ``functools.wraps`` hands on), so it works for any hook of
    ``hookspecs.HOOKS``."""
    parent = getattr(backend_class, hook)

    @functools.wraps(parent, updated=())  # name and signature; not the parent's marker
    def record(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(hook)
        return parent(self, *args, **kwargs)

    return hookimpl(record)


def kept(capabilities: Capabilities, rows: list[Any], one_tag: bool = False) -> list[Any]:
    """``rows`` as the backend keeps them: all of them, or for a ``history="latest"`` backend
    the last row of each tag. A row is ``(tag, step, ...)``, or with ``one_tag`` ``(step,
    value)`` of a single tag."""
    if capabilities.history != "latest":
        return rows
    last = {None if one_tag else row[0]: i for i, row in enumerate(rows)}
    return [row for i, row in enumerate(rows) if i in last.values()]


class RunChecks:
    """Checks of flush, close, separate runs, ranks, config and imports; mixed into
    ``MonitorContract`` (which supplies the fixtures and assertions they use)."""

    _given: Callable[[str], Any]  # MonitorContract's: what the test class supplied

    # Writer processes (users' default dispatch) ----------------------------------------------

    def test_the_backend_runs_in_a_writer_process(self, backend_class, make_monitor, read_rows,
                                                  capabilities):
        """Users' default, ``dispatch="process"``: the class is constructed in a fresh
        interpreter from its module path, with the ``RunInfo`` and options pickled; rows it
        writes there are read back here. (The other checks use ``dispatch`` as supplied; a
        test class that supplies ``dispatch = "thread"`` says its backend keeps its rows in
        this process, and skips this check.)"""
        if self._given("dispatch") == "thread":
            pytest.skip("the test class supplies dispatch = 'thread': its backend runs in this "
                        "process only")
        if requirement_modules(backend_class.__module__) is None:
            pytest.skip(f"{backend_class.__module__!r} is not provided by an installed "
                        "distribution, so a writer process may not import it (it runs in a "
                        "worker thread): install the plugin to check this")
        monitor = make_monitor(dispatch="process")
        if monitor.backends != [Monitor.backend_name(backend_class)]:
            pytest.fail(f"the backend did not start in a writer process (started: "
                        f"{monitor.backends}, failures: {monitor.failures})", pytrace=False)
        threads = getattr(monitor._dispatch, "threads", None)
        if threads is not None and threads.backends:
            pytest.fail(f"{backend_class.__qualname__} ran in a worker thread, not a writer "
                        "process: its class must be importable by module path from an "
                        "installed distribution, and its options must pickle (see the INFO "
                        "line on the core_monitor logger)", pytrace=False)
        for step in (3, 1, 2):
            monitor.log({"loss": step / 4}, step=step)
        monitor.close()
        got = [(t, s) for t, s, _ in read_rows(monitor.run)]
        want = kept(capabilities, [("loss", 3), ("loss", 1), ("loss", 2)])
        if got != want:
            pytest.fail(f"written in a writer process, expected rows (tag, step) {want}, "
                        f"read_rows returned {got}", pytrace=False)

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
            want = kept(capabilities, want)
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
                        f"{short(got)}: read_rows must read only this run's storage (project, "
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
        recorded = {hook: recording_hook(backend_class, hook, calls) for hook in HOOKS
                    if marked(backend_class, hook)}
        recording = type(f"Recording{backend_class.__name__}", (backend_class,),
                         {"name": Monitor.backend_name(backend_class), **recorded})
        monitor = make_monitor(backend=recording, dispatch="sync")  # calls: in-process
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
                        "installed core-monitor broke its guarantee (report it): a backend "
                        "may rely on monitor_close being the last call, once", pytrace=False)
        closes = calls.count("monitor_close")
        if "monitor_close" in recorded and closes != 1:
            pytest.fail(f"monitor_close was called {closes} times by one Monitor, expected once",
                        pytrace=False)
        assert calls[:1] == ["monitor_write"], f"expected monitor_write first, the calls: {calls}"

    def test_core_runs_a_backend_with_only_monitor_write(self, tmp_path):
        """Every hook but ``monitor_write`` is optional: the installed core runs such a backend
        (this checks the core, not the backend under test; it is here so that every plugin's
        suite proves the core it runs on)."""
        rows: list[tuple[str, int, float]] = []

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
                              log_dir=tmp_path / "write-only", strict=True,
                              dispatch="sync")  # rows: a list in this process
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
        self, make_monitor, read_rows, monkeypatch, dtype, capabilities
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
                "run.ranked_name, '<name>-rank<rank>') and read_rows(run) must read that run "
                "for run.rank > 0")
        for run, want in ((ranked.run, [(0, 1.0), (1, 1.5)]), (chief.run, [(0, 2.0)])):
            got = self.by_tag(read_rows(run))
            want = kept(capabilities, want, one_tag=True)
            expected = [(s, stored_as(v, dtype)) for s, v in want]
            if got.get("loss") != expected or set(got) != {"loss"}:
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
                            f"(read_config returned the keys {short(sorted(got))}): {fix}; "
                            "read_config must undo the storage's key escaping", pytrace=False)
            if not config_matches(value, got[key]):
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
        if not marked(backend_class, "monitor_config"):
            pytest.fail(f"{backend_class.__qualname__} declares stores_config = True but has no "
                        "@hookimpl monitor_config: implement it to store config given late "
                        "(Monitor.log_config)", pytrace=False)
        monitor = make_monitor(config={"lr": 0.001, "epochs": 3})
        monitor.log({"loss": 0.5}, step=0)
        late = {"lr": 0.002, "batch_size": 32}
        monitor.log_config(late)
        assert dict(monitor.run.config) == {"lr": 0.002, "epochs": 3, "batch_size": 32}
        self.assert_config(stored_config(monitor), monitor.run.config, late=late)

    def test_option_annotations_resolve(self, backend_class):
        """The core checks each option's type from the annotation of ``__init__`` before the
        backend is constructed (``core_monitor.options``); an annotation naming a type imported
        only under ``TYPE_CHECKING`` cannot be evaluated, so that option would go unchecked."""
        unresolved = unresolved_options(backend_class)
        assert not unresolved, (
            f"{backend_class.__qualname__}.__init__ has option annotations the core cannot "
            f"evaluate: {unresolved}; import the types they name at module level")

    def test_an_ill_typed_option_is_refused_naming_it(self, backend_class, make_monitor):
        """A value of the wrong type for a ``bool`` option (``quiet="yes"``) is a
        ``ConfigError`` from the core naming the backend, the option and the value, raised at
        ``Monitor()`` before the backend is constructed."""
        flags = [option for option, (hint, _) in option_types(backend_class).items()
                 if hint is bool]
        if not flags:
            pytest.skip("the backend has no option annotated bool")
        name = Monitor.backend_name(backend_class)
        with pytest.raises(ConfigError) as raised:
            make_monitor(**{name: {flags[0]: "yes"}})
        message = str(raised.value)
        for part in (name, flags[0], "'yes'"):
            assert part in message, f"the ConfigError does not name {part!r}: {message}"

    def test_importing_the_backend_module_imports_no_sdk(self, backend_class):
        """A rank that writes nothing imports the backend's module (the core checks options
        from the class on every rank) but must not import its SDK: the modules of the
        distribution's requirements (other than core-monitor) stay out of ``sys.modules``
        after ``import <module>`` in a fresh interpreter. Import them in the constructor."""
        module = backend_class.__module__
        sdk_modules = requirement_modules(module)
        if sdk_modules is None:
            pytest.skip(f"{module!r} is not provided by an installed distribution")
        if not sdk_modules:
            pytest.skip(f"the distribution providing {module!r} requires nothing besides "
                        f"{CORE_DISTRIBUTION}")
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
