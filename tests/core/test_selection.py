"""Switching trackers without editing code: selecting, configuring and disabling backends from
code, a settings file (TOML and JSON) and the environment, with the real installed backends
(trackio, tensorboard, wandb offline and the JSON-lines test backend).

Precedence under test: code > file > ``EXPERIMENT_MONITORS`` for selection;
``EXPERIMENT_MONITORS_DISABLE`` applies last, to all three.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from interpreter import imported, modules_after
from jsonl_monitor import read_rows, run_file

import tensorboard_monitor
import wandb_monitor
from core_monitor import ConfigError, ConfigWarning, Monitor, RunInfo, UnknownBackendError
from core_monitor._suggest import closest
from core_monitor.discovery import DISABLE_ENV
from core_monitor.settings import SELECT_ENV, backend_sections, load_monitor_config

SDKS = ("trackio", "tensorboard", "wandb")
#: wandb offline without console capture, git, code saving or the system-metrics process.
WANDB = {"mode": "offline", "settings": {"console": "off", "save_code": False,
                                         "disable_git": True, "x_disable_stats": True}}


def toml_text(data: dict[str, Any]) -> str:
    """``data`` as TOML: scalars and lists first, then one table per mapping (nested ones as
    ``[a.b]``). JSON's literals are TOML's for the values used here."""
    def emit(prefix: str, table: dict[str, Any]) -> list[str]:
        lines = [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
        for key, value in table.items():
            if isinstance(value, dict):
                name = f"{prefix}.{key}" if prefix else key
                lines += ["", f"[{name}]", *emit(name, value)]
        return lines
    return "\n".join(emit("", data)) + "\n"


def settings_file(tmp_path: Path, kind: str, data: dict[str, Any]) -> Path:
    """Write ``data`` as ``monitor.<kind>`` (``toml`` or ``json``) under ``tmp_path``."""
    path = tmp_path / f"monitor.{kind}"
    text = toml_text(data) if kind == "toml" else json.dumps(data, indent=2)
    path.write_text(text, encoding="utf-8")
    return path


def tb_dir(run: RunInfo) -> Path:
    """The folder TensorBoard's event files of ``run`` go to."""
    return tensorboard_monitor.run_dir(run.project, run.name, run.log_dir)


def only(records: list[warnings.WarningMessage], category: type[Warning]) -> list[str]:
    return [str(r.message) for r in records if issubclass(r.category, category)]


@pytest.fixture(params=["toml", "json"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


# EXPERIMENT_MONITORS_DISABLE -----------------------------------------------------------------


def test_a_disabled_backend_is_skipped_with_one_warning_and_the_others_log(
    monkeypatch, tmp_path, monitor_factory
):
    monkeypatch.setenv(DISABLE_ENV, "wandb")
    with pytest.warns(ConfigWarning) as records:
        monitor = monitor_factory(["jsonl", "wandb"], project="p", name="r", log_dir=tmp_path,
                                  wandb=WANDB)
    (message,) = only(records.list, ConfigWarning)
    assert "'wandb'" in message
    assert f"{DISABLE_ENV}='wandb'" in message
    assert "['jsonl']" in message  # the run goes on with the others
    assert monitor.backends == ["jsonl"]
    monitor.log({"loss": 0.5}, step=3)
    monitor.close()
    assert read_rows(monitor.run) == [("loss", 3, 0.5)]
    assert wandb_monitor.find_run_dirs(tmp_path) == []


def test_a_disabled_backend_in_a_settings_file_is_skipped(monkeypatch, tmp_path, kind,
                                                          monitor_factory):
    monkeypatch.setenv(DISABLE_ENV, "tensorboard")
    path = settings_file(tmp_path, kind, {
        "backends": ["jsonl", "tensorboard"], "project": "p", "name": "r",
        "log_dir": str(tmp_path / "logs"), "tensorboard": {"flush_secs": 1},
    })
    with pytest.warns(ConfigWarning, match=f"'tensorboard' is disabled by {DISABLE_ENV}"):
        monitor = monitor_factory.add(Monitor.from_config(path))
    assert monitor.backends == ["jsonl"]
    monitor.log({"acc": 0.25}, step=1)
    monitor.close()
    assert read_rows(monitor.run) == [("acc", 1, 0.25)]
    assert not tb_dir(monitor.run).exists()


def test_a_disabled_backend_imports_neither_its_plugin_nor_its_sdk(tmp_path):
    modules = modules_after(
        f"""
        import warnings
        from core_monitor import ConfigWarning, Monitor
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Monitor(["jsonl", "wandb", "tensorboard", "trackio"], project="p", name="r",
                         log_dir={str(tmp_path)!r}, wandb={{"mode": "offline"}}) as monitor:
                monitor.log({{"x": 1.0}}, step=0)
        assert monitor.backends == ["jsonl"], monitor.backends
        assert sum(issubclass(w.category, ConfigWarning) for w in caught) == 3, caught
        """,
        tmp_path, env={**os.environ, DISABLE_ENV: "wandb, tensorboard,trackio"},
    )
    assert imported(modules, "jsonl_monitor")  # the probe sees what was imported
    for package in (*SDKS, "wandb_monitor", "tensorboard_monitor", "trackio_monitor"):
        assert not imported(modules, package), package


@pytest.mark.parametrize("value", ["*", "all", "jsonl,*"])
def test_disabling_everything_makes_a_monitor_that_checks_its_input_and_writes_nothing(
    monkeypatch, tmp_path, monitor_factory, value
):
    monkeypatch.setenv(DISABLE_ENV, value)
    log_dir = tmp_path / "logs"
    with pytest.warns(ConfigWarning) as records:
        monitor = monitor_factory(["jsonl", "trackio"], project="p", name="r", log_dir=log_dir)
    (message,) = only(records.list, ConfigWarning)
    assert "every backend" in message and f"{DISABLE_ENV}={value!r}" in message
    assert monitor.backends == []
    assert monitor.log({"loss": 1.0}) == 0
    assert monitor.log({"loss": 1.0}, step=7) == 7
    assert monitor.log({"loss": 1.0}) == 8
    with pytest.raises(TypeError, match="'loss'"):
        monitor.log({"loss": "high"})
    with pytest.raises(ValueError):
        monitor.log({"loss": 1.0}, step=-1)
    with pytest.raises(TypeError):
        monitor.log({"loss": 1.0}, step=1.5)
    monitor.write_events([("val/acc", 0.5, None)])
    assert monitor.log({"loss": 1.0}) == 10
    monitor.log_config({"lr": 0.1})
    monitor.flush()
    monitor.close()
    assert dict(monitor.run.config) == {"lr": 0.1}
    assert not log_dir.exists()  # no backend wrote anything
    with pytest.raises(UnknownBackendError, match="Did you mean 'trackio'"):
        Monitor(["trakio"], project="p")  # names are still checked


def test_disabling_everything_imports_no_plugin_and_no_sdk(tmp_path):
    modules = modules_after(
        f"""
        import warnings
        from core_monitor import Monitor
        warnings.simplefilter("ignore")
        with Monitor(["jsonl", "wandb", "tensorboard", "trackio"], project="p",
                     log_dir={str(tmp_path)!r}) as monitor:
            assert monitor.log({{"x": 1.0}}) == 0
        """,
        tmp_path, env={**os.environ, DISABLE_ENV: "*"},
    )
    for package in (*SDKS, "jsonl_monitor", "wandb_monitor", "tensorboard_monitor",
                    "trackio_monitor"):
        assert not imported(modules, package), package


def test_strict_makes_a_disabled_backend_an_error(monkeypatch, tmp_path, kind):
    monkeypatch.setenv(DISABLE_ENV, "wandb")
    with pytest.raises(ConfigError, match=f"'wandb' is disabled by {DISABLE_ENV}='wandb'"):
        Monitor(["jsonl", "wandb"], project="p", log_dir=tmp_path, strict=True)
    path = settings_file(tmp_path, kind, {"backends": ["jsonl", "wandb"], "project": "p",
                                          "strict": True, "log_dir": str(tmp_path / "logs")})
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: backend 'wandb' is disabled"):
        Monitor.from_config(path)
    monkeypatch.setenv(DISABLE_ENV, "*")
    with pytest.raises(ConfigError, match="disabled"):
        Monitor(["jsonl"], project="p", log_dir=tmp_path, strict=True)
    assert not (tmp_path / "p").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize(("value", "suggestion"), [("WandB", "wandb"), ("wandbb", "wandb"),
                                                   ("tensorbord", "tensorboard")])
def test_a_name_in_the_disable_variable_that_matches_nothing_gets_a_suggestion(
    monkeypatch, tmp_path, monitor_factory, value, suggestion
):
    monkeypatch.setenv(DISABLE_ENV, value)
    with pytest.warns(ConfigWarning) as records:
        monitor = monitor_factory(["jsonl"], project="p", name="r", log_dir=tmp_path)
    (message,) = only(records.list, ConfigWarning)
    assert f"{DISABLE_ENV} names {value!r}, which matches no installed backend" in message
    assert f"did you mean {suggestion!r}?" in message
    assert "case included" in message
    monitor.log({"x": 2.0}, step=0)  # nothing was disabled: the run goes on
    monitor.close()
    assert read_rows(monitor.run) == [("x", 0, 2.0)]
    with pytest.raises(ConfigError, match=f"did you mean {suggestion!r}"):
        Monitor(["jsonl"], project="p", log_dir=tmp_path, strict=True)


# EXPERIMENT_MONITORS -------------------------------------------------------------------------


def test_the_environment_selects_when_code_does_not(monkeypatch, tmp_path, monitor_factory):
    monkeypatch.setenv(SELECT_ENV, "jsonl, tensorboard")
    monitor = monitor_factory.add(Monitor(project="p", name="env", log_dir=tmp_path,
                                          tensorboard={"flush_secs": 1}))
    assert monitor.backends == ["jsonl", "tensorboard"]
    monitor.log({"loss": 0.5}, step=4)
    monitor.close()
    assert read_rows(monitor.run) == [("loss", 4, 0.5)]
    assert tensorboard_monitor.read_rows(monitor.run) == [("loss", 4, 0.5)]


def test_code_wins_over_the_environment(monkeypatch, tmp_path, monitor_factory):
    monkeypatch.setenv(SELECT_ENV, "tensorboard")
    monitor = monitor_factory(["jsonl"], project="p", name="r", log_dir=tmp_path)
    assert monitor.backends == ["jsonl"]
    monitor.close()
    assert not tb_dir(monitor.run).exists()


def test_the_file_wins_over_the_environment_and_overrides_win_over_both(
    monkeypatch, tmp_path, kind, monitor_factory
):
    monkeypatch.setenv(SELECT_ENV, "tensorboard")
    data = {"backends": ["jsonl"], "project": "p", "name": "r", "log_dir": str(tmp_path)}
    path = settings_file(tmp_path, kind, data)
    assert monitor_factory.add(Monitor.from_config(path)).backends == ["jsonl"]
    overridden = monitor_factory.add(Monitor.from_config(path, backends=["tensorboard"],
                                                         name="o"))
    assert overridden.backends == ["tensorboard"]


def test_a_file_that_selects_nothing_leaves_selection_to_the_environment(
    monkeypatch, tmp_path, kind, monitor_factory
):
    """The file configures tensorboard; the operator picks it with the variable."""
    monkeypatch.setenv(SELECT_ENV, "tensorboard")
    path = settings_file(tmp_path, kind, {"project": "p", "name": "r", "log_dir": str(tmp_path),
                                          "tensorboard": {"filename_suffix": ".from-file"}})
    monitor = monitor_factory.add(Monitor.from_config(path))
    assert monitor.backends == ["tensorboard"]
    monitor.log({"loss": 0.125}, step=2)
    monitor.close()
    assert tensorboard_monitor.read_rows(monitor.run) == [("loss", 2, 0.125)]
    files = [p.name for p in tb_dir(monitor.run).iterdir()]
    assert files and all(name.endswith(".from-file") for name in files), files


def test_enabled_false_in_the_file_wins_over_the_environment(monkeypatch, tmp_path, kind,
                                                             monitor_factory):
    monkeypatch.setenv(SELECT_ENV, "jsonl,tensorboard")
    path = settings_file(tmp_path, kind, {"project": "p", "log_dir": str(tmp_path),
                                          "tensorboard": {"enabled": False}})
    assert monitor_factory.add(Monitor.from_config(path)).backends == ["jsonl"]


def test_the_disable_variable_applies_to_what_the_environment_selected(
    monkeypatch, tmp_path, monitor_factory
):
    monkeypatch.setenv(SELECT_ENV, "jsonl,wandb")
    monkeypatch.setenv(DISABLE_ENV, "wandb")
    with pytest.warns(ConfigWarning, match="'wandb' is disabled"):
        monitor = monitor_factory(None, project="p", log_dir=tmp_path)
    assert monitor.backends == ["jsonl"]


def test_an_unknown_name_in_the_environment_is_an_error_naming_the_variable(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setenv(SELECT_ENV, "jsonl,trakio")
    with pytest.raises(UnknownBackendError,
                       match=f"^{SELECT_ENV}='jsonl,trakio': unknown backend 'trakio'") as info:
        Monitor(project="p", log_dir=tmp_path)
    assert "Did you mean 'trackio'?" in str(info.value)
    path = settings_file(tmp_path, "toml", {"project": "p"})
    with pytest.raises(UnknownBackendError, match=SELECT_ENV):
        Monitor.from_config(path)
    assert not (tmp_path / "p").exists()


def test_nothing_selected_anywhere_names_every_way_to_select(tmp_path, kind):
    with pytest.raises(ConfigError, match="no backend selected") as info:
        Monitor(project="p")
    assert SELECT_ENV in str(info.value) and "enabled = true" in str(info.value)
    path = settings_file(tmp_path, kind, {"project": "p", "wandb": {"mode": "offline"}})
    with pytest.raises(ConfigError, match="no backend selected"):
        Monitor.from_config(path)


# Sections ------------------------------------------------------------------------------------


def test_sections_of_installed_unselected_backends_are_ignored(tmp_path, kind, monitor_factory):
    path = settings_file(tmp_path, kind, {
        "backends": ["jsonl"], "project": "p", "name": "r", "log_dir": str(tmp_path),
        "jsonl": {"indent": 2}, "wandb": WANDB, "tensorboard": {"flush_secs": 1},
        "trackio": {"group": "g"},
    })
    monitor = monitor_factory.add(Monitor.from_config(path))
    assert monitor.backends == ["jsonl"]
    monitor.log({"loss": 0.5}, step=0)
    monitor.close()
    assert '\n  "tag": "loss"' in run_file(monitor.run).read_text(encoding="utf-8")
    assert wandb_monitor.find_run_dirs(tmp_path) == []


def test_unselected_sections_import_no_sdk(tmp_path):
    path = settings_file(tmp_path, "toml", {
        "backends": ["jsonl"], "project": "p", "name": "r", "log_dir": str(tmp_path),
        "wandb": WANDB, "tensorboard": {"flush_secs": 1}, "trackio": {"enabled": False},
    })
    modules = modules_after(
        f"""
        from core_monitor import Monitor
        with Monitor.from_config({str(path)!r}) as monitor:
            monitor.log({{"x": 1.0}}, step=0)
        assert monitor.backends == ["jsonl"]
        """,
        tmp_path,
    )
    assert imported(modules, "jsonl_monitor")
    for package in SDKS:
        assert not imported(modules, package), package


def test_enabled_in_a_section_selects_and_deselects(tmp_path, kind, monitor_factory):
    path = settings_file(tmp_path, kind, {
        "project": "p", "name": "r", "log_dir": str(tmp_path),
        "jsonl": {"enabled": True, "indent": 2},   # selected by its section alone
        "wandb": {"enabled": False, **WANDB},       # configured, switched off
        "tensorboard": {"flush_secs": 1},           # no flag: configured, not selected
    })
    monitor = monitor_factory.add(Monitor.from_config(path))
    assert monitor.backends == ["jsonl"]
    monitor.log({"loss": 0.5}, step=0)
    monitor.close()
    assert '\n  "tag": "loss"' in run_file(monitor.run).read_text(encoding="utf-8")

    path = settings_file(tmp_path, kind, {
        "backends": ["jsonl", "tensorboard"], "project": "p", "name": "r2",
        "log_dir": str(tmp_path), "tensorboard": {"enabled": False, "flush_secs": 1},
    })
    assert monitor_factory.add(Monitor.from_config(path)).backends == ["jsonl"]


def test_enabled_must_be_true_or_false(tmp_path, kind):
    path = settings_file(tmp_path, kind, {"project": "p", "jsonl": {"enabled": "yes"}})
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: \[jsonl\] enabled = 'yes' "
                                          "must be true or false"):
        Monitor.from_config(path)


def test_overrides_apply_before_sections_are_checked(tmp_path, kind, monitor_factory):
    """The file selects jsonl only; the override adds wandb, whose section configures it."""
    path = settings_file(tmp_path, kind, {
        "backends": ["jsonl"], "project": "p", "name": "r", "log_dir": str(tmp_path),
        "wandb": WANDB,
    })
    monitor = monitor_factory.add(Monitor.from_config(path, backends=["jsonl", "wandb"]))
    assert monitor.backends == ["jsonl", "wandb"]
    monitor.log({"loss": 0.75}, step=5)
    monitor.close()
    assert read_rows(monitor.run) == [("loss", 5, 0.75)]
    assert wandb_monitor.read_rows(monitor.run) == [("loss", 5, 0.75)]


def test_narrowing_backends_leaves_the_other_sections_ignored(tmp_path, kind, monitor_factory):
    path = settings_file(tmp_path, kind, {
        "backends": ["jsonl", "tensorboard"], "project": "p", "name": "r",
        "log_dir": str(tmp_path), "tensorboard": {"flush_secs": 1},
    })
    monitor = monitor_factory.add(Monitor.from_config(path, backends=["jsonl"]))
    assert monitor.backends == ["jsonl"]
    monitor.close()
    assert not tb_dir(monitor.run).exists()


@pytest.mark.parametrize(("section", "suggestion"), [("wandbb", "wandb"), ("WandB", "wandb"),
                                                     ("tensorbord", "tensorboard")])
def test_a_section_naming_no_installed_backend_is_an_error_with_a_suggestion(
    tmp_path, kind, section, suggestion
):
    path = settings_file(tmp_path, kind, {"backends": ["jsonl"], "project": "p",
                                          "log_dir": str(tmp_path), section: {"x": 1}})
    with pytest.raises(ConfigError) as info:
        Monitor.from_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: section [{section}] names no installed backend; "
                              f"did you mean {suggestion!r}?")
    for name in ("[jsonl]", "[trackio]", "[tensorboard]", "[wandb]"):
        assert name in message
    assert not (tmp_path / "p").exists()


def test_backend_sections_reads_a_deepspeed_style_config():
    """A whole DeepSpeed config: per-tracker sections with ``enabled``, other keys left alone."""
    found = backend_sections({
        "train_batch_size": 8, "optimizer": {"type": "Adam"},
        "tensorboard": {"enabled": True, "flush_secs": 5},
        "wandb": {"enabled": False, "mode": "offline"},
        "trackio": {"group": "g"},
    })
    assert found.enabled == ["tensorboard"]
    assert found.disabled == ["wandb"]
    assert found.options == {"tensorboard": {"flush_secs": 5}, "wandb": {"mode": "offline"},
                             "trackio": {"group": "g"}}
    with pytest.raises(ConfigError, match=r"\[wandb\] must be a table"):
        backend_sections({"wandb": True})


def test_code_options_for_installed_unselected_backends_are_ignored(tmp_path, monitor_factory):
    """One call can carry every tracker's options; the selection picks which are used."""
    monitor = monitor_factory(["jsonl"], project="p", name="r", log_dir=tmp_path,
                              wandb=WANDB, tensorboard={"flush_secs": 1}, trackio={})
    assert monitor.backends == ["jsonl"]
    monitor.close()
    assert wandb_monitor.find_run_dirs(tmp_path) == []
    assert not tb_dir(monitor.run).exists()
    with pytest.raises(ConfigError, match=re.escape("unknown keyword argument 'wandbb'; did "
                                                    "you mean 'wandb'?")):
        Monitor(["jsonl"], project="p", wandbb={})


# Did you mean --------------------------------------------------------------------------------


def test_a_misspelt_backend_option_gets_a_suggestion_in_code_and_files(tmp_path, kind):
    with pytest.raises(ConfigError, match=re.escape("backend 'tensorboard' has no option "
                                                    "'flush_sec'; did you mean 'flush_secs'?")):
        Monitor(["tensorboard"], project="p", log_dir=tmp_path, tensorboard={"flush_sec": 5})
    path = settings_file(tmp_path, kind, {"backends": ["tensorboard"], "project": "p",
                                          "log_dir": str(tmp_path),
                                          "tensorboard": {"flush_sec": 5}})
    with pytest.raises(ConfigError, match="^" + re.escape(
            f"{path}: backend 'tensorboard' has no option 'flush_sec'; did you mean "
            "'flush_secs'?")):
        Monitor.from_config(path)
    assert not (tmp_path / "p").exists()


def test_a_misspelt_file_key_gets_a_suggestion(tmp_path, kind):
    path = settings_file(tmp_path, kind, {"backends": ["jsonl"], "project": "p",
                                          "logdir": "runs"})
    with pytest.raises(ConfigError, match="^" + re.escape(
            f"{path}: unknown key 'logdir'; did you mean 'log_dir'?")):
        Monitor.from_config(path)
    with pytest.raises(ConfigError, match=re.escape("unknown keyword argument 'logdir'; did "
                                                    "you mean 'log_dir'?")):
        Monitor.from_config({"backends": ["jsonl"], "project": "p"}, logdir="runs")


@pytest.mark.parametrize(
    ("filename", "text", "where"),
    [
        ("monitor.toml", 'project = "p"\nbackends = ["jsonl"]\nlog_dir = runs\n', ":3:11: "),
        ("monitor.toml", 'project = "p"\nbackends = ["jsonl"\n', ":2: "),  # end of document
        # A missing comma: Python 3.13's json reports a trailing comma at the comma itself,
        # earlier versions at the brace after it, so that case would test json, not us.
        ("monitor.json", '{"project": "p",\n "backends": ["jsonl"]\n "log_dir": "runs"}\n',
         ":3:2: "),
    ],
)
def test_a_syntax_error_names_the_file_and_the_line(tmp_path, filename, text, where):
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_monitor_config(path)
    assert str(info.value).startswith(f"{path}{where}cannot parse"), str(info.value)


def test_closest_matches_case_first_then_spelling():
    names = ["trackio", "tensorboard", "wandb"]
    assert closest("WandB", names) == "wandb"
    assert closest("trakio", names) == "trackio"
    assert closest("flush_sec", ["flush_secs", "max_queue"]) == "flush_secs"
    assert closest("zzzz", names) is None
