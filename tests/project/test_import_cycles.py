"""The package's modules import each other without a cycle.

Every import counts: module level, under ``if TYPE_CHECKING:``, and inside a function (a
deferred import only hides a cycle from the interpreter, not from a reader). The graph
is read from the source with ``ast``, so nothing is imported to build it. An edge goes
from a module to each module of the package it names (``from . import x`` names module
``x``; ``from .x import y`` names module ``x``, and ``x.y`` too when that is a module).
A package's ``__init__`` runs before its modules, but an import of ``pkg.mod`` is an edge
to ``pkg.mod`` only: ``jsonl_sessions/__init__.py`` imports the whole API, so counting
it would make every module part of a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jsonl_sessions

PACKAGE = Path(jsonl_sessions.__file__).parent

#: Edges of a cycle that is being removed elsewhere: (importer, imported). Each must still
#: exist (a stale entry fails), so the list only shrinks.
KNOWN: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module name -> the package's modules it imports (any import anywhere in it)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "jsonl_sessions.jsonl.layout" in graph["jsonl_sessions.jsonl.guard"]  # module level
    assert "jsonl_sessions._platform" in graph["jsonl_sessions.jsonl.lines"]  # from .. import x
    assert "jsonl_sessions.aio" in graph["jsonl_sessions"]  # inside a function (the lazy __getattr__)
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(planted) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    graph = import_graph()
    for importer, imported in KNOWN:
        assert imported in graph[importer], f"{importer} no longer imports {imported}: drop it from KNOWN"
        graph[importer].discard(imported)
    found = cycles(graph)
    assert not found, "import cycles (TYPE_CHECKING and deferred imports included): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_viewer_and_the_command_line_share_the_display_model_below_both() -> None:
    """What a message shows is one module (``display``) that imports neither the viewer nor
    the command line; the viewer does not reach up into the command line for it."""
    graph = import_graph()
    above = ("jsonl_sessions.cli", "jsonl_sessions.viewer")
    assert not {m for m in graph["jsonl_sessions.display"] if m.startswith(above)}
    for module, imported in graph.items():
        if module.startswith("jsonl_sessions.viewer"):
            assert not {m for m in imported if m.startswith("jsonl_sessions.cli")}, module
    assert "jsonl_sessions.display" in graph["jsonl_sessions.cli.output"]
    assert "jsonl_sessions.display" in graph["jsonl_sessions.viewer.app"]
