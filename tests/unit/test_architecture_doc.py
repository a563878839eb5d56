"""docs/architecture.md stays true to the code: every module path, dotted module name and
class it names in backticks exists.

A newcomer reads that page first and follows its names into the tree; a name that is not
there (a renamed module, a class that was never written) sends them nowhere. So every
backticked token that looks like one of the project's paths (``rmq/codec.py``,
``routing/records.py``: resolved under the shipped packages), dotted modules
(``nameserver.errors.of_raftlog``) or class names (``RoutingImage``, ``KVService.Put``) is
looked up here: files on disk, modules and attributes by import, classes and their methods
by parsing the shipped sources.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SHIPPED = ("protos", "rmq", "raftlog", "snapshots", "nameserver", "broker", "replicator")
TOP = (*SHIPPED, "bench", "tests", "scripts", "docs")
TICKS = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[\w./<>-]+/(?:[\w.-]+)?$|^[\w/-]+\.(?:py|proto|toml|sh|md)$")
DOTTED = re.compile(r"^(?:" + "|".join(TOP) + r")(?:\.\w+)+$")
CLASS = re.compile(r"^_?[A-Z][a-z]+[A-Za-z0-9]*(?:\.\w+)?$")
#: backticked words that are RocketMQ's, etcd's or Python's, not ours
NOT_OURS = {"TopicRouteData", "SYNC_FLUSH", "ASYNC_FLUSH", "HAClient", "AlterSyncStateSet"}


@cache
def proto_names() -> set[str]:
    """Messages and RPCs of the ``.proto`` sources (``KvOperation``, ``PutResponse``, ``Range``)."""
    names: set[str] = set()
    for path in (ROOT / "protos").rglob("*.proto"):
        names.update(
            re.findall(r"^\s*(?:message|rpc|service|enum)\s+(\w+)", path.read_text(), re.M)
        )
    return names


@cache
def classes() -> dict[str, set[str]]:
    """Every class defined in the shipped packages, with the names defined in its body and
    those its bases define (bases by name, resolved among the project's own classes)."""
    found: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*.py"):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    members = found.setdefault(node.name, set())
                    bases.setdefault(node.name, []).extend(
                        b.id if isinstance(b, ast.Name) else b.attr
                        for b in node.bases
                        if isinstance(b, ast.Name | ast.Attribute)
                    )
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                            members.add(item.name)
                            # attributes set on the instance: ``self.propose = ...``
                            members.update(
                                t.attr
                                for sub in ast.walk(item)
                                if isinstance(sub, ast.Assign | ast.AnnAssign)
                                for t in (
                                    sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                                )
                                if isinstance(t, ast.Attribute)
                                and isinstance(t.value, ast.Name)
                                and t.value.id == "self"
                            )
                        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                            members.add(item.target.id)
                        elif isinstance(item, ast.Assign):
                            members.update(t.id for t in item.targets if isinstance(t, ast.Name))

    def inherited(name: str, seen: set[str]) -> set[str]:
        own = set(found.get(name, ()))
        for base in bases.get(name, ()):
            if base not in seen:
                own |= inherited(base, seen | {base})
        return own

    return {name: inherited(name, {name}) for name in found}


def path_exists(token: str) -> bool:
    token = token.rstrip("/")
    if "<" in token:  # a pattern such as nameserver/<domain>/
        prefix = token.split("<")[0].rstrip("/")
        return (ROOT / prefix).exists()
    if (ROOT / token).exists():
        return True
    # relative to a package folder (``routing/records.py``, ``native/``, ``sinks/``)
    return any(
        any(p.as_posix().endswith("/" + token) for p in (ROOT / package).rglob(Path(token).name))
        for package in (*SHIPPED, "tests")
    )


def dotted_exists(token: str) -> bool:
    parts = token.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def class_exists(token: str) -> bool:
    if token in proto_names():
        return True
    name, _, member = token.partition(".")
    members = classes().get(name)
    return members is not None and (not member or member in members)


def problems(text: str) -> list[str]:
    out = []
    for token in dict.fromkeys(TICKS.findall(text)):
        token = token.strip()
        if " " in token or token in NOT_OURS:
            continue
        first = token.split("/")[0].split(".")[0]
        if "/" in token and PATH.match(token):
            if first in ("..", "DIR") or token.startswith("/"):
                continue
            if not path_exists(token):
                out.append(f"path {token}")
        elif DOTTED.match(token):
            if not dotted_exists(token):
                out.append(f"module or attribute {token}")
        elif CLASS.match(token) and not class_exists(token):
            out.append(f"class {token}")
    return out


def test_every_name_the_architecture_page_gives_exists() -> None:
    missing = problems(DOC.read_text(encoding="utf-8"))
    assert not missing, f"docs/architecture.md names what the code does not have: {missing}"


def test_the_checker_finds_what_is_missing() -> None:
    assert problems("`rmq/codec.py` `nameserver/state/` `routing/records.py` `raftlog/`") == []
    assert problems("`nameserver.errors.Rejected` `MetadataStateMachine.apply`") == []
    assert problems("`routing/nowhere.py`") == ["path routing/nowhere.py"]
    assert problems("`nameserver.errors.Nothing`") == [
        "module or attribute nameserver.errors.Nothing"
    ]
    assert problems("`NoSuchImage`, `MetadataStateMachine.nothing`") == [
        "class NoSuchImage",
        "class MetadataStateMachine.nothing",
    ]
