"""How the core's modules depend on each other: one way, no circle (an import inside a
function counts: it is a circle the interpreter happens to survive)."""

from __future__ import annotations

import ast
from pathlib import Path

import core_monitor

ROOT = Path(core_monitor.__file__).parent


def module_names() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The core modules ``name`` imports, anywhere in its body; ``from . import x`` of a
    submodule counts as importing ``x``, not the package."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            candidates = subs if len(subs) == len(node.names) else [target, *subs]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_core_has_no_import_circle():
    modules = module_names()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph["core_monitor.discovery"], "the graph must see imports (a parser check)"
    assert circles(graph) == []


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_entry_points_are_read_in_one_module():
    readers = sorted(str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
                     if "entry_points(" in path.read_text(encoding="utf-8"))
    assert readers == ["plugins.py"]


#: Modules of the training process's side of dispatch, which a writer process never runs.
TRAINER_ONLY = {"core_monitor.monitor", "core_monitor.dispatch.fanout",
                "core_monitor.dispatch.processes", "core_monitor.dispatch.threads",
                "core_monitor.dispatch.policy", "core_monitor.dispatch.channel",
                "core_monitor.dispatch.sync", "core_monitor.dispatch.modes",
                "core_monitor.syncing", "core_monitor.distributed", "core_monitor.system"}


def test_a_writer_process_imports_only_what_it_runs():
    """``python -m core_monitor.dispatch.writer`` in a fresh interpreter: none of the trainer's
    engine (the fan-out, the channels, the policy, ``Monitor``) is imported."""
    import subprocess
    import sys

    code = ("import sys, core_monitor.dispatch.writer; "
            "print('\\n'.join(m for m in sys.modules if m.startswith('core_monitor')))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, timeout=120).stdout.split())
    assert "core_monitor.dispatch.backends" in loaded  # the check sees the writer's imports
    assert loaded & TRAINER_ONLY == set()
