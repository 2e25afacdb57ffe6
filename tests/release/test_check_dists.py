"""``release/check_dists.py``: each rule fails on a distribution that breaks it.

The real distributions are checked by ``nox -s release``; here each check meets metadata
written to break it, so a check that could not fail would show.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_dists", ROOT / "release" / "check_dists.py")
assert _spec is not None and _spec.loader is not None
check_dists = importlib.util.module_from_spec(_spec)
sys.modules["check_dists"] = check_dists
_spec.loader.exec_module(check_dists)

GOOD = """\
Metadata-Version: 2.4
Name: trackio-monitor
Version: 0.1.0
Summary: Trackio backend for core-monitor.
Project-URL: Homepage, https://example.org
Project-URL: Source, https://example.org/src
Project-URL: Changelog, https://example.org/changes
Project-URL: Issues, https://example.org/issues
License-Expression: MIT
License-File: LICENSE
Classifier: Programming Language :: Python :: 3
Classifier: Programming Language :: Python :: 3.10
Classifier: Programming Language :: Python :: 3.11
Classifier: Programming Language :: Python :: 3.12
Classifier: Programming Language :: Python :: 3.13
Requires-Python: >=3.10
Requires-Dist: core-monitor>=0.1
Requires-Dist: trackio>=0.42
Requires-Dist: tomli>=1.1; python_version < '3.11'
Description-Content-Type: text/markdown

# trackio-monitor
"""


def problems(text: str) -> list[str]:
    return check_dists.check_metadata("x.whl", Parser().parsestr(text))


def test_complete_metadata_passes():
    assert problems(GOOD) == []


@pytest.mark.parametrize("bad", [
    "trackio>=0.42,<0.44", "trackio==0.43", "trackio~=0.42", "trackio>=0.42,!=0.43.1",
    "deepspeed>=0.19.8,<0.20; extra == 'deepspeed'",
])
def test_an_upper_bound_on_any_requirement_is_refused(bad):
    found = problems(GOOD.replace("Requires-Dist: trackio>=0.42", f"Requires-Dist: {bad}"))
    assert any(f"requirement {bad!r} has an upper bound" in p for p in found), found


def test_a_requirement_without_a_lowest_version_is_refused():
    (found,) = problems(GOOD.replace("trackio>=0.42", "trackio"))
    assert "names no lowest version" in found


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("License-Expression: MIT\n", "", "License-Expression is None"),
    ("Requires-Python: >=3.10", "Requires-Python: >=3.11", "Requires-Python is '>=3.11'"),
    ("Classifier: Programming Language :: Python :: 3.13\n", "",
     "the Python classifiers name ['3.10', '3.11', '3.12'], not ['3.10', '3.11', '3.12', '3.13']"),
    ("Project-URL: Changelog, https://example.org/changes\n", "", "no Project-URL ['Changelog']"),
    ("Description-Content-Type: text/markdown", "Description-Content-Type: text/plain",
     "Description-Content-Type is 'text/plain'"),
    ("Summary: Trackio backend for core-monitor.\n", "", "no Summary"),
])
def test_each_missing_or_wrong_field_is_named(old, new, expected):
    assert old in GOOD
    (found,) = problems(GOOD.replace(old, new))
    assert expected in found


def test_the_checked_pythons_are_the_ones_ci_tests():
    """check_dists runs before anything is installed, so it keeps its own copy of the range:
    it must be noxfile's, which CI tests."""
    noxfile = (ROOT / "noxfile.py").read_text()
    (declared,) = re.findall(r"^PYTHONS = (\(.*\))$", noxfile, flags=re.MULTILINE)
    assert ast.literal_eval(declared) == check_dists.PYTHONS


def test_an_empty_folder_names_every_missing_distribution(tmp_path):
    found = check_dists.check_folder(tmp_path)
    missing = [p for p in found if "expected one sdist and one wheel" in p]
    assert [p.split(":")[0] for p in missing] == list(check_dists.FOLDERS)  # six, csv included


def test_a_plugin_whose_sdk_skips_a_python_declares_its_own_range():
    """aim-monitor: aimrocks has no wheel for 3.13, so <3.13 and no 3.13 classifier."""
    aim = (GOOD.replace("Name: trackio-monitor", "Name: aim-monitor")
           .replace("Classifier: Programming Language :: Python :: 3.13\n", ""))
    assert problems(aim) == ["x.whl: Requires-Python is '>=3.10', not '>=3.10,<3.13'"]
    assert problems(aim.replace("Requires-Python: >=3.10", "Requires-Python: >=3.10,<3.13")) == []
    (found,) = problems(GOOD.replace("Name: trackio-monitor", "Name: aim-monitor")
                        .replace("Requires-Python: >=3.10", "Requires-Python: >=3.10,<3.13"))
    assert "name ['3.10', '3.11', '3.12', '3.13'], not ['3.10', '3.11', '3.12']" in found
