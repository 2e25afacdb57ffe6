"""``monitors new NAME``: write a complete backend plugin distribution to start from.

The layout (the templates are package data, in ``core_monitor/_template``), five files::

    <name>-monitor/
        pyproject.toml              entry point ``<name> = "<name>_monitor:<Name>Monitor"`` in the
                                    group ``experiment_monitors``; ``core-monitor`` dependency;
                                    extra ``test`` (``core-monitor[testing]``); pytest and ruff
        README.md
        src/<name>_monitor/
            __init__.py             the backend class (``core_monitor.hookspecs.Backend``) and
                                    its reader, read_rows(run) and read_config(run); imports no
                                    SDK at module level
            py.typed
        tests/test_<name>_monitor.py    the contract kit (``core_monitor.testing.MonitorContract``)
                                        and the backend's own tests

The generated backend stores each scalar as a CSV row under ``run.log_dir``; it builds into a
wheel and passes the kit unchanged, so an author replaces the storage and keeps the tests green.
One module, as the plugins of simonw's ``llm`` and of sqlfluff are, grown into several only
when the backend needs them; the scheme follows the generators of other plugin ecosystems
(simonw's ``llm-plugin`` and ``datasette-plugin`` cookiecutters, OpenTelemetry contrib's
``_template/``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

#: A backend name: lower-case letters and digits, words joined by ``-`` or ``_``.
NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
MAX_NAME = 40

#: Template file (in ``_template/``) -> path in the distribution; ``{package}`` is filled in.
FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "module.py.tmpl": "src/{package}/__init__.py",
    "test_module.py.tmpl": "tests/test_{package}.py",
}


class ScaffoldError(ValueError):
    """``monitors new`` cannot write the plugin: a bad name or an existing destination."""


@dataclass(frozen=True)
class PluginNames:
    """Every name of a plugin derived from its backend name, e.g. ``"csv"``.

    Attributes:
        name: the backend (entry-point) name users select, ``csv``.
        dist: the distribution name, ``csv-monitor``.
        package: the import package, ``csv_monitor``.
        cls: the backend class, ``CsvMonitor``.
    """

    name: str
    dist: str
    package: str
    cls: str


def plugin_names(name: str) -> PluginNames:
    """Check ``name`` and derive the distribution, package and class names from it.

    The rules keep every derived name valid: a PEP 508 distribution name, a Python package
    name and an entry-point name that ``Monitor([name])`` selects.

    Raises:
        ScaffoldError: ``name`` is empty, too long, not lower-case letters/digits joined by
            ``-`` or ``_``, ends in ``monitor`` (it is added), or is ``core`` (the package
            ``core_monitor`` is core-monitor's own); the message names the value and the fix.
    """
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > MAX_NAME:
        hint = ""
        if isinstance(name, str) and NAME.fullmatch(name.lower()):
            hint = f" (did you mean {name.lower()!r}?)"
        raise ScaffoldError(
            f"backend name {name!r} is not valid{hint}: use lower-case letters and digits, "
            f"words joined by '-' or '_', starting with a letter, at most {MAX_NAME} characters, "
            "e.g. 'csv' or 'my-tracker'; it becomes the entry-point name users select"
        )
    words = re.split(r"[-_]", name)
    if words[-1] in ("monitor", "monitors"):
        shorter = "-".join(words[:-1]) or "csv"
        raise ScaffoldError(
            f"backend name {name!r} ends in {words[-1]!r}, which the scaffold adds itself "
            f"(distribution '<name>-monitor'); use {shorter!r}"
        )
    if name == "core":
        raise ScaffoldError(
            f"backend name {name!r} would make the package '{name}_monitor', which clashes with "
            "core-monitor's own; choose another name"
        )
    package = "_".join(words) + "_monitor"
    return PluginNames(
        name=name,
        dist="-".join(words) + "-monitor",
        package=package,
        cls="".join(w.capitalize() for w in words) + "Monitor",
    )


def _core_requirement() -> str:
    """``core-monitor>=<this version>``: the generated plugin relies on this core's kit."""
    from . import __version__

    if re.fullmatch(r"\d+(\.\d+)*", __version__):
        return f"core-monitor>={__version__}"
    return "core-monitor"


def render(names: PluginNames) -> dict[str, str]:
    """The distribution's files, ``{relative path: text}``, rendered from the templates.

    Raises:
        KeyError: a template names a placeholder that is not filled (a bug of the templates).
    """
    values = {**vars(names), "core_requirement": _core_requirement()}
    root = resources.files("core_monitor") / "_template"
    files: dict[str, str] = {}
    for template, target in FILES.items():
        text = root.joinpath(template).read_text(encoding="utf-8")
        files[target.format(package=names.package)] = Template(text).substitute(values)
    files[f"src/{names.package}/py.typed"] = ""
    return files


def create_plugin(name: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Write a new plugin distribution for the backend ``name``; return its folder.

    The files are written to a temporary folder next to the destination, which is then
    renamed into place: either the whole distribution appears, or nothing does.

    Args:
        name: the backend name, e.g. ``"csv"`` (see ``plugin_names``).
        directory: the folder to create (it must not exist; its parent must); default
            ``./<name>-monitor`` (e.g. ``./csv-monitor``).

    Raises:
        ScaffoldError: a bad ``name`` (``plugin_names``), ``directory`` exists, or its parent
            folder does not.
        OSError: writing failed (nothing is left behind).
    """
    names = plugin_names(name)
    target = Path(directory if directory is not None else names.dist).absolute()
    if target.exists() or target.is_symlink():
        raise ScaffoldError(
            f"{target} already exists; nothing was written. Choose another folder with "
            "--dir, or remove that one first"
        )
    if not target.parent.is_dir():
        raise ScaffoldError(
            f"the parent folder {target.parent} does not exist; nothing was written. "
            "Create it first, or choose another folder with --dir"
        )
    files = render(names)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        staging.chmod(0o777 & ~_umask())
        os.rename(staging, target)  # fails if a non-empty target appeared meanwhile
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _umask() -> int:
    """The process umask (``mkdtemp`` makes a 0o700 folder; a plugin folder is a normal one)."""
    current = os.umask(0)
    os.umask(current)
    return current
