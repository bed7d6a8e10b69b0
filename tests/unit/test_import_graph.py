"""Data flows one way: no import cycle in ``sparkimg/``, counting imports inside functions too
(a function-level import that dodges a cycle is still a cycle), between modules and between
the stages (top-level modules and subpackages)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparkimg"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the sparkimg modules it imports, anywhere in its body."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*base, node.module] if node.module else base)
                else:
                    origin = node.module or ""
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod.
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name and t != "sparkimg"}
    return graph


def stage_of(module: str) -> str:
    """``sparkimg.compile.container`` -> ``sparkimg.image``; top-level modules are stages of their own."""
    return ".".join(module.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                item = stack.pop()
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_relative_and_function_level_imports() -> None:
    graph = import_graph()
    assert "sparkimg.spec" in graph["sparkimg.lock.resolve"]
    assert "sparkimg.spec.kernel_label" in graph["sparkimg.image.assemble"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_no_stage_import_cycle() -> None:
    """Stages (top-level modules and subpackages) import each other one way. A leaf module (one that
    imports nothing from sparkimg, such as a table of data) adds no dependency on its stage's logic,
    so importing it is not an edge between stages."""
    graph = import_graph()
    leaves = {module for module, imported in graph.items() if not imported}
    assert "sparkimg.prewarm.catalogue" in leaves
    stages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        others = {stage_of(m) for m in imported - leaves} - {stage_of(module)}
        stages.setdefault(stage_of(module), set()).update(others)
    assert cycles(stages) == []


# What the ground floor may stand on besides itself: the error hierarchy and the one JSON encoding
# (a leaf: it imports nothing of sparkimg).
GROUND = ("sparkimg._internal", "sparkimg.errors", "sparkimg.formats.canonical")


def test_internal_is_the_ground_floor() -> None:
    """``sparkimg._internal`` serves every stage and imports none: a helper that needs a stage's
    logic belongs in that stage's room."""
    graph = import_graph()
    assert not graph["sparkimg.formats.canonical"]
    above = {module: sorted(d for d in imported if not d.startswith(GROUND))
             for module, imported in graph.items() if module.startswith("sparkimg._internal")}
    assert {m: d for m, d in above.items() if d} == {}


def test_formats_stand_on_the_ground_floor_only() -> None:
    """``sparkimg.formats`` (one module per file format) is the floor above ``_internal``: every
    stage reads and writes its formats, so a format that imported a stage (the spec, say) would
    tie that stage under every other one."""
    graph = import_graph()
    above = {module: sorted(d for d in imported if not d.startswith((*GROUND, "sparkimg.formats")))
             for module, imported in graph.items() if module.startswith("sparkimg.formats")}
    assert {m: d for m, d in above.items() if d} == {}


def test_no_stage_imports_another_stages_private_module() -> None:
    """A module named with a leading underscore is its stage's own (``_internal`` is everyone's)."""
    graph = import_graph()
    crossing = sorted((module, d) for module, imported in graph.items() for d in imported
                      if d.rpartition(".")[2].startswith("_") and not d.startswith("sparkimg._internal")
                      and stage_of(d) != stage_of(module))
    assert crossing == []


def test_only_faces_sit_at_the_top() -> None:
    """Directly in ``sparkimg/``: the facade, the errors, the events and the package face; every
    stage is a package."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "api.py", "errors.py", "events.py"]
