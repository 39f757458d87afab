"""The packages of elasticctr import each other without cycles.

Every import counts, including the ones inside functions (which hide a cycle from
Python at import time, not from a reader): the graph is built with `ast` from the
source, one node per top-level part (`train`, `local`, `values`, `constants`, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from elasticctr.constants import repo_root

PACKAGE = repo_root() / "tools" / "elasticctr"


def _part(module: str) -> str | None:
    """'elasticctr.train.roles' -> 'train'; None outside the package."""
    parts = module.split(".")
    if parts[0] != "elasticctr" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> set[str]:
    """Every elasticctr module `path` imports, anywhere in the file (absolute names)."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    here = list(rel.parts)
    if here[-1] == "__init__":
        here = here[:-1]
    else:
        here = here[:-1]  # the package the module lives in
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # `from elasticctr import train` imports the part `train`
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.startswith("elasticctr.")}


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        src = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if src == "__init__":
            continue
        deps = graph.setdefault(src, set())
        for module in _imports(path):
            dst = _part(module)
            if dst and dst != src and dst in parts and dst != "__init__":
                deps.add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.mark.fast
def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.fast
def test_the_graph_sees_function_level_imports(tmp_path):
    source = PACKAGE / "values.py"
    assert "elasticctr.zoo" in _imports(source)
    graph = import_graph()
    assert {"cli", "train", "local", "values", "constants"} <= set(graph)
    assert "train" in graph["cli"]  # `ectl train` imports it inside its commands


@pytest.mark.fast
def test_elasticctr_packages_import_without_cycles():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between parts of elasticctr: " + " -> ".join(cycle)


@pytest.mark.fast
def test_versions_are_read_without_the_training_code():
    """cube and serving read versions through elasticctr.versions / modelstore, never
    through elasticctr.train (which pulls in Paddle and the trainer runtime)."""
    graph = import_graph()
    for reader in ("cube", "serving", "modelstore", "versions", "data"):
        assert "train" not in graph[reader], reader
    assert {"versions", "modelstore"} <= graph["cube"] and "modelstore" in graph["serving"]
