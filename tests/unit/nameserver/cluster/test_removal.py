"""RemovedMember: a member the engine says was removed stops the node once, with etcd's
words, and ``serve`` exits with REMOVED (issue 29: a removed member kept serving)."""

from __future__ import annotations

import asyncio

from nameserver.cli.exitcodes import ExitCode
from nameserver.cluster.removal import REMOVED, RemovedMember
from nameserver.server import FATAL_EXIT_CODE, REMOVED_EXIT_CODE
from raftlog.consensus import EngineStatus


class StatusLog:
    def __init__(self) -> None:
        self.removed = False

    def engine_status(self) -> EngineStatus:
        return EngineStatus("n3", "follower", 2, "n0", 10, 10, True, removed=self.removed)


def test_the_node_is_stopped_once_when_the_engine_says_it_was_removed() -> None:
    rlog = StatusLog()
    duty = RemovedMember(rlog, "n3")  # type: ignore[arg-type]
    reasons: list[str] = []
    duty.on_removed = reasons.append

    async def checks(n: int) -> None:
        for _ in range(n):
            await duty.check()

    asyncio.run(checks(3))
    assert reasons == []
    rlog.removed = True
    asyncio.run(checks(3))
    assert len(reasons) == 1
    assert reasons[0].startswith(REMOVED + " (n3 ")
    assert "wipe its data dir" in reasons[0]


def test_serves_exit_codes_are_the_tables() -> None:
    assert (FATAL_EXIT_CODE, REMOVED_EXIT_CODE) == (ExitCode.FATAL, ExitCode.REMOVED)
