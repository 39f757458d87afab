"""Which modules an `ectl` entry point can reach, read from the source (ast), so the image
tests can import every one of them inside the image.

A small call graph over elasticctr's own code: from an entry (module, command function),
follow what runs: a module's top-level statements (its imports, class bodies), the body of
each function that is referenced (a name of the same module, a name imported with
`from elasticctr.x import f`, or `alias.f` of an imported module), and everything they
import. Third-party imports met on the way are collected by top-level name; those in a
`try:` whose handler catches ImportError are optional (the code runs without them).
`if TYPE_CHECKING:` blocks are skipped. Dynamic imports (importlib) are not followed: name
such modules as entries.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "tools"
STDLIB = set(sys.stdlib_module_names)


@dataclass
class Reach:
    modules: set[str] = field(default_factory=set)  # elasticctr.* modules imported
    third_party: set[str] = field(default_factory=set)  # top-level import names
    optional: set[str] = field(default_factory=set)  # guarded by `except ImportError`
    functions: set[tuple[str, str]] = field(default_factory=set)  # (module, name) followed


@cache
def _module_file(name: str) -> Path | None:
    base = PACKAGE_ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _tree(module: str) -> ast.Module:
    path = _module_file(module)
    if path is None:
        raise ValueError(f"no module {module} under {PACKAGE_ROOT}")
    return ast.parse(path.read_text(), str(path))


@cache
def _defs(module: str) -> dict[str, ast.AST]:
    return {
        n.name: n
        for n in _tree(module).body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _is_package(module: str) -> bool:
    return _module_file(module).name == "__init__.py"


def _base(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _guarded(parents: list[ast.AST]) -> bool:
    for p in parents:
        if isinstance(p, ast.Try):
            for h in p.handlers:
                if h.type is None:
                    return True
                names = {getattr(n, "id", getattr(n, "attr", "")) for n in ast.walk(h.type)}
                if names & {"ImportError", "ModuleNotFoundError", "Exception"}:
                    return True
    return False


def _type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _walk(roots: list[ast.AST]):
    """(node, parents) under roots, skipping `if TYPE_CHECKING:` blocks."""
    stack = [(r, []) for r in roots]
    while stack:
        node, parents = stack.pop()
        if _type_checking(node):
            stack.extend((c, parents) for c in node.orelse)
            continue
        yield node, parents
        stack.extend((c, [*parents, node]) for c in ast.iter_child_nodes(node))


def _top_level(module: str) -> list[ast.AST]:
    """What runs at import: every statement except function bodies (decorators run)."""
    out: list[ast.AST] = []
    for node in _tree(module).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.extend(node.decorator_list)
            out.extend(d for d in node.args.defaults + node.args.kw_defaults if d)
        else:
            out.append(node)
    return out


def _bindings(module: str, nodes: list[ast.AST]) -> dict[str, tuple[str, str | None]]:
    """Local name -> (elasticctr module, attribute or None) bound by imports under nodes."""
    out: dict[str, tuple[str, str | None]] = {}
    for node, _ in _walk(nodes):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "elasticctr":
                    out[a.asname or a.name.split(".")[0]] = (
                        (a.name, None) if a.asname else ("elasticctr", None)
                    )
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            if base.split(".")[0] != "elasticctr":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out[a.asname or a.name] = (sub, None) if _module_file(sub) else (base, a.name)
    return out


def reach(entries: list[tuple[str, str | None]]) -> Reach:
    """entries: (module, function or None = the module's import only)."""
    result = Reach()
    seen: set[tuple[str, str | None]] = set()
    todo: list[tuple[str, str | None]] = []

    def want(module: str, name: str | None) -> None:
        if _module_file(module) is None:
            return
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b, a.b.c
            key = (".".join(parts[:i]), None)
            if _module_file(key[0]) and key not in seen:
                seen.add(key)
                todo.append(key)
        if name is not None and (module, name) not in seen:
            seen.add((module, name))
            todo.append((module, name))

    for module, function in entries:
        if function is not None:
            assert function in _defs(module), f"{module} has no function {function}"
        want(module, function)

    while todo:
        module, name = todo.pop()
        if name is None:
            result.modules.add(module)
            roots = _top_level(module)
        else:
            node = _defs(module).get(name)
            if node is None:  # a constant or an imported name re-exported
                continue
            result.functions.add((module, name))
            roots = [node]
        module_names = _bindings(module, _top_level(module))
        local_names = {**module_names, **_bindings(module, roots)}
        # At import time a function runs only when called (or applied as a decorator); a
        # reference (`MODELS = {"dnn": _dnn}`) does not run it. Inside a function body any
        # reference counts: it may be called later or passed on as a callback.
        called = {id(r) for r in roots if isinstance(r, ast.Name)}
        called |= {id(n.func) for n, _ in _walk(roots) if isinstance(n, ast.Call)}
        called |= {
            id(n.func.value)
            for n, _ in _walk(roots)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        for node, parents in _walk(roots):
            if name is None and isinstance(node, ast.Name | ast.Attribute):
                target = node if isinstance(node, ast.Name) else node.value
                if id(node) not in called and id(target) not in called:
                    continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                optional = _guarded(parents)
                if isinstance(node, ast.Import):
                    targets = [(a.name, None) for a in node.names]
                else:
                    base = _base(module, node)
                    targets = [(base, a.name) for a in node.names]
                for target, attr in targets:
                    top = target.split(".")[0]
                    if top == "elasticctr":
                        sub = f"{target}.{attr}" if attr else None
                        if sub and _module_file(sub):
                            want(sub, None)
                        else:
                            want(target, attr)
                    elif top and top not in STDLIB and top != "__future__":
                        (result.optional if optional else result.third_party).add(top)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in _defs(module) and node.id != name:
                    want(module, node.id)
                elif node.id in local_names and local_names[node.id][1]:
                    want(*local_names[node.id])
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                bound = local_names.get(node.value.id)
                if bound and bound[1] is None:
                    sub = f"{bound[0]}.{node.attr}"
                    want(sub, None) if _module_file(sub) else want(bound[0], node.attr)
    result.third_party -= {"elasticctr"}
    return result
