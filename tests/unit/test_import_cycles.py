"""No import cycles in the shipped packages (issue 28): neither between two modules nor
between the parts of one package (its modules and sub-packages side by side, each taken
with everything inside it), so each package is layers: the broker's request handlers import
the core, the core imports the state below it and never a handler (``broker/state/``); the
nameserver's state machinery is given its record-kind registry (``nameserver.kinds``), it
never imports it.

The graph is grimp's (import-linter's), built from the sources: imports inside functions
count, imports under ``if TYPE_CHECKING:`` (types only, never run) do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import grimp
import pytest

PACKAGES = ("broker", "replicator", "nameserver", "rmq", "raftlog", "snapshots", "console")


def cycles(nodes: Iterable[str], edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def module_cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    return cycles(modules, edges)


def part_cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Cycles between the parts side by side in ``package`` or any package inside it."""
    found = []
    packages = [package, *sorted(graph.find_descendants(package))]
    for parent in (p for p in packages if graph.find_children(p)):
        parts = graph.find_children(parent)

        def part_of(module: str, parts: set[str] = parts) -> str | None:
            return next((p for p in parts if module == p or module.startswith(p + ".")), None)

        edges: dict[str, set[str]] = {p: set() for p in parts}
        for part in parts:
            for module in {part} | graph.find_descendants(part):
                for imported in graph.find_modules_directly_imported_by(module):
                    other = part_of(imported)
                    if other is not None and other != part:
                        edges[part].add(other)
        found += cycles(parts, edges)
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_cycle_between_modules(graph: grimp.ImportGraph, package: str) -> None:
    assert module_cycles(graph, package) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_cycle_between_the_parts_of_a_package(graph: grimp.ImportGraph, package: str) -> None:
    assert part_cycles(graph, package) == []


def test_the_broker_core_imports_no_handler(graph: grimp.ImportGraph) -> None:
    for handlers in ("broker.send", "broker.pull", "broker.consumers", "broker.admin"):
        assert not graph.chain_exists("broker.core", handlers, as_packages=True), handlers


def test_a_cycle_is_found() -> None:
    """The checks see the shape issue 28 found: a core that imports a handler package whose
    processor imports the core (no module cycle, a cycle of parts)."""
    g = grimp.ImportGraph()
    for m in ("b", "b.core", "b.pull", "b.pull.hold", "b.pull.processor"):
        g.add_module(m)
    g.add_import(importer="b.core", imported="b.pull.hold")
    g.add_import(importer="b.pull.processor", imported="b.core")
    assert module_cycles(g, "b") == []
    assert part_cycles(g, "b") == [["b.core", "b.pull"]]
    g.add_import(importer="b.pull.hold", imported="b.pull.processor")
    assert module_cycles(g, "b") == [["b.core", "b.pull.hold", "b.pull.processor"]]
