"""The package's import graph, read from the source (every import, also those inside functions
and under TYPE_CHECKING): the result is data that depends on no stage, the renderers and the store
read only the result and the shared leaves, and no import circle remains (the package root
aside: it re-exports the API, so everything is reachable from it)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "nsys_collective"
ROOT = "nsys_collective"


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == ROOT:
                for alias in node.names:  # `from pkg import module` names a module
                    deps.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.split(".")[0] == ROOT}
        graph[name] = {d for d in deps if d in modules and d not in (name, ROOT)}
    return graph


GRAPH = _graph()


# What every stage may share: small modules of facts and helpers that import nothing of the
# package but each other (checked below).
LEAVES = {f"{ROOT}.{m}" for m in ("causes", "units", "errors", "version", "glossary", "outputs", "ingest.sqlite_kind")}


def test_the_shared_leaves_are_leaves():
    assert {m: sorted(GRAPH[m] - LEAVES) for m in LEAVES if GRAPH[m] - LEAVES} == {}


def test_the_result_depends_only_on_shared_leaves():
    assert GRAPH[f"{ROOT}.result"] <= LEAVES, GRAPH[f"{ROOT}.result"] - LEAVES


def test_render_and_store_read_only_the_result_and_shared_leaves():
    for layer in ("render", "store"):
        allowed = LEAVES | {f"{ROOT}.result"} | {m for m in GRAPH if m.startswith(f"{ROOT}.{layer}")}
        wrong = {m: sorted(GRAPH[m] - allowed) for m in GRAPH if m.startswith(f"{ROOT}.{layer}") and GRAPH[m] - allowed}
        assert wrong == {}, f"{layer}/ imports beyond the result and the shared leaves: {wrong}"


def test_no_import_circle():
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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
                circles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert circles == []


def test_the_graph_is_read():
    """A test that cannot fail is a defect: the reader sees the edges it checks."""
    assert f"{ROOT}.result" in GRAPH[f"{ROOT}.render.terminal"]
    assert f"{ROOT}.attribution.whatif.candidate" in GRAPH[f"{ROOT}.attribution.blocking"]
    assert GRAPH[f"{ROOT}.causes"] == {f"{ROOT}.errors", f"{ROOT}.units"}
