"""Check that the built distributions are complete before anyone uploads them.

    python release/check_dists.py DIST_FOLDER

For every sdist and wheel in DIST_FOLDER (what ``nox -s release`` built) this reads the core
metadata the package index will show (the wheel's ``METADATA``, the sdist's ``PKG-INFO``) and
fails, naming the file and the field, unless:

- each of the five distributions has exactly one sdist and one wheel, of one version, and that
  version is the one its ``pyproject.toml`` declares (the only place it is kept);
- ``License-Expression`` is ``MIT`` and the license text is inside both files;
- ``Requires-Python`` is ``>=<lowest supported>`` and the classifiers name every supported
  Python (``PYTHONS`` below, the range CI tests) and no other; a distribution whose SDK
  cannot be installed on some of them (``NARROWER_PYTHONS``) says ``>=<lowest>,<<first left
  out>`` and names its own;
- ``Project-URL`` has Homepage, Source, Changelog and Issues; the long description is Markdown;
- the entry points are there: the ``monitors`` command for core-monitor, the backend in the
  ``experiment_monitors`` group for each plugin;
- no requirement (extras included) has an upper bound (``<``, ``<=``, ``==``, ``~=``,
  ``!=`` or ``===``): requirements name the lowest version tested; the tested ranges live in
  the plugins and are checked at run time;
- CHANGELOG.md has an ``Unreleased`` section or one for each version built.

``twine check`` (run by the same session) checks that the long descriptions render. Standard
library only (plus ``packaging``, which the session installs), so it runs before anything of
this project is installed. Exit status 0 when every check passes, else 1.
"""

from __future__ import annotations

import argparse
import configparser
import re
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path
from typing import NamedTuple

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
#: Distribution -> its folder (the pyproject.toml that holds its one version).
FOLDERS = {
    "core-monitor": ROOT / "core",
    "trackio-monitor": ROOT / "plugins" / "trackio_monitor",
    "tensorboard-monitor": ROOT / "plugins" / "tensorboard_monitor",
    "wandb-monitor": ROOT / "plugins" / "wandb_monitor",
    "mlflow-monitor": ROOT / "plugins" / "mlflow_monitor",
    "csv-monitor": ROOT / "plugins" / "csv_monitor",
    "comet-monitor": ROOT / "plugins" / "comet_monitor",
    "aim-monitor": ROOT / "plugins" / "aim_monitor",
    "dvclive-monitor": ROOT / "plugins" / "dvclive_monitor",
    "swanlab-monitor": ROOT / "plugins" / "swanlab_monitor",
    "clearml-monitor": ROOT / "plugins" / "clearml_monitor",
    "prometheus-monitor": ROOT / "plugins" / "prometheus_monitor",
}
#: The supported Pythons (noxfile.PYTHONS says the same; CI tests the lowest and the highest).
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
URLS = ("Homepage", "Source", "Changelog", "Issues")
#: Entry points each distribution must declare: (group, name).
ENTRY_POINTS = {
    "core-monitor": [("console_scripts", "monitors")],
    "trackio-monitor": [("experiment_monitors", "trackio")],
    "tensorboard-monitor": [("experiment_monitors", "tensorboard")],
    "wandb-monitor": [("experiment_monitors", "wandb")],
    "mlflow-monitor": [("experiment_monitors", "mlflow")],
    "csv-monitor": [("experiment_monitors", "csv")],
    "comet-monitor": [("experiment_monitors", "comet")],
    "aim-monitor": [("experiment_monitors", "aim")],
    "dvclive-monitor": [("experiment_monitors", "dvclive")],
    "swanlab-monitor": [("experiment_monitors", "swanlab")],
    "clearml-monitor": [("experiment_monitors", "clearml")],
    "prometheus-monitor": [("experiment_monitors", "prometheus")],
}
#: Distributions whose SDK cannot be installed on every supported Python: the Pythons they
#: support (``Requires-Python`` then also names the first one left out). Aim's aimrocks has no
#: wheel for Python 3.13.
NARROWER_PYTHONS = {"aim-monitor": ("3.10", "3.11", "3.12")}
UPPER_BOUNDS = ("<", "<=", "==", "~=", "!=", "===")


def declared_version(folder: Path) -> str:
    with (folder / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]["version"]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Wheel(NamedTuple):
    metadata: Message
    entry_points: configparser.ConfigParser
    licenses: list[str]


def read_wheel(path: Path) -> Wheel:
    """The wheel's METADATA, its entry points and the license files it carries."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry = f"{info}/entry_points.txt"
        text = archive.read(entry).decode() if entry in names else ""
    entry_points = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    entry_points.optionxform = str  # type: ignore[assignment,method-assign]  # keep case
    entry_points.read_string(text)
    return Wheel(metadata, entry_points, [n for n in names if n.startswith(f"{info}/licenses/")])


def sdist_files(path: Path) -> tuple[Message, list[str]]:
    """The sdist's PKG-INFO and the names of its files (without the top folder)."""
    with tarfile.open(path) as archive:
        members = archive.getnames()
        top = members[0].split("/")[0]
        pkg_info = archive.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        metadata = Parser().parsestr(pkg_info.read().decode())
    return metadata, [m.split("/", 1)[1] for m in members if "/" in m]


def check_metadata(file: str, metadata: Message) -> list[str]:
    """What the index page of ``file`` would lack, one line per field."""
    problems = []
    say = problems.append
    name = normalise(metadata.get("Name", ""))
    pythons = NARROWER_PYTHONS.get(name, PYTHONS)
    requires = f">={pythons[0]}"
    if pythons != PYTHONS:
        requires += f",<{PYTHONS[PYTHONS.index(pythons[-1]) + 1]}"
    if metadata.get("License-Expression") != "MIT":
        say(f"{file}: License-Expression is {metadata.get('License-Expression')!r}, not 'MIT'")
    if SpecifierSet(metadata.get("Requires-Python") or "==0") != SpecifierSet(requires):
        # compared as sets of clauses: a build backend may write them in another order
        say(f"{file}: Requires-Python is {metadata.get('Requires-Python')!r}, "
            f"not {requires!r}")
    classifiers = metadata.get_all("Classifier") or []
    named = {c.rsplit(" :: ", 1)[1] for c in classifiers
             if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    if named != set(pythons):
        say(f"{file}: the Python classifiers name {sorted(named)}, not {list(pythons)}")
    urls = {u.split(",", 1)[0].strip() for u in metadata.get_all("Project-URL") or []}
    missing = [u for u in URLS if u not in urls]
    if missing:
        say(f"{file}: no Project-URL {missing}")
    if metadata.get("Description-Content-Type") != "text/markdown":
        say(f"{file}: Description-Content-Type is {metadata.get('Description-Content-Type')!r}")
    if not (metadata.get_payload() or "").strip():
        say(f"{file}: no long description (the README)")
    if not metadata.get("Summary"):
        say(f"{file}: no Summary")
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        bounded = [str(s) for s in requirement.specifier if s.operator in UPPER_BOUNDS]
        if bounded:
            say(f"{file}: requirement {line!r} has an upper bound {bounded}: name the lowest "
                f"version tested only (the tested range lives in the plugin)")
        if not any(s.operator in (">=", ">") for s in requirement.specifier):
            say(f"{file}: requirement {line!r} names no lowest version")
    return problems


def check_folder(folder: Path) -> list[str]:
    problems = []
    found = sorted(p for p in folder.iterdir() if not p.name.startswith("."))  # uv's .gitignore
    by_dist: dict[str, dict[str, Path]] = {}
    for path in found:
        if path.suffix == ".whl":
            name, version = path.name.split("-")[:2]
            by_dist.setdefault(normalise(name), {})[f"wheel {version}"] = path
        elif path.name.endswith(".tar.gz"):
            name, version = path.name[: -len(".tar.gz")].rsplit("-", 1)
            by_dist.setdefault(normalise(name), {})[f"sdist {version}"] = path
        else:
            problems.append(f"{path.name}: neither a wheel nor an sdist")
    for dist, folder_of in FOLDERS.items():
        version = declared_version(folder_of)
        files = by_dist.pop(dist, {})
        expected = {f"wheel {version}", f"sdist {version}"}
        if set(files) != expected:
            problems.append(f"{dist}: expected one sdist and one wheel of {version} (its "
                            f"pyproject.toml), found {sorted(files) or 'none'}")
            continue
        wheel, sdist = files[f"wheel {version}"], files[f"sdist {version}"]
        built = read_wheel(wheel)
        metadata = built.metadata
        problems += check_metadata(wheel.name, metadata)
        if not built.licenses:
            problems.append(f"{wheel.name}: no license file in .dist-info/licenses/")
        for group, name in ENTRY_POINTS[dist]:
            if not built.entry_points.has_option(group, name):
                problems.append(f"{wheel.name}: no entry point {name!r} in [{group}]")
        sdist_metadata, names = sdist_files(sdist)
        problems += check_metadata(sdist.name, sdist_metadata)
        for needed in ("LICENSE", "README.md", "pyproject.toml"):
            if needed not in names:
                problems.append(f"{sdist.name}: no {needed}")
        if metadata.get("Version") != version or sdist_metadata.get("Version") != version:
            problems.append(f"{dist}: metadata versions {metadata.get('Version')} / "
                            f"{sdist_metadata.get('Version')} differ from {version}")
    for dist in by_dist:
        problems.append(f"{dist}: not one of the five distributions {list(FOLDERS)}")
    problems += check_changelog({declared_version(f) for f in FOLDERS.values()})
    return problems


def check_changelog(versions: set[str]) -> list[str]:
    path = ROOT / "CHANGELOG.md"
    if not path.is_file():
        return ["CHANGELOG.md is missing"]
    headings = re.findall(r"^## \[?([^\]\s]+)", path.read_text(encoding="utf-8"), re.MULTILINE)
    if "Unreleased" in headings:
        return []
    missing = sorted(versions - set(headings))
    return [f"CHANGELOG.md has no section for {missing} (nor 'Unreleased')"] if missing else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the folder the sdists and wheels are in")
    args = parser.parse_args(argv)
    problems = check_folder(args.folder)
    for problem in problems:
        print(f"check_dists: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check_dists: {len(FOLDERS)} distributions, sdist and wheel each: metadata complete, "
          "no upper bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
