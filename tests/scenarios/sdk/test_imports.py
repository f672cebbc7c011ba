"""The SDK's modules depend on each other one way: each imports alone in a fresh interpreter, the graph of their
imports of each other has no cycle, and none imports another inside a function (which is how a cycle hides: it
only runs once the module is loaded, so the interpreter never sees it, until a type or a name moves)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "python" / "conduit"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
#: The package itself (its __init__.py) as a node of the graph: ``from . import Agent`` imports it.
TOP = "conduit"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the module of the package it imports
    line: int
    where: str  # "module" (runs at import), "function" (runs when called) or "type" (under TYPE_CHECKING)


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules NODE imports (none for a module outside the package)."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1] for a in node.names if a.name.startswith(f"{TOP}.")]
    if node.level == 0 and node.module != TOP and not (node.module or "").startswith(f"{TOP}."):
        return []
    module = node.module if node.level else (node.module or "").removeprefix(TOP).lstrip(".") or None
    if module:
        return [module.split(".")[0]]
    # `from . import x`: x is a module of the package, or a name of its __init__.
    return sorted({a.name if a.name in MODULES else TOP for a in node.names})


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(module: str) -> list[Import]:
    """Every import of a module of the package in MODULE's source, with where it runs."""
    path = PACKAGE / ("__init__.py" if module == TOP else f"{module}.py")
    found: list[Import] = []

    def walk(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend(Import(module, t, node.lineno, where) for t in _targets(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            where = "function" if where == "module" else where
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                walk(child, "type")
            for child in node.orelse:
                walk(child, where)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, where)

    walk(ast.parse(path.read_text(), str(path)), "module")
    return found


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph EDGES as the modules along it (first == last), or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every path from it is seen
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = "done"
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


@pytest.mark.parametrize("module", [TOP] + [f"{TOP}.{m}" for m in MODULES])
def test_each_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"import {module} failed:\n{r.stderr}"


def test_the_modules_import_each_other_without_a_cycle() -> None:
    # What runs counts, at import or when a function is called; an import for type checkers alone does not.
    edges: dict[str, set[str]] = {}
    for m in [TOP, *MODULES]:
        for i in imports(m):
            if i.where != "type":
                edges.setdefault(m, set()).add(i.target)
    found = cycle(edges)
    assert found is None, f"the SDK's modules import each other in a cycle: {' -> '.join(found)}"


def test_no_module_imports_another_inside_a_function() -> None:
    inside = [i for m in [TOP, *MODULES] for i in imports(m) if i.where == "function"]
    assert not inside, "imports of the package inside functions (at module top, or under TYPE_CHECKING for a " \
        "type): " + ", ".join(f"{i.source}.py:{i.line} imports {i.target}" for i in inside)
