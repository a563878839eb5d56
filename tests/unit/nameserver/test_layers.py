"""nameserver's folders import one another one way: no cycle between its sub-packages (and
top-level modules), so each layer can be read, tested and replaced on its own.

Imports under ``if TYPE_CHECKING:`` are left out: they name types for mypy and load nothing
(the fronts and the domains name :class:`nameserver.node.NodeFacade` that way, while the
facade imports the domains). The import-linter contracts in ``pyproject.toml`` say who may
import whom; this test says that, whatever they allow, no loop closes.
"""

from __future__ import annotations

import grimp

#: Module imports the folder graph leaves out, each with its reason.
ALLOWED: set[tuple[str, str]] = set()


def _unit(module: str) -> str:
    """The folder (or top-level module) of ``module``: ``nameserver.kv.apply`` -> ``kv``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def folder_graph() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(importer folder, imported folder) -> the module imports behind that edge."""
    graph = grimp.build_graph("nameserver", exclude_type_checking_imports=True)
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if not imported.startswith("nameserver") or (importer, imported) in ALLOWED:
                continue
            a, b = _unit(importer), _unit(imported)
            if a and b and a != b:
                edges.setdefault((a, b), []).append((importer, imported))
    return edges


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), sorted."""
    succ: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
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
                found.append(sorted(component))

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return sorted(found)


def test_cycles_finds_a_loop_and_only_a_loop() -> None:
    assert cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert cycles({("a", "b"), ("b", "c"), ("a", "c")}) == []


def test_no_import_cycle_between_nameserver_folders() -> None:
    edges = folder_graph()
    found = cycles(set(edges))
    report = [
        f"{a} -> {b}: {', '.join(f'{m} imports {i}' for m, i in sorted(edges[a, b])[:3])}"
        for component in found
        for (a, b) in sorted(edges)
        if a in component and b in component
    ]
    assert not found, "import cycles between nameserver's folders:\n" + "\n".join(report)


def test_the_facade_reaches_no_front() -> None:
    """What the node's facade imports, directly or not, holds no front: no gRPC adapter, no
    remoting handler, no server wiring (the import contract says it too)."""
    graph = grimp.build_graph("nameserver", exclude_type_checking_imports=True)
    below = graph.find_upstream_modules("nameserver.node")
    fronts = {m for m in below if m.startswith(("nameserver.grpc", "nameserver.server"))}
    assert not fronts | {m for m in below if m.endswith((".service", ".remoting"))}
