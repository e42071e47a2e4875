"""The controller's modules import each other without cycles (TYPE_CHECKING imports included):
collaborators are handed the controller as a :class:`ControllerCore`, not by importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import services.controller

PACKAGE = "services.controller"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:
                out.update(f"{PACKAGE}.{a.name}" for a in node.names)
            elif node.module.startswith(PACKAGE + "."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(PACKAGE + "."))
    return out


def _graph() -> dict[str, set[str]]:
    root = Path(services.controller.__file__).parent
    mods = {f"{PACKAGE}.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    return {m: _imports(p) & set(mods) for m, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def test_controller_modules_have_no_import_cycle() -> None:
    graph = _graph()
    assert f"{PACKAGE}.active" in graph and graph[f"{PACKAGE}.active"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
