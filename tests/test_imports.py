"""Imports point one way: the packages of ``rlvr`` form layers (``LAYERS``, drawn in
``docs/design.md`` §2), and every import, at module level or inside a function, and every
``"module:attr"`` reference a registry imports on first use, goes to the same layer or one below;
no two packages import each other; no module imports itself back through others; inside the
reproduction, the core imports no figure and the figures no report; no module is over
``MAX_LINES`` lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The layers, bottom first: a module may import its own layer and the layers below it. A package
#: stands for its subpackages; ``rlvr`` is the package's own ``__init__`` (it registers the
#: environments).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        (
            "rlvr.config",
            "rlvr.device",
            "rlvr.data_paths",
            "rlvr.locks",
            "rlvr.lifetime",
            "rlvr.blas",
            "rlvr.repro",
            "rlvr.prompt_format",
            "rlvr.registries",
            "rlvr.errors",
            "rlvr.files",
        ),
    ),
    ("environments", ("rlvr.envs", "rlvr")),
    ("policy", ("rlvr.agents",)),
    ("models", ("rlvr.models",)),
    ("evaluation", ("rlvr.eval",)),
    ("training", ("rlvr.training",)),
    ("adapters", ("rlvr.integrations",)),
    ("reproduction", ("rlvr.reproduce",)),
    ("commands", ("rlvr.cli", "rlvr.fetch_data", "rlvr.machine", "rlvr.sample_score")),
]
#: A package's command-line entry point (``rlvr.eval.cli``: ``rlvr eval``) is a command: the top
#: layer, whatever package it sits in.
COMMAND = re.compile(r"(^|\.)cli$")
#: A registry's lazy reference to an attribute of a module (``"rlvr.envs.kk.traces:KK"``).
REFERENCE = re.compile(r"^(rlvr(?:\.\w+)*):\w+$")
MAX_LINES = 450


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
    at module level or inside a function, and every ``"module:attr"`` string it holds (a
    package's own ``__init__`` is not an edge of its submodules: Python runs it first without the
    submodule importing it)."""
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
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                ref = REFERENCE.match(node.value)
                names = [ref[1]] if ref else []
            else:
                continue
            graph[mod] |= {t for t in map(target, names) if t and t != mod}
    return graph


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``module`` (its longest listed package; commands on top)."""
    if COMMAND.search(module):
        return len(LAYERS) - 1
    best, found = -1, None
    for i, (_, packages) in enumerate(LAYERS):
        for p in packages:
            inside = module == p or (p != "rlvr" and module.startswith(p + "."))
            if inside and len(p) > best:
                best, found = len(p), i
    if found is None:
        raise KeyError(f"{module} is in no layer of tests/test_imports.py LAYERS")
    return found


def package_of(module: str) -> str:
    """The node of the package graph: ``rlvr.<package>`` (a command module is its own)."""
    if COMMAND.search(module) or layer_of(module) == len(LAYERS) - 1:
        return module
    return ".".join(module.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
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


def test_every_import_points_to_its_layer_or_below():
    graph = import_graph()
    upward = [
        f"{mod} ({LAYERS[layer_of(mod)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
        for mod, targets in sorted(graph.items())
        for t in sorted(targets)
        if layer_of(t) > layer_of(mod)
    ]
    assert upward == []


def test_no_two_packages_import_each_other():
    packages: dict[str, set[str]] = {}
    for mod, targets in import_graph().items():
        node = packages.setdefault(package_of(mod), set())
        node |= {package_of(t) for t in targets} - {package_of(mod)}
    assert cycles(packages) == []


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_checks_see_imports_inside_functions_and_references():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    imports = import_graph()
    # `rlvr sample --model` reads a prompt format from inside a function; envs name their warm
    # starts by reference
    assert "rlvr.models.prompt_formats" in imports["rlvr.sample_score"]
    assert "rlvr.envs.kk.traces" in imports["rlvr.envs"]
    assert layer_of("rlvr.eval.cli") == layer_of("rlvr.cli") > layer_of("rlvr.reproduce.runs")
    assert layer_of("rlvr.envs.kk.env") < layer_of("rlvr.agents.rollout.hf")


REPRODUCE = "rlvr.reproduce."
CORE = {
    "archive",
    "grid",
    "gpu_plan",
    "keys",
    "runs",
    "sft_reference",
    "records",
    "plan",
    "pool",
    "common",
}
REPORT = {"report", "compare", "check"}
#: The verl engine: launch folders and results read back, on the core and the figures' plan.
VERL = {"verl", "verl.launch", "verl.run_script", "verl.run_tools", "verl.results"}


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
        elif name in VERL:
            assert not inside & REPORT, f"{mod} (verl engine) imports {sorted(inside & REPORT)}"
        elif name not in REPORT | {"cli", "parallel", "profiles"}:  # a figure or its helpers
            assert not inside & (REPORT | VERL), f"{mod} (a figure) imports {sorted(inside)}"


def test_no_module_is_over_the_line_limit():
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    long = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert long == {}, f"split along a real seam: {long}"
