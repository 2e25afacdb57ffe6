"""Each plugin's modules import one way: no circle, and ``storage`` (the names a backend writes
and its reader reads) imports neither the backend, the reader nor the media writer.

Read from the source files with ``ast`` (every ``import``, also inside functions), so a circle
hidden in a function-level import is found too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Every plugin folder on disk (``plugins/<name>_monitor/src/<name>_monitor``): a new plugin is
#: covered the day its folder lands.
PACKAGES = {path.name.removesuffix("_monitor"): path
            for path in sorted(ROOT.glob("plugins/*_monitor/src/*_monitor"))
            if (path / "__init__.py").exists()}


#: Plugins whose ``media`` module converts both ways (to the tracker's records and back), so
#: their reader imports it: SwanLab's media records.
MEDIA_BOTH_WAYS = {"swanlab"}


def imports(package: Path) -> dict[str, set[str]]:
    """``{module: {sibling modules it imports}}`` for every module of ``package``."""
    modules = {path.stem for path in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for module in modules:
        found: set[str] = set()
        for node in ast.walk(ast.parse((package / f"{module}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:  # from . import a, b
                    found.update(alias.name for alias in node.names)
        graph[module] = found & modules
    return graph


def sdk_importers(package: Path, sdk: str) -> set[str]:
    """The modules of ``package`` that import ``sdk`` (or one of its modules) themselves."""
    found = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom)
                     and node.level == 0 else [])
            if any(name == sdk or name.startswith(sdk + ".") for name in names):
                found.add(path.stem)
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return [*path[path.index(imported):], imported]
            if imported not in state and (found := visit(imported, [*path, imported])):
                return found
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return None


@pytest.mark.parametrize("plugin", sorted(PACKAGES))
def test_no_module_of_a_plugin_imports_one_that_imports_it(plugin):
    graph = imports(PACKAGES[plugin])
    assert cycle(graph) is None, f"{plugin}_monitor import circle: {' -> '.join(cycle(graph))}"


@pytest.mark.parametrize("plugin", sorted(PACKAGES))
def test_backend_and_reader_share_the_storage_names_and_nothing_imports_upward(plugin):
    """The reader and the media writer sit side by side below the backend, and ``storage``
    below them both (the media writer, where there is one, imports it where media have names
    of their own)."""
    graph = imports(PACKAGES[plugin])
    for module in ("backend", "reader"):
        assert "storage" in graph[module], f"{plugin}_monitor.{module} does not use storage"
    assert graph["storage"] <= {"_compat", "folder"}, graph["storage"]
    below = {"backend"} if plugin in MEDIA_BOTH_WAYS else {"backend", "media"}
    assert not graph["reader"] & below, graph["reader"]
    assert not graph.get("media", set()) & {"backend", "reader"}, graph["media"]


def test_every_plugin_folder_is_covered():
    """The list above is read from disk, and holds every first-party plugin."""
    assert {"trackio", "tensorboard", "wandb", "mlflow", "csv", "comet", "aim", "dvclive",
            "swanlab", "clearml", "prometheus"} <= set(PACKAGES)


def test_only_trackios_compat_module_imports_trackio():
    assert sdk_importers(PACKAGES["trackio"], "trackio") == {"_compat"}


def test_the_checks_find_a_circle_and_a_direct_sdk_import(tmp_path):
    """The helpers above, on a package made to break both rules."""
    (tmp_path / "reader.py").write_text("def f():\n    from .media import g\n")
    (tmp_path / "media.py").write_text("from . import reader\nimport trackio.utils\n")
    assert cycle(imports(tmp_path)) == ["media", "reader", "media"]
    assert sdk_importers(tmp_path, "trackio") == {"media"}


#: Plugins whose ``check_sdk`` does more than report ``_compat.problems()``, and why: a
#: method of their own, where every other plugin declares it in one line.
CHECK_SDK_OF_THEIR_OWN = {
    "clearml": "sets aside the ClearML task variables a process inherited before importing it",
    "swanlab": "also needs SwanLab's dashboard package when SWANLAB_MODE=local",
}


def check_sdk_line(package: Path) -> str | None:
    """The source of ``check_sdk = ...`` in the backend class of ``package``'s ``backend.py``;
    ``None`` when the class defines it otherwise (a method) or not at all."""
    tree = ast.parse((package / "backend.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "check_sdk" for t in item.targets
                ):
                    return ast.unparse(item)
    return None


@pytest.mark.parametrize("plugin", sorted(set(PACKAGES) - set(CHECK_SDK_OF_THEIR_OWN)))
def test_check_sdk_is_declared_in_one_line(plugin):
    """The SDK-problems idiom is one line the Backend protocol type-checks: the plugin's fenced
    internals (``_compat.problems``), or ``no_sdk`` for a plugin without an SDK."""
    wanted = ("check_sdk = staticmethod(_compat.problems)"
              if (PACKAGES[plugin] / "_compat.py").exists() else "check_sdk = staticmethod(no_sdk)")
    assert check_sdk_line(PACKAGES[plugin]) == wanted


def test_the_one_line_check_finds_a_method(tmp_path):
    (tmp_path / "backend.py").write_text(
        "class M:\n    @staticmethod\n    def check_sdk():\n        return []\n")
    assert check_sdk_line(tmp_path) is None
    (tmp_path / "backend.py").write_text("class M:\n    check_sdk = staticmethod(no_sdk)\n")
    assert check_sdk_line(tmp_path) == "check_sdk = staticmethod(no_sdk)"
