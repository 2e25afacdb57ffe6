"""``Monitor``: step assignment, all-or-nothing batches, isolation of failing backends, options,
ranks. Storage is read back from the JSON-lines test backend (``jsonl``), installed as a wheel."""

from __future__ import annotations

import math
import re
from typing import ClassVar

import numpy as np
import pytest
from jsonl_monitor import read_config, read_rows

from core_monitor import BackendWarning, ConfigError, hookimpl
from core_monitor.events import rows_by_step


class Recorder:
    """A backend written for these tests: keeps every call in memory."""

    name = "recorder"

    def __init__(self, run, *, label: str = "") -> None:
        self.run = run
        self.label = label
        self.events = []
        self.calls = []
        Recorder.instances.append(self)

    instances: ClassVar[list] = []

    @hookimpl
    def monitor_write(self, events):
        self.calls.append("write")
        self.events.extend(events)

    @hookimpl
    def monitor_flush(self):
        self.calls.append("flush")

    @hookimpl
    def monitor_close(self):
        self.calls.append("close")


class Failing:
    """A backend whose SDK changed under it: every hook raises ``TypeError``."""

    name = "failing"

    @hookimpl
    def monitor_write(self, events):
        raise TypeError("log() got an unexpected keyword argument 'step'")

    @hookimpl
    def monitor_flush(self):
        raise TypeError("flush() broke too")

    @hookimpl
    def monitor_close(self):
        raise TypeError("close() broke too")

    def __init__(self, run) -> None:
        self.run = run


@pytest.fixture(autouse=True)
def _fresh_recorders():
    Recorder.instances.clear()


def steps_stored(monitor):
    monitor.flush()
    return [(tag, step) for tag, step, _ in read_rows(monitor.run)]


def test_explicit_steps_reach_the_backend_unchanged(make):
    """The caller's steps reach the backend unchanged, not renumbered."""
    monitor = make()
    for step in (0, 10, 20, 120):
        monitor.log({"loss": 0.3}, step=step)
    assert steps_stored(monitor) == [("loss", 0), ("loss", 10), ("loss", 20), ("loss", 120)]


def test_step_lower_than_previous_is_stored_and_next_auto_step_is_max_plus_one(make):
    """A lower step is stored as given; the next automatic step is the largest + 1."""
    monitor = make()
    assert monitor.log({"loss": 1.0}, step=5) == 5
    assert monitor.log({"loss": 1.0}, step=3) == 3
    assert monitor.log({"loss": 1.0}) == 6
    assert steps_stored(monitor) == [("loss", 5), ("loss", 3), ("loss", 6)]


def test_numpy_integer_step_arrives_as_python_int(make):
    monitor = make([Recorder])
    monitor.log({"loss": 1.0}, step=np.int64(42))
    monitor.flush()  # background dispatch: the write happens on the backend's thread
    (event,) = Recorder.instances[0].events
    assert type(event.step) is int
    assert event.step == 42


def test_every_backend_sees_the_same_assigned_step(make):
    monitor = make(["jsonl", Recorder])
    monitor.log({"a": 1.0})
    monitor.log({"a": 2.0}, step=9)
    monitor.log({"a": 3.0})
    stored = steps_stored(monitor)  # flushes
    recorded = [(e.tag, e.step) for e in Recorder.instances[0].events]
    assert recorded == stored == [("a", 0), ("a", 9), ("a", 10)]


def test_write_events_takes_deepspeed_tuples_and_none_means_next_step(make):
    monitor = make()
    monitor.log({"x": 0.0}, step=4)
    monitor.write_events([("Train/loss", 0.5, 100), ("Train/lr", 0.1, None)])
    monitor.write_events([("Train/loss", 0.25, None)])
    assert steps_stored(monitor) == [("x", 4), ("Train/loss", 100), ("Train/lr", 5),
                                     ("Train/loss", 101)]


@pytest.mark.parametrize("step", [True, 1.5, -1, 2**63, "3"])
def test_bad_step_raises_before_anything_is_written(make, step):
    monitor = make()
    monitor.log({"loss": 1.0}, step=1)
    with pytest.raises((TypeError, ValueError), match="step"):
        monitor.log({"loss": 2.0}, step=step)
    assert steps_stored(monitor) == [("loss", 1)]


def test_numpy_and_0d_values_are_stored_as_floats_and_a_string_rejects_the_whole_call(make):
    """numpy scalars and 0-d arrays become floats; one bad value rejects the whole call."""
    monitor = make()
    monitor.log({"ok": 1.0}, step=0)
    scalars = {"f32": np.float32(0.5), "i64": np.int64(3), "zero_d": np.array(2.5)}
    with pytest.raises(TypeError, match="'name' has a value of type str"):
        monitor.log({**scalars, "name": "resnet"}, step=1)
    monitor.log(scalars, step=2)
    monitor.flush()
    rows = read_rows(monitor.run)
    assert rows == [("ok", 0, 1.0), ("f32", 2, 0.5), ("i64", 2, 3.0), ("zero_d", 2, 2.5)]
    assert all(type(value) is float for _, _, value in rows)


def test_a_rejected_call_does_not_advance_the_auto_step(make):
    monitor = make()
    with pytest.raises(TypeError):
        monitor.log({"loss": None}, step=50)
    assert monitor.log({"loss": 1.0}) == 0


def test_write_events_rejects_malformed_tuples_before_writing(make):
    monitor = make()
    with pytest.raises(TypeError, match="not a \\(tag, value, step\\) tuple"):
        monitor.write_events([("a", 1.0, 1), ("b", 2.0)])
    with pytest.raises(TypeError, match="'b' has a value of type NoneType"):
        monitor.write_events([("a", 1.0, 1), ("b", None, 1)])
    assert steps_stored(monitor) == []


def test_nan_and_infinities_are_stored(make):
    """NaN and +/-inf are stored as such."""
    monitor = make()
    monitor.log({"a": math.nan, "b": math.inf, "c": -math.inf}, step=0)
    monitor.flush()
    values = {tag: value for tag, _, value in read_rows(monitor.run)}
    assert math.isnan(values["a"]) and values["b"] == math.inf and values["c"] == -math.inf


def test_a_failing_backend_does_not_stop_the_healthy_one(make):
    """One report naming the failing backend; every point reaches the healthy backend.

    In background mode the failure happens on the backend's thread and is reported on the
    caller's at its next call (here the flush)."""
    monitor = make(["jsonl", Failing, Recorder])
    with pytest.warns(BackendWarning, match="backend 'failing' failed in monitor_write") as seen:
        for step in range(5):
            monitor.log({"loss": float(step)}, step=step)
        monitor.flush()
    assert len(seen) == 1
    assert monitor.failures == {"failing": 6}  # 5 writes and the flush
    assert [s for _, s in steps_stored(monitor)] == [0, 1, 2, 3, 4]
    assert [e.step for e in Recorder.instances[0].events] == [0, 1, 2, 3, 4]


def test_flush_and_close_reach_every_backend_when_one_fails(make):
    monitor = make([Recorder, Failing, "jsonl"])
    with pytest.warns(BackendWarning, match="'failing' failed in monitor_write"):
        monitor.log({"loss": 1.0}, step=1)
        monitor.flush()
    monitor.close()
    assert Recorder.instances[0].calls == ["write", "flush", "flush", "close"]
    assert monitor.failures == {"failing": 4}  # write, flush, flush at close, close
    assert [(t, s) for t, s, _ in read_rows(monitor.run)] == [("loss", 1)]


def test_strict_mode_raises_after_the_other_backends_got_the_call(make):
    """Sync dispatch: the failing call itself raises (background: tests/core/test_dispatch.py)."""
    monitor = make([Failing, Recorder], strict=True, dispatch="sync")
    with pytest.raises(TypeError, match="unexpected keyword argument 'step'"):
        monitor.log({"loss": 1.0}, step=3)
    assert [e.step for e in Recorder.instances[0].events] == [3]
    assert monitor.failures == {"failing": 1}
    with pytest.raises(TypeError, match="flush\\(\\) broke too"):
        monitor.close()
    assert Recorder.instances[0].calls == ["write", "flush", "close"]


def test_a_backend_failing_to_start_is_reported_and_the_others_run(make):
    class NoStart:
        name = "nostart"

        def __init__(self, run):
            raise OSError("disk full")

    with pytest.warns(BackendWarning, match="backend 'nostart' failed in start"):
        monitor = make([NoStart, Recorder])
    assert monitor.backends == ["recorder"]
    monitor.log({"loss": 1.0})
    monitor.flush()
    assert len(Recorder.instances[0].events) == 1


def test_a_backend_failing_to_start_in_strict_mode_closes_the_started_ones(make):
    class NoStart:
        name = "nostart"

        def __init__(self, run):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        make([Recorder, NoStart], strict=True)
    assert Recorder.instances[0].calls == ["flush", "close"]


def test_unknown_option_names_backend_option_and_accepted_ones(make):
    with pytest.raises(ConfigError, match=re.escape("backend 'recorder' has no option 'lable'; "
                                                    "did you mean 'label'? accepted options: "
                                                    "label")):
        make([Recorder], recorder={"lable": "x"})


def test_options_reach_the_backend(make):
    make([Recorder], recorder={"label": "hello"})
    assert Recorder.instances[0].label == "hello"


def test_options_for_a_backend_that_is_not_installed_are_an_error(make):
    """Options of an installed but unselected backend are ignored (tests/core/test_selection.py);
    a name no backend has is a typo."""
    with pytest.raises(ConfigError, match=re.escape("unknown keyword argument 'recordr'; did "
                                                    "you mean 'recorder'?")) as info:
        make([Recorder], recordr={"label": "x"})
    assert "installed backends: " in str(info.value)


def test_selecting_no_backend_is_an_error_not_every_installed_one(make):
    with pytest.raises(ConfigError, match="no backend selected"):
        make([])


def test_selecting_a_backend_twice_is_an_error(make):
    with pytest.raises(ConfigError, match="selected twice"):
        make(["jsonl", "jsonl"])


def test_run_info_is_the_same_for_every_backend(make):
    monitor = make(["jsonl", Recorder], name=None, config={"lr": 0.1})
    run = Recorder.instances[0].run
    assert run is monitor.run
    assert run.name  # made by the core: every backend names the run alike
    assert dict(run.config) == {"lr": 0.1}


def test_two_default_names_made_in_one_second_are_two_runs(make, monkeypatch):
    import time

    frozen = time.localtime(1_796_150_000)
    monkeypatch.setattr(time, "localtime", lambda now=None: frozen)  # both in one second
    first = make(name=None)
    second = make(name=None)
    assert first.run.name != second.run.name
    assert second.run.name == first.run.name + ".2"
    first.log({"a": 1.0}, step=0)
    second.log({"a": 2.0}, step=0)
    first.close()
    second.close()
    assert read_rows(first.run) == [("a", 0, 1.0)]
    assert read_rows(second.run) == [("a", 0, 2.0)]


@pytest.mark.parametrize(
    ("env", "rank", "world_size"),
    [
        ({"RANK": "1", "WORLD_SIZE": "4"}, 1, 4),
        ({"SLURM_PROCID": "3", "SLURM_NTASKS": "8"}, 3, 8),
        ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "5"}, 0, 2),
        ({}, 0, 1),
    ],
)
def test_rank_is_read_from_the_environment_at_construction(make, monkeypatch, env, rank,
                                                           world_size):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monitor = make([Recorder])
    assert (monitor.run.rank, monitor.run.world_size) == (rank, world_size)


def test_non_zero_rank_constructs_no_backend_and_writes_nothing(make, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monitor = make(["jsonl", Recorder])
    assert monitor.backends == []
    assert monitor.log({"loss": 1.0}, step=7) == 7
    with pytest.raises(TypeError):  # bugs still surface on every rank
        monitor.log({"loss": "high"})
    monitor.close()
    assert Recorder.instances == []
    assert read_rows(monitor.run) == []


def test_every_rank_writes_when_rank_zero_only_is_false(make, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monitor = make([Recorder], rank_zero_only=False)
    monitor.log({"loss": 1.0}, step=7)
    monitor.flush()
    assert Recorder.instances[0].run.rank == 2
    assert [e.step for e in Recorder.instances[0].events] == [7]


def test_a_backend_with_a_misspelt_hook_is_reported_and_the_others_run(make):
    class Misspelt:
        name = "misspelt"

        def __init__(self, run):
            pass

        @hookimpl
        def monitor_wrte(self, events):
            pass

    with pytest.warns(BackendWarning, match="'misspelt' failed in start.*monitor_wrte"):
        monitor = make([Misspelt, Recorder])
    assert monitor.backends == ["recorder"]
    monitor.log({"loss": 1.0}, step=3)
    monitor.flush()
    assert [e.step for e in Recorder.instances[0].events] == [3]


def backend_with_hook_option(option: str) -> type:
    """A backend whose monitor_write is declared with ``hookimpl(<option>=True)``."""

    class Ordered:
        name = "ordered"

        def __init__(self, run):
            self.events = []

        if option in ("wrapper", "hookwrapper"):  # pluggy wants wrappers to be generators

            @hookimpl(**{option: True})
            def monitor_write(self, events):
                self.events.extend(events)
                yield
        else:

            @hookimpl(**{option: True})
            def monitor_write(self, events):
                self.events.extend(events)

    return Ordered


@pytest.mark.parametrize("option", ["wrapper", "hookwrapper", "tryfirst", "trylast"])
def test_a_hook_option_the_core_cannot_honour_sets_the_backend_aside(make, option):
    with pytest.warns(BackendWarning, match=f"'ordered' failed in start.*{option}=True"):
        monitor = make([backend_with_hook_option(option), Recorder])
    assert monitor.backends == ["recorder"]
    assert monitor.failures == {"ordered": 1}
    monitor.log({"loss": 1.0}, step=3)
    monitor.flush()
    assert [e.step for e in Recorder.instances[0].events] == [3]


@pytest.mark.parametrize("option", ["wrapper", "tryfirst"])
def test_a_hook_option_the_core_cannot_honour_raises_in_strict_mode(make, option):
    with pytest.raises(Exception, match=f"backend 'ordered': monitor_write .*{option}=True"):
        make([Recorder, backend_with_hook_option(option)], strict=True)
    assert Recorder.instances[0].calls == ["flush", "close"]


def test_a_backend_with_a_wrong_hook_signature_fails_in_strict_mode(make):
    class WrongArgs:
        name = "wrongargs"

        def __init__(self, run):
            pass

        @hookimpl
        def monitor_write(self, batch):
            pass

    with pytest.raises(Exception, match="batch"):
        make([WrongArgs], strict=True)


def test_no_automatic_step_past_the_largest_and_nothing_of_that_call_is_written(make):
    monitor = make()
    monitor.log({"a": 1.0}, step=2**63 - 1)
    with pytest.raises(ValueError, match=r"past the largest step 2\*\*63 - 1"):
        monitor.log({"a": 2.0})
    with pytest.raises(ValueError, match=r"past the largest step"):
        monitor.write_events([("a", 3.0, None)])
    monitor.log({"a": 4.0}, step=5)  # explicit steps still work
    assert steps_stored(monitor) == [("a", 2**63 - 1), ("a", 5)]


@pytest.mark.parametrize("metrics", [0.5, [("loss", 0.5)], "loss", None])
def test_log_takes_a_mapping(make, metrics):
    monitor = make()
    with pytest.raises(TypeError, match="log\\(\\) takes a mapping of \\{tag: value\\}"):
        monitor.log(metrics, step=0)


@pytest.mark.parametrize("flag", ["strict", "rank_zero_only"])
@pytest.mark.parametrize("value", ["no", "false", 0, None])
def test_flags_must_be_bools(make, flag, value):
    with pytest.raises(ConfigError, match=f"{flag}={value!r} must be True or False"):
        make(**{flag: value})


def test_a_misspelt_keyword_is_named_with_a_suggestion(make):
    with pytest.raises(ConfigError, match="unknown keyword argument 'logdir'; did you mean "
                                          "'log_dir'"):
        make(logdir="runs")


def test_methods_on_a_closed_monitor_name_themselves(make):
    monitor = make()
    monitor.close()
    with pytest.raises(RuntimeError, match=r"write_events\(\) on the closed Monitor"):
        monitor.write_events([("a", 1.0, 1)])
    with pytest.raises(RuntimeError, match=r"log\(\) on the closed Monitor"):
        monitor.log({"a": 1.0})


def test_a_backend_changing_its_row_does_not_change_what_the_next_backend_gets(make):
    class Renaming:
        """Changes the row in place, as an SDK that renames reserved keys might."""

        name = "renaming"

        def __init__(self, run):
            pass

        @hookimpl
        def monitor_write(self, events):
            for _, _, row in rows_by_step(events):
                tag = next(iter(row))
                row["__" + tag] = row.pop(tag)

    class Grouping(Recorder):
        name = "grouping"

        @hookimpl
        def monitor_write(self, events):
            self.events.extend(rows_by_step(events))

    metrics = {"step": 1.0, "loss": 2.0}
    monitor = make([Renaming, Grouping])
    monitor.log(metrics, step=3)
    metrics["loss"] = 5.0  # the caller reusing its dict changes nothing already logged
    monitor.log({"x": 1.0}, step=4)
    monitor.flush()
    (backend,) = Recorder.instances
    assert [(step, row) for step, _, row in backend.events] == [
        (3, {"step": 1.0, "loss": 2.0}), (4, {"x": 1.0})
    ]


def test_log_config_merges_sanitised_config_into_the_run_and_the_backend(make, tmp_path):
    monitor = make(config={"lr": 0.1, "layers": [64]})
    monitor.log({"loss": 1.0}, step=0)
    monitor.log_config({"lr": 0.2, "optimizer": {"name": "adam", "betas": (0.9, 0.99)},
                        "out": tmp_path / "x", "nan": math.nan})
    monitor.flush()
    want = {"lr": 0.2, "layers": [64], "optimizer.name": "adam", "optimizer.betas": [0.9, 0.99],
            "out": str(tmp_path / "x"), "nan": "nan"}
    assert dict(monitor.run.config) == want
    assert read_config(monitor.run) == want
    with pytest.raises(TypeError):  # the merged config stays read-only, like RunInfo.config
        monitor.run.config["lr"] = 1  # type: ignore[index]


def test_log_config_skips_a_backend_without_the_hook_with_one_warning(make):
    monitor = make(backends=("jsonl", Recorder))
    with pytest.warns(BackendWarning, match="'recorder' has no monitor_config hook"):
        monitor.log_config({"lr": 0.1})
    monitor.log_config({"seed": 1})  # no second warning: filterwarnings=error would raise
    monitor.flush()
    assert read_config(monitor.run) == {"lr": 0.1, "seed": 1}
    assert monitor.failures == {}


def test_log_config_isolates_a_failing_backend_and_strict_raises(make):
    class BadConfig(Recorder):
        name = "badconfig"

        @hookimpl
        def monitor_config(self, config):
            raise ValueError("tracker refused the config")

    monitor = make(backends=(BadConfig, "jsonl"))
    with pytest.warns(BackendWarning, match="badconfig"):
        monitor.log_config({"lr": 0.1})
        monitor.flush()
    assert read_config(monitor.run) == {"lr": 0.1}
    assert monitor.failures == {"badconfig": 1}
    strict = make(backends=(BadConfig, "jsonl"), name="strict", strict=True)
    with pytest.raises(ValueError, match="refused"):
        strict.log_config({"lr": 0.1})
        strict.flush()  # background dispatch: raised at the next call
    assert read_config(strict.run) == {"lr": 0.1}


def test_log_config_on_a_closed_monitor_raises(make):
    monitor = make()
    monitor.close()
    with pytest.raises(RuntimeError, match="log_config"):
        monitor.log_config({"lr": 0.1})
