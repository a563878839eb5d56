"""STYLE.md 1 and DESIGN.md §2: rmq's parser modules (codec, codes, headers, jsonfields,
message: every module but the two thin asyncio ones) import neither sockets nor asyncio nor
any metaledger package, so brokers, replicators and the nameserver share them as they are."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import rmq

#: The thin asyncio modules beside the sans-I/O ones.
ASYNCIO_MODULES = {"server", "connection"}
FORBIDDEN = {
    "socket",
    "ssl",
    "asyncio",
    "selectors",
    "grpc",
    "raftlog",
    "snapshots",
    "nameserver",
    "broker",
    "replicator",
    "bench",
    "tests",
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    return names | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }


def test_rmq_parser_modules_are_sans_io() -> None:
    root = Path(rmq.__file__).parent
    # every module with a source (the compiled build adds mypyc's runtime library, which has none)
    modules = {
        m.name for m in pkgutil.iter_modules([str(root)]) if (root / f"{m.name}.py").exists()
    }
    assert {"codec", "codes", "headers", "jsonfields"} <= modules
    for name in sorted(modules - ASYNCIO_MODULES):
        imported = imported_roots(root / f"{name}.py")
        assert not imported & FORBIDDEN, (name, imported & FORBIDDEN)


def test_the_asyncio_modules_import_no_metaledger_package() -> None:
    root = Path(rmq.__file__).parent
    for name in sorted(ASYNCIO_MODULES):
        imported = imported_roots(root / f"{name}.py")
        assert not imported & (FORBIDDEN - {"socket", "ssl", "asyncio", "selectors"}), name
