"""Imports point one way: no cycle in the ``rlvr`` package, counting the imports inside functions
too, and the reproduce package's core imports none of its figures or report."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "rlvr").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """``module -> the rlvr modules it imports`` from every ``import`` statement of its source,
    at module level or inside a function (a package's own ``__init__`` is not an edge of its
    submodules: Python runs it first without the submodule importing it)."""
    mods = modules()

    def target(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            graph[mod] |= {t for t in map(target, names) if t and t != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_imports_inside_functions():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    # trainer -> eval: evaluation must not import the trainer back, not even in a function
    assert "rlvr.agents.trainer" not in import_graph()["rlvr.eval.runner"]


REPRODUCE = "rlvr.reproduce."
CORE = {"grid", "runs", "sft_reference", "plan", "pool", "common"}
REPORT = {"report", "compare", "check"}


def test_the_reproduce_core_imports_no_figure_and_the_figures_no_report():
    graph = import_graph()
    parts = {m.removeprefix(REPRODUCE) for m in graph if m.startswith(REPRODUCE)}
    assert CORE | REPORT <= parts
    for mod, targets in graph.items():
        if not mod.startswith(REPRODUCE):
            continue
        name = mod.removeprefix(REPRODUCE)
        inside = {t.removeprefix(REPRODUCE) for t in targets if t.startswith(REPRODUCE)}
        if name in CORE:
            assert inside <= CORE, f"{mod} (core) imports {sorted(inside - CORE)}"
        elif name not in REPORT | {"cli", "parallel", "profiles"}:  # a figure or its helpers
            assert not inside & REPORT, f"{mod} (a figure) imports {sorted(inside & REPORT)}"
