"""Hyperparameter sanitising (odd values become JSON-safe) and ``Monitor.from_config``."""

from __future__ import annotations

import argparse
import enum
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from jsonl_monitor import read_config, read_rows, run_file

from core_monitor import ConfigError, Monitor, UnknownBackendError
from core_monitor.hyperparameters import sanitize_config

ODD_CONFIG = {"layers": [64, 64], "seed": None, "out": Path("x"), "opt": object()}


def assert_json_safe(flat) -> None:
    """Flat (no nested mappings), plain JSON types only, and strict JSON can encode it."""
    json.dumps(dict(flat), allow_nan=False)
    for key, value in flat.items():
        assert type(key) is str
        assert not isinstance(value, dict) or value == {}, f"{key!r} is not flat: {value!r}"
        items = value if isinstance(value, list) else [value]
        for item in items:
            assert type(item) in (str, int, float, bool, type(None)), (key, item, type(item))


# sanitize_config ---------------------------------------------------------------------------


def test_odd_config_becomes_flat_and_json_safe():
    flat = sanitize_config(ODD_CONFIG)
    assert_json_safe(flat)
    assert flat["layers"] == [64, 64]
    assert flat["seed"] is None
    assert flat["out"] == "x"
    assert isinstance(flat["opt"], str) and flat["opt"].startswith("<object object")
    assert sorted(flat) == ["layers", "opt", "out", "seed"]


def test_sanitized_config_is_read_only():
    flat = sanitize_config({"lr": 0.1})
    with pytest.raises(TypeError):
        flat["lr"] = 0.2  # type: ignore[index]


def test_none_config_is_empty():
    assert dict(sanitize_config(None)) == {}


def test_nested_dicts_become_dotted_keys():
    flat = sanitize_config({"optimizer": {"lr": 0.1, "betas": {"b1": 0.9, "b2": 0.99}}, "ep": 3})
    assert dict(flat) == {
        "optimizer.lr": 0.1, "optimizer.betas.b1": 0.9, "optimizer.betas.b2": 0.99, "ep": 3,
    }


def test_non_string_keys_become_strings():
    flat = sanitize_config({1: "a", ("x", 2): "b"})
    assert dict(flat) == {"1": "a", "('x', 2)": "b"}
    assert_json_safe(flat)


@dataclass
class Optim:
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class TrainConfig:
    epochs: int = 2
    optim: Optim = field(default_factory=Optim)
    out: Path = Path("runs/a")


def test_dataclass_is_flattened():
    flat = sanitize_config(TrainConfig())
    assert dict(flat) == {
        "epochs": 2, "optim.lr": 3e-4, "optim.betas": [0.9, 0.999], "out": "runs/a",
    }
    assert_json_safe(flat)
    assert dict(sanitize_config({"train": TrainConfig()}))["train.optim.lr"] == 3e-4


def test_argparse_namespace_is_flattened():
    args = argparse.Namespace(lr=0.1, out=Path("o"), sub=argparse.Namespace(depth=4))
    flat = sanitize_config(args)
    assert dict(flat) == {"lr": 0.1, "out": "o", "sub.depth": 4}


class Color(enum.Enum):
    RED = 1
    BLUE = "b"


class Level(enum.IntEnum):
    LOW = 1


def test_enum_members_become_their_names():
    flat = sanitize_config({"c": Color.RED, "b": Color.BLUE, "l": Level.LOW, "cs": [Color.BLUE]})
    assert dict(flat) == {"c": "RED", "b": "BLUE", "l": "LOW", "cs": ["BLUE"]}


def test_numpy_scalars_and_arrays_become_python_values():
    flat = sanitize_config({
        "f32": np.float32(0.5), "i64": np.int64(3), "flag": np.bool_(True),
        "zero_d": np.array(2.5), "vec": np.arange(3), "mat": np.array([[1, 2], [3, 4]]),
    })
    assert_json_safe(flat)
    assert flat["f32"] == 0.5 and type(flat["f32"]) is float
    assert flat["i64"] == 3 and type(flat["i64"]) is int
    assert flat["flag"] is True
    assert flat["zero_d"] == 2.5 and type(flat["zero_d"]) is float
    assert flat["vec"] == [0, 1, 2]
    assert [json.loads(row) for row in flat["mat"]] == [[1, 2], [3, 4]]


def test_numpy_float64_and_str_become_plain_python_types():
    """``np.float64`` subclasses ``float`` and ``np.str_`` subclasses ``str``: they must still come
    out as plain ``float``/``str`` (numpy 2 reprs them as ``np.float64(0.1)``)."""
    flat = sanitize_config({"lr": np.float64(0.1), "name": np.str_("adam")})
    assert type(flat["lr"]) is float
    assert type(flat["name"]) is str
    assert repr(dict(flat)) == "{'lr': 0.1, 'name': 'adam'}"


def test_nan_and_inf_become_strings():
    flat = sanitize_config({
        "nan": float("nan"), "inf": math.inf, "ninf": -math.inf,
        "np_nan": np.float32("nan"), "in_list": [1.0, math.inf], "in_array": np.array([np.nan, 1]),
    })
    assert_json_safe(flat)
    assert dict(flat) == {
        "nan": "nan", "inf": "inf", "ninf": "-inf", "np_nan": "nan",
        "in_list": [1.0, "inf"], "in_array": ["nan", 1.0],
    }


def test_sets_become_sorted_lists():
    flat = sanitize_config({"s": {"b", "a", "c"}, "fs": frozenset({2, 1}), "t": (1, "x")})
    assert_json_safe(flat)
    assert flat["s"] == ["a", "b", "c"]
    assert sorted(flat["fs"]) == [1, 2]
    assert flat["t"] == [1, "x"]
    assert sanitize_config({"s": {"c", "b", "a"}})["s"] == flat["s"]  # deterministic


def test_nested_lists_of_dicts_become_json_text_items():
    flat = sanitize_config({
        "layers": [{"units": 64, "act": "relu"}, {"units": 10, "drop": math.nan}],
        "grid": [[1, 2], [3]],
    })
    assert_json_safe(flat)
    assert [json.loads(item) for item in flat["layers"]] == [
        {"units": 64, "act": "relu"}, {"units": 10, "drop": "nan"},
    ]
    assert [json.loads(item) for item in flat["grid"]] == [[1, 2], [3]]


def test_arbitrary_objects_become_their_repr():
    class Model:
        def __repr__(self) -> str:
            return "Model(depth=3)"

    flat = sanitize_config({"model": Model(), "fn": len, "raw": b"\x00"})
    assert_json_safe(flat)
    assert flat["model"] == "Model(depth=3)"
    assert flat["fn"] == repr(len)
    assert flat["raw"] == repr(b"\x00")


def test_an_object_with_the_default_repr_is_the_same_value_in_every_call():
    """The default ``repr`` holds a memory address: a config handed over twice (a framework's
    next stage) or in the next run would differ for no reason."""

    class Plain:
        pass

    first = sanitize_config({"obj": Plain()})["obj"]
    assert first == sanitize_config({"obj": Plain()})["obj"]
    assert first == f"<{__name__}.{Plain.__qualname__} object>"
    assert " at 0x" not in first


def test_self_referencing_config_does_not_raise():
    """``sanitize_config`` is documented to never raise on odd values; a cycle is one."""
    loop: dict = {"lr": 0.1}
    loop["parent"] = loop
    items: list = [1]
    items.append(items)
    flat = sanitize_config({"a": loop, "b": items})
    assert_json_safe(flat)
    assert flat["a.lr"] == 0.1


def test_object_whose_repr_raises_does_not_raise():
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("half-initialised")

    flat = sanitize_config({"obj": Broken(), "lr": 0.1})
    assert_json_safe(flat)
    assert flat["lr"] == 0.1
    assert isinstance(flat["obj"], str)


def test_config_reaches_the_backend_sanitised(tmp_path, monitor_factory):
    monitor = Monitor(["jsonl"], project="c10", name="r", config=ODD_CONFIG, log_dir=tmp_path)
    monitor_factory.add(monitor)
    monitor.log({"loss": 1.0}, step=0)
    monitor.close()
    stored = read_config(monitor.run)
    assert stored == dict(sanitize_config(ODD_CONFIG)) == dict(monitor.run.config)
    assert stored["layers"] == [64, 64]
    assert stored["seed"] is None
    assert stored["out"] == "x"
    assert stored["opt"].startswith("<object object")
    assert read_rows(monitor.run) == [("loss", 0, 1.0)]


# Monitor.from_config ------------------------------------------------------------------------


def write_toml(path: Path, log_dir: Path, extra: str = "") -> Path:
    path.write_text(
        f"""
backends = ["jsonl"]
project = "from-file"
name = "run-1"
log_dir = '{log_dir}'
{extra}
[config]
lr = 0.001
[config.optim]
kind = "adam"

[jsonl]
indent = 2
""",
        encoding="utf-8",
    )
    return path


def assert_built_from_file(monitor: Monitor, log_dir: Path) -> None:
    assert monitor.backends == ["jsonl"]
    assert monitor.run.project == "from-file"
    assert monitor.run.name == "run-1"
    assert monitor.run.log_dir == log_dir
    assert dict(monitor.run.config) == {"lr": 0.001, "optim.kind": "adam"}
    monitor.log({"loss": 0.5}, step=4)
    monitor.close()
    assert read_config(monitor.run) == {"lr": 0.001, "optim.kind": "adam"}
    text = run_file(monitor.run).read_text(encoding="utf-8")
    assert '\n  "tag": "loss"' in text  # the [jsonl] option indent = 2 reached the backend


def test_from_config_toml_file(tmp_path, monitor_factory):
    path = write_toml(tmp_path / "monitor.toml", tmp_path / "logs")
    monitor = Monitor.from_config(path)
    monitor_factory.add(monitor)
    assert_built_from_file(monitor, tmp_path / "logs")


def test_from_config_toml_file_given_as_str(tmp_path, monitor_factory):
    path = write_toml(tmp_path / "monitor.toml", tmp_path / "logs")
    monitor = Monitor.from_config(str(path))
    monitor_factory.add(monitor)
    assert monitor.run.name == "run-1"


def file_mapping(log_dir: Path) -> dict:
    return {
        "backends": ["jsonl"], "project": "from-file", "name": "run-1", "log_dir": str(log_dir),
        "config": {"lr": 0.001, "optim": {"kind": "adam"}}, "jsonl": {"indent": 2},
    }


def test_from_config_json_file(tmp_path, monitor_factory):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(file_mapping(tmp_path / "logs")), encoding="utf-8")
    monitor = Monitor.from_config(path)
    monitor_factory.add(monitor)
    assert_built_from_file(monitor, tmp_path / "logs")


def test_from_config_mapping(tmp_path, monitor_factory):
    monitor = Monitor.from_config(file_mapping(tmp_path / "logs"))
    monitor_factory.add(monitor)
    assert_built_from_file(monitor, tmp_path / "logs")


def test_overrides_win_over_the_file(tmp_path, monitor_factory):
    path = write_toml(tmp_path / "monitor.toml", tmp_path / "logs")
    monitor = Monitor.from_config(
        path, name="override", log_dir=tmp_path / "other", config={"lr": 1.0},
        jsonl={"indent": None},
    )
    monitor_factory.add(monitor)
    assert monitor.run.name == "override"
    assert monitor.run.project == "from-file"
    assert monitor.run.log_dir == tmp_path / "other"
    monitor.log({"loss": 0.5}, step=1)
    monitor.close()
    assert read_config(monitor.run) == {"lr": 1.0}
    assert read_rows(monitor.run) == [("loss", 1, 0.5)]  # one line per event: indent overridden
    assert not (tmp_path / "logs").exists()


def test_unknown_top_level_key_names_it_and_the_accepted_keys(tmp_path):
    data = {"backends": ["jsonl"], "project": "p", "colour": "blue"}
    with pytest.raises(ConfigError) as info:
        Monitor.from_config(data)
    message = str(info.value)
    assert "'colour'" in message
    for accepted in ("backends", "project", "name", "config", "log_dir", "[jsonl]"):
        assert accepted in message

    path = write_toml(tmp_path / "monitor.toml", tmp_path / "logs", extra='colour = "blue"')
    with pytest.raises(ConfigError, match="colour"):
        Monitor.from_config(path)


def test_section_naming_no_backend_is_an_error(tmp_path):
    data = {"backends": ["jsonl"], "project": "p", "log_dir": str(tmp_path), "jsnl": {"x": 1}}
    with pytest.raises(ConfigError, match=r"section \[jsnl\] names no installed backend; did "
                                          "you mean 'jsonl'"):
        Monitor.from_config(data)
    assert not (tmp_path / "p").exists()


def test_unknown_backend_option_names_backend_option_and_accepted_options(tmp_path):
    data = {"backends": ["jsonl"], "project": "p", "name": "r", "log_dir": str(tmp_path),
            "jsonl": {"indnt": 2}}
    with pytest.raises(ConfigError) as info:
        Monitor.from_config(data)
    message = str(info.value)
    assert "'jsonl'" in message
    assert "'indnt'" in message
    assert "accepted options: indent" in message
    assert not (tmp_path / "p").exists()  # rejected before the backend started


def test_errors_raised_for_a_config_file_name_the_file(tmp_path):
    path = tmp_path / "monitor.toml"
    path.write_text('backends = ["jsonl"]\nproject = "p"\n[jsonl]\nindnt = 2\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: backend 'jsonl' has no "
                                          "option 'indnt'"):
        Monitor.from_config(path)
    path.write_text('backends = ["jsnol"]\nproject = "p"\n', encoding="utf-8")
    with pytest.raises(UnknownBackendError, match=f"^{re.escape(str(path))}: unknown backend"):
        Monitor.from_config(path)


def test_backend_section_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match=r"\[jsonl\]"):
        Monitor.from_config({"backends": ["jsonl"], "project": "p", "jsonl": 2})


def test_missing_project():
    with pytest.raises(ConfigError, match="missing required key 'project'"):
        Monitor.from_config({"backends": ["jsonl"]})


def test_no_backends_key_and_nothing_else_selecting_is_an_error():
    with pytest.raises(ConfigError, match="no backend selected"):
        Monitor.from_config({"project": "p"})


def test_backends_must_be_a_list_of_names():
    with pytest.raises(ConfigError, match="list of backend names"):
        Monitor.from_config({"backends": "jsonl", "project": "p"})


def test_bad_file_suffix(tmp_path):
    path = tmp_path / "monitor.yaml"
    path.write_text("backends: [jsonl]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\.toml or \.json"):
        Monitor.from_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        Monitor.from_config(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("filename", "text"),
    [("monitor.toml", 'backends = ["jsonl"\n'), ("monitor.json", '{"backends": ')],
)
def test_unparsable_file(tmp_path, filename, text):
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot parse") as info:
        Monitor.from_config(path)
    assert str(info.value).startswith(f"{path}:")


def test_json_file_must_hold_an_object(tmp_path):
    path = tmp_path / "monitor.json"
    path.write_text('["jsonl"]', encoding="utf-8")
    with pytest.raises(ConfigError, match="top level"):
        Monitor.from_config(path)


def test_file_that_is_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "monitor.toml"
    path.write_bytes(b"\xff\xfe b\x00a\x00c\x00k\x00")  # e.g. saved as UTF-16 by an editor
    with pytest.raises(ConfigError, match=r"monitor\.toml"):
        Monitor.from_config(path)
