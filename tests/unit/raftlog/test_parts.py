"""raftlog's objects own their fields (issue 28): no mixins over a shared base, no methods
declared for the type checker, each public constant defined once; a part works alone,
given only the callables it is wired with."""

from __future__ import annotations

import ast
import asyncio
from collections import defaultdict
from pathlib import Path

import raftlog
from raftlog import Applied, Entry, NativeEngine, ReplicatedLog
from raftlog.consensus import ProposeCallback
from raftlog.entry import item_count
from raftlog.health import Health
from raftlog.log.group_commit import GroupCommit
from raftlog.wait import Wait

ROOT = Path(raftlog.__file__).parent


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in sorted(ROOT.rglob("*.py"))]


def test_each_public_constant_is_defined_once() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree in _modules():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper() and target.id[0] != "_":
                    where[target.id].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_no_class_declares_methods_for_the_type_checker() -> None:
    found = []
    for path, tree in _modules():
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            for node in cls.body:
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    found.append(f"{path.relative_to(ROOT)}:{cls.name}")
    assert found == []


def test_the_log_and_the_engine_are_no_mixins() -> None:
    assert ReplicatedLog.__bases__ == (object,)
    assert NativeEngine.__bases__ == (object,)


def test_group_commit_alone_gathers_what_waits_into_one_item() -> None:
    """Group commit with a fake engine: while one item is out, the requests that arrive
    become the next item; apply's part (answering the Wait) is played by the test."""
    proposed: list[tuple[bytes, ProposeCallback]] = []
    wait = Wait()
    commit = GroupCommit(
        lambda data, cb: proposed.append((data, cb)),
        wait,
        Health(),
        "c",
        max_item_requests=512,
        max_item_bytes=1 << 20,
        batch_window_s=0.0,
        max_in_flight=1,
        busy_item_requests=10,
        window_per_request_s=0.0,
    )

    async def main() -> None:
        first = asyncio.ensure_future(commit.propose([Entry("set", b"a")], 5.0))
        await asyncio.sleep(0)
        later = [
            asyncio.ensure_future(commit.propose([Entry("set", b"k%d" % i)], 5.0)) for i in range(3)
        ]
        await asyncio.sleep(0)
        assert [item_count(data) for data, _ in proposed] == [1]  # the rest wait
        wait.trigger_many([(("c", 1), Applied(1, None))])
        proposed[0][1](1, None)  # the engine's answer: the next item leaves
        assert (await first).offset == 1
        await asyncio.sleep(0)
        assert [item_count(data) for data, _ in proposed] == [1, 3]
        wait.trigger_many([(("c", s), Applied(s, None)) for s in (2, 3, 4)])
        assert [(await f).offset for f in later] == [2, 3, 4]
        assert (commit.items_proposed, commit.requests_proposed) == (2, 4)

    asyncio.run(main())
