"""RoleManager against an in-memory replica group and a hand-moved clock: fencing on silence
and on a higher epoch, re-election of itself, failing hooks retried, re-registration, an
election asked for when no master is known. (tests/cluster/test_broker_roles.py runs it
against a real metaledger node.)"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from broker.quorum.group import GroupView
from broker.quorum.role import Role, RoleManager, RoleSettings
from nameserver.client import (
    FailedPrecondition,
    GroupPolicy,
    GroupReplica,
    NotFound,
    ReplicaGroupInfo,
    ReplicaGroupWrite,
    ReplicaHeartbeat,
)

FENCE_S = 2.0


@dataclass
class Group:
    """A replica group as metaledger would hold it (the test moves it by hand)."""

    master_id: int = 1
    master_epoch: int = 1
    isr: list[int] = field(default_factory=lambda: [1])
    isr_epoch: int = 1
    registered: set[int] = field(default_factory=set)
    electable: int = 0  # who an election picks (0: nobody)
    heartbeats: list[tuple[int, int, int]] = field(default_factory=list)
    fail_heartbeats: Exception | None = None

    def info(self) -> ReplicaGroupInfo:
        return ReplicaGroupInfo(
            "g",
            "c",
            [GroupReplica(i, f"h:{i}", True, i in self.isr, 10_000) for i in (1, 2, 3)],
            self.master_id,
            f"h:{self.master_id}" if self.master_id else "",
            self.master_epoch,
            list(self.isr),
            self.isr_epoch,
            GroupPolicy(),
            1,
            1,
            1,
        )

    # the client surface RoleManager uses
    def replica_register(
        self, cluster: str, name: str, address: str, broker_id: int = 0, timeout_ms: int = 0
    ) -> ReplicaGroupWrite:
        broker_id = broker_id or int(address.rpartition(":")[2])
        self.registered.add(broker_id)
        return ReplicaGroupWrite(1, self.info(), broker_id)

    def replica_heartbeat(
        self, name: str, broker_id: int, max_offset: int = 0, epoch: int = 0
    ) -> ReplicaHeartbeat:
        if self.fail_heartbeats is not None:
            raise self.fail_heartbeats
        if broker_id not in self.registered:
            raise NotFound("metaledger: [CONTROLLER_BROKER_NEED_TO_BE_REGISTERED 2010] who?")
        self.heartbeats.append((broker_id, max_offset, epoch))
        return ReplicaHeartbeat(
            True,
            self.master_id,
            f"h:{self.master_id}",
            self.master_epoch,
            self.isr_epoch,
            1,
        )

    def replica_group(self, name: str) -> ReplicaGroupInfo:
        return self.info()

    def replica_elect(
        self, name: str, broker_id: int = 0, unclean: bool = False
    ) -> ReplicaGroupWrite:
        if not self.electable:
            raise FailedPrecondition("metaledger: [CONTROLLER_ELECT_MASTER_FAILED 2012] none")
        self.master_id, self.master_epoch = self.electable, self.master_epoch + 1
        self.isr, self.isr_epoch = [self.electable], self.isr_epoch + 1
        return ReplicaGroupWrite(1, self.info())


class Hooks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, str | None]] = []
        self.rm: RoleManager | None = None
        self.fail = 0

    def max_offset(self) -> int:
        return 4242

    def last_epoch(self) -> int:
        return 7

    async def become_master(self, view: GroupView) -> None:
        await self._record("master", view)

    async def become_slave(self, view: GroupView) -> None:
        await self._record("slave", view)

    async def _record(self, what: str, view: GroupView) -> None:
        assert self.rm is not None
        self.calls.append((what, view.master_id, view.master_epoch, self.rm.writable()))
        if self.fail:
            self.fail -= 1
            raise RuntimeError("hook failed")


def role_of(rm: RoleManager) -> Role:  # read anew (mypy keeps an earlier narrowing)
    return rm.role


def manager(group: Group, broker_id: int = 1) -> tuple[RoleManager, Hooks, list[float]]:
    now = [100.0]
    hooks = Hooks()
    s = RoleSettings("c", "g", f"h:{broker_id}", heartbeat_interval_s=0.01, fence_after_s=FENCE_S)
    rm = RoleManager(group, s, hooks, clock=lambda: now[0])
    hooks.rm = rm
    return rm, hooks, now


def test_master_fenced_by_silence_until_a_heartbeat_succeeds_again() -> None:
    async def main() -> None:
        g = Group()
        rm, hooks, now = manager(g)
        assert "not registered" in (rm.writable() or "")
        await rm.beat()
        assert rm.role is Role.MASTER and rm.writable() is None
        assert hooks.calls == [("master", 1, 1, "taking its role in replica group 'g'")]
        assert g.heartbeats == [(1, 4242, 7)]  # max offset and epoch reported
        now[0] += FENCE_S + 0.01  # the last successful heartbeat was sent too long ago
        assert "fenced: no heartbeat answer from metaledger for 2.0 s" in (rm.writable() or "")
        g.fail_heartbeats = TimeoutError("metaledger unreachable")
        with pytest.raises(TimeoutError):
            await rm.beat()
        assert "fenced: no heartbeat answer" in (rm.writable() or "")
        g.fail_heartbeats = None
        await rm.beat()
        assert rm.writable() is None and rm.epoch == 1

    asyncio.run(main())


def test_higher_epoch_naming_another_fences_then_demotes() -> None:
    async def main() -> None:
        g = Group()
        rm, hooks, _ = manager(g)
        await rm.beat()
        g.master_id, g.master_epoch, g.isr, g.isr_epoch = 2, 2, [2], 2
        hooks.fail = 1  # the first demotion fails: fenced, and retried at the next beat
        with pytest.raises(RuntimeError):
            await rm.beat()
        assert rm.role is Role.MASTER
        assert "fenced: master epoch 2 names broker 2 (h:2)" in (rm.writable() or "")
        await rm.beat()
        assert [c[:3] for c in hooks.calls] == [("master", 1, 1), ("slave", 2, 2), ("slave", 2, 2)]
        assert all("fenced: master epoch 2" in (c[3] or "") for c in hooks.calls[1:])
        assert role_of(rm) is Role.SLAVE
        assert rm.writable() == "slave of broker 2 (h:2), master epoch 2"

    asyncio.run(main())


def test_reelected_itself_is_fenced_until_promoted_at_the_new_epoch() -> None:
    async def main() -> None:
        g = Group()
        rm, hooks, _ = manager(g)
        await rm.beat()
        g.master_epoch, g.isr_epoch = 3, 3  # dead, another master, it died, this one again
        await rm.beat()
        assert hooks.calls[-1][:3] == ("master", 1, 3)
        assert "fenced: master epoch 3 names broker 1" in (hooks.calls[-1][3] or "")
        assert rm.epoch == 3 and rm.writable() is None
        # an older view never moves it back
        await rm.adopt(Group(master_id=2, master_epoch=2, isr_epoch=9).info())
        assert rm.role is Role.MASTER and rm.epoch == 3

    asyncio.run(main())


def test_no_master_known_asks_for_an_election() -> None:
    async def main() -> None:
        g = Group(master_id=0, master_epoch=2, isr=[1, 2])
        rm, hooks, _ = manager(g, broker_id=2)
        await rm.beat()  # nobody electable yet: it stays without a role, and asks again
        assert rm.role is Role.UNKNOWN and hooks.calls == []
        assert "no master known in replica group 'g'" in (rm.writable() or "")
        g.electable = 2
        await rm.beat()
        assert role_of(rm) is Role.MASTER and hooks.calls[-1][:3] == ("master", 2, 3)

    asyncio.run(main())


def test_registers_again_when_metaledger_forgot_it() -> None:
    async def main() -> None:
        g = Group()
        rm, _, _ = manager(g)
        rm.start()
        try:
            for _ in range(200):
                if g.heartbeats:
                    break
                await asyncio.sleep(0.01)
            g.registered.clear()  # e.g. the group was deleted and re-created
            del g.heartbeats[:]
            for _ in range(200):
                if g.heartbeats:
                    break
                await asyncio.sleep(0.01)
            assert g.heartbeats and 1 in g.registered
        finally:
            await rm.stop()

    asyncio.run(main())


def test_settings_validate() -> None:
    with pytest.raises(ValueError, match="fence_after_s"):
        RoleSettings("c", "g", "h:1", heartbeat_timeout_ms=1000, fence_after_s=1.5).validate()
    with pytest.raises(ValueError, match="heartbeat_interval_s"):
        RoleSettings("c", "g", "h:1", heartbeat_interval_s=10).validate()
    assert RoleSettings("c", "g", "h:1").fence_s == 10.0
