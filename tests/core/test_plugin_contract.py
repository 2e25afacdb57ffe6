"""The plugin contract the core enforces for every backend: one ``Capabilities`` declaration,
option types checked from the annotations of ``__init__`` before construction (in the training
process, without the SDK), and the plugin's ``check_sdk`` run by the core before construction,
in every dispatch mode."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from interpreter import run_python

from core_monitor import BackendLoadError, Capabilities, ConfigError, Monitor, RunInfo, hookimpl
from core_monitor.options import (
    NonBlank,
    check_option_types,
    describe,
    option_types,
    unresolved_options,
)
from core_monitor.settings import check_options


class Typed:
    """A backend whose options cover the annotation forms a plugin uses."""

    capabilities: ClassVar[Capabilities] = Capabilities(name="typed", stores_config=True)

    def __init__(self, run: RunInfo, *, quiet: bool = True, retries: int = 3,
                 timeout: float = 5.0, mode: Literal["offline", "online"] = "offline",
                 entity: NonBlank | None = None, tags: Sequence[NonBlank] | None = None,
                 settings: Mapping[str, Any] | None = None,
                 run_dir: str | os.PathLike[str] | None = None) -> None:
        self.run = run

    @hookimpl
    def monitor_write(self, events: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"quiet": "yes"}, ["typed", "quiet='yes'", "(a str)", "True or False",
                            "e.g. quiet=True (the default"]),
        ({"quiet": 1}, ["quiet=1", "(a int)", "True or False"]),
        ({"retries": 2.5}, ["retries=2.5", "an int", "e.g. retries=3"]),
        ({"retries": True}, ["retries=True", "an int"]),  # a bool is not an int here
        ({"timeout": "5"}, ["timeout='5'", "a number"]),
        ({"mode": "sometimes"}, ["mode='sometimes'", "one of 'offline', 'online'"]),
        ({"entity": 3}, ["entity=3", "a non-blank str or None"]),
        ({"entity": " "}, ["entity=' '", "a non-blank str or None"]),
        ({"tags": "baseline"}, ["tags='baseline'", "a list of non-blank str"]),
        ({"tags": ["a", 2]}, ["tags=['a', 2]", "a list of non-blank str"]),
        ({"tags": ["a", ""]}, ["tags=['a', '']", "a list of non-blank str"]),
        ({"settings": ["console"]}, ["settings=['console']", "a mapping"]),
        ({"run_dir": 5}, ["run_dir=5", "a path"]),
    ],
)
def test_an_ill_typed_option_is_a_config_error_naming_backend_option_value_and_fix(
    options, words
):
    with pytest.raises(ConfigError) as raised:
        check_options("typed", Typed, options)
    for word in words:
        assert word in str(raised.value), (word, str(raised.value))


@pytest.mark.parametrize("options", [
    {"quiet": False}, {"retries": 0}, {"timeout": 1}, {"timeout": 0.5}, {"mode": "online"},
    {"entity": None}, {"entity": "team"}, {"tags": ("a", "b")}, {"tags": ["a"]},
    {"settings": {"console": "off"}}, {"run_dir": Path("x")}, {"run_dir": "x"}, {},
])
def test_well_typed_options_pass(options):
    check_options("typed", Typed, options)


def test_option_types_are_read_from_the_annotations_with_their_defaults():
    types = option_types(Typed)
    assert types["quiet"] == (bool, True) and types["retries"] == (int, 3)
    assert describe(types["entity"][0]) == "a non-blank str or None"
    assert unresolved_options(Typed) == []


def test_an_annotation_the_core_cannot_evaluate_leaves_the_option_unchecked_and_is_named():
    class Hidden:
        def __init__(self, run: RunInfo, *, client: Client = None) -> None:  # type: ignore[name-defined] # noqa: F821
            pass

    assert unresolved_options(Hidden) == [
        "client: Client (NameError: name 'Client' is not defined)"]
    check_option_types("hidden", Hidden, {"client": object()})  # not checked, no error


def test_check_options_classmethod_checks_values_after_the_types():
    class Ranged(Typed):
        @classmethod
        def check_options(cls, options: Mapping[str, Any]) -> None:
            if options.get("retries", 3) < 0:
                raise ConfigError(f"ranged: retries={options['retries']} must be >= 0")

    with pytest.raises(ConfigError, match="retries=-1 must be >= 0"):
        check_options("ranged", Ranged, {"retries": -1})
    with pytest.raises(ConfigError, match="an int"):  # the type first: check_options not run
        check_options("ranged", Ranged, {"retries": "-1"})


def test_an_ill_typed_option_raises_at_monitor_before_the_sdk_is_imported(tmp_path):
    """``Monitor(["trackio"], trackio={"quiet": "yes"})`` in a fresh interpreter, with writer
    processes (the default dispatch): the ConfigError comes from the training process, names
    key, value and fix, and Trackio was not imported."""
    done = run_python("""
        import sys
        from core_monitor import ConfigError, Monitor
        try:
            Monitor(["trackio"], project="p", log_dir=sys.argv[1], dispatch="process",
                    trackio={"quiet": "yes"})
        except ConfigError as error:
            print("ERROR", error)
        print("SDK", sorted(m for m in sys.modules if m.split(".")[0] in ("trackio", "gradio")))
    """, tmp_path)
    out = done.stdout
    assert ("ERROR trackio: option quiet='yes' (a str) must be True or False; e.g. quiet=True "
            "(the default, what leaving quiet out gives)") in out
    assert "SDK []" in out
    assert not (tmp_path / "trackio").exists()


# The SDK check, run by the core ---------------------------------------------------------------

_PLUGIN = '''
from pathlib import Path
from core_monitor import Capabilities, hookimpl

class OutdatedMonitor:
    capabilities = Capabilities(name="outdated", tested_sdk="pluggy>=1.0")
    constructed = Path(__file__).with_name("constructed")

    @classmethod
    def check_sdk(cls):
        return ["no pluggy.Run.log_rows"]

    def __init__(self, run):
        self.constructed.write_text("yes")

    @hookimpl
    def monitor_write(self, events):
        pass
'''


@pytest.mark.parametrize("dispatch", ["sync", "thread", "process"])
def test_a_failing_sdk_check_is_a_backend_load_error_from_the_core(tmp_path, dispatch):
    """The plugin never calls its own check: the core runs ``check_sdk`` before constructing
    the backend, wherever the dispatch constructs it, and nothing is constructed."""
    (tmp_path / "outdated_plugin.py").write_text(_PLUGIN)
    done = run_python(f"""
        import sys
        sys.path.insert(0, sys.argv[1])
        from core_monitor import BackendError, BackendLoadError, Monitor
        from outdated_plugin import OutdatedMonitor
        try:
            Monitor([OutdatedMonitor], project="p", log_dir=sys.argv[1], strict=True,
                    dispatch={dispatch!r}, wait=True)
        except (BackendError, BackendLoadError) as error:
            print("ERROR", type(error).__name__, error)
    """, tmp_path, env={"PYTHONPATH": str(tmp_path)})
    # In a writer process the BackendLoadError is raised there (only the SDK's import shows it:
    # wait=True makes Monitor() wait for that start) and reaches the caller as the
    # BackendError of a failed start, with the same message.
    kind = "BackendError" if dispatch == "process" else "BackendLoadError"
    assert f"ERROR {kind} backend 'outdated'" in done.stdout, done.stdout + done.stderr
    assert "could not be loaded" in done.stdout
    assert "no pluggy.Run.log_rows" in done.stdout and "pluggy>=1.0" in done.stdout
    assert not (tmp_path / "constructed").exists()


def test_a_missing_sdk_distribution_is_named_at_monitor_from_metadata(tmp_path):
    class NeedsAbsentSdk:
        capabilities: ClassVar[Capabilities] = Capabilities(
            name="absent", tested_sdk="no-such-sdk-for-contract-test>=1")

        def __init__(self, run: RunInfo) -> None:
            raise AssertionError("never constructed")

        @hookimpl
        def monitor_write(self, events: Any) -> None:
            pass

    with pytest.raises(BackendLoadError) as raised:
        Monitor([NeedsAbsentSdk], project="p", log_dir=tmp_path, dispatch="sync")
    assert "no-such-sdk-for-contract-test" in str(raised.value)
    assert "pip install" in str(raised.value)


# The one declaration ----------------------------------------------------------------------------

def test_capabilities_are_one_declaration_read_by_the_core():
    caps = Capabilities.of(Typed)
    assert caps is Typed.capabilities
    assert (caps.name, caps.stores_config, caps.media_kinds) == ("typed", True, frozenset())
    assert Monitor.backend_name(Typed) == "typed"


def test_a_wrong_capability_is_refused_where_the_class_is_written():
    with pytest.raises(TypeError, match=r"Capabilities\(rows_readable_after='never'\) is not "
                                        "one of 'flush', 'close'"):
        Capabilities(rows_readable_after="never")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"media_kinds=.*\['histogram', 'image', 'text'\]"):
        Capabilities(media_kinds=frozenset({"images"}))
    with pytest.raises(TypeError, match=r"Capabilities\(repeated_steps='last'\) is not one "
                                        "of 'all', 'first'"):
        Capabilities(repeated_steps="last")  # type: ignore[arg-type]
    for bad in (0, 2**63, 1.5):
        with pytest.raises(TypeError, match=r"max_step=.* must be an int from 1 to 2\*\*63 - 1"):
            Capabilities(max_step=bad)  # type: ignore[arg-type]


def test_declaring_a_capability_twice_is_refused():
    # Python < 3.12 wraps what __set_name__ raises in a RuntimeError: the cause is ours.
    with pytest.raises((TypeError, RuntimeError)) as raised:
        class Twice:
            stores_config = True
            capabilities = Capabilities(stores_config=True)
    error = raised.value.__cause__ or raised.value
    assert "declares stores_config both as a class attribute and in its capabilities" in str(
        error)


@pytest.mark.parametrize("name", ["trackio", "tensorboard", "wandb", "mlflow", "comet"])
def test_every_first_party_backend_declares_its_capabilities_once(name):
    from core_monitor import discovery

    cls = discovery.load_backend(discovery.find_backend(name))
    assert isinstance(vars(cls)["capabilities"], Capabilities)
    assert Capabilities.of(cls).name == name and Capabilities.of(cls).tested_sdk
    assert unresolved_options(cls) == []
