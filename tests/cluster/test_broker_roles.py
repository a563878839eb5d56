"""Broker replicas' roles against a real metaledger node (issue 17 item 5).

Three RoleManagers register (ids assigned, the first is master at epoch 1); the master's
IsrKeeper grows the in-sync set as its (fake) HA slaves catch up, and its QuorumReplication
answers a 2-of-3 quorum write PUT_OK once an in-sync slave acked. The master's heartbeats
stop (its client fails them): metaledger elects another replica from the in-sync set within
seconds; the old master is fenced first by its silence (sends refused, an in-flight one acked
by a quorum answered FLUSH_SLAVE_TIMEOUT, not PUT_OK) and, when its heartbeats come back, by
the higher epoch, then demoted to a slave of the new master. The new master's IsrKeeper
expands and shrinks the set through AlterSyncStateSet, one epoch per change, and a deposed
master's epoch is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.quorum.group import GroupView
from broker.quorum.isr import IsrKeeper, IsrSettings
from broker.quorum.policy import QuorumSettings
from broker.quorum.replication import QuorumAdmission, QuorumReplication
from broker.quorum.role import Role, RoleManager, RoleSettings
from broker.replication import PutStatus
from nameserver.client import (
    Client,
    FailedPrecondition,
    GroupPolicy,
    ReplicaGroupInfo,
    ReplicaHeartbeat,
    Unavailable,
)
from tests.harness import running_cluster
from tests.unit.broker.quorum.fakes import FakeHAMaster

pytestmark = pytest.mark.cluster

GROUP = "bg-roles"
TIMEOUT_MS = 1500  # metaledger's heartbeat timeout of each replica


class FlakyClient:
    """The real client, whose heartbeats fail while ``blocked`` (the master's link to
    metaledger cut, the process itself still running and answering sends)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.blocked = False

    def replica_heartbeat(self, *args: Any, **kw: Any) -> ReplicaHeartbeat:
        if self.blocked:
            raise Unavailable("test: heartbeats blocked")
        return self.client.replica_heartbeat(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class Hooks:
    """A replica's role hooks: records each change and what the replicas' writable() said
    at that moment; as master it keeps the in-sync set of its fake HA master's slaves."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.epoch = 0
        self.events: list[tuple[str, int, int, float]] = []
        self.writable_then: list[str | None] = []
        self.watch: list[RoleManager] = []
        self.ha = FakeHAMaster()
        self.keeper: IsrKeeper | None = None
        self.repl: QuorumReplication | None = None

    def slave(self, broker_id: int, acked: int) -> None:
        """A slave connected to this replica's HA master, caught up (acked) to ``acked``."""
        self.ha.add(broker_id, acked).caught_up_at = time.monotonic() + 3600

    def max_offset(self) -> int:
        return self.offset

    def last_epoch(self) -> int:
        return self.epoch

    async def become_master(self, view: GroupView) -> None:
        self.epoch = view.master_epoch
        self.events.append(("master", view.master_id, view.master_epoch, time.monotonic()))
        self.writable_then = [rm.writable() for rm in self.watch]
        assert self.keeper is not None and self.repl is not None
        self.repl.attach(self.ha, confirmed=self.offset)
        self.keeper.start(self.ha, epoch_start=self.offset)

    async def become_slave(self, view: GroupView) -> None:
        self.epoch = view.master_epoch
        self.events.append(("slave", view.master_id, view.master_epoch, time.monotonic()))
        self.writable_then = [rm.writable() for rm in self.watch]
        if self.keeper is not None:
            await self.keeper.stop()
        if self.repl is not None:
            self.repl.detach()


async def until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} (not within {timeout:g} s; last: {value!r})")
        await asyncio.sleep(0.05)


async def isr_is(client: Client, isr: list[int], epoch: int = 0) -> int:
    """Wait until metaledger's in-sync set of the group is ``isr`` (at set epoch ``epoch``,
    if given); its set epoch."""
    deadline = time.monotonic() + 15
    while True:
        g: ReplicaGroupInfo = await call(client.replica_group, GROUP)
        if g.sync_state_set == isr and epoch in (0, g.sync_state_set_epoch):
            return g.sync_state_set_epoch
        if time.monotonic() >= deadline:
            raise AssertionError(f"in-sync set {isr} at epoch {epoch} (last: {g})")
        await asyncio.sleep(0.05)


async def call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kw)


def settings(port: int) -> RoleSettings:
    return RoleSettings(
        "rc",
        GROUP,
        f"127.0.0.1:{port}",
        heartbeat_interval_s=0.2,
        heartbeat_timeout_ms=TIMEOUT_MS,
        refresh_interval_s=1.0,
    )


async def scenario(client: Client) -> None:
    flaky = FlakyClient(client)
    hooks = [Hooks(3000), Hooks(2000), Hooks(1000)]
    rms = [
        RoleManager(flaky if i == 0 else client, settings(10911 + 10 * i), h)
        for i, h in enumerate(hooks)
    ]
    for h, rm in zip(hooks, rms, strict=True):
        h.watch = rms
        h.repl = QuorumReplication(rm, QuorumSettings(slave_timeout_s=1.0), h.max_offset)
        h.keeper = IsrKeeper(client, rm, h.repl.confirm_offset, IsrSettings(0.2, 2.0))
    hooks[0].slave(2, 3000)  # replica 1's slaves, caught up
    hooks[0].slave(3, 3000)
    hooks[1].slave(3, 2000)  # replica 2's, once it is master
    stops: list[Callable[[], Awaitable[None]]] = [h.keeper.stop for h in hooks if h.keeper]
    try:
        # registration assigns ids; the first replica of the group is its master (epoch 1)
        rms[0].start()
        stops.append(rms[0].stop)
        await until(lambda: rms[0].role is Role.MASTER, 15, "replica 1 master")
        assert rms[0].broker_id == 1 and rms[0].epoch == 1 and rms[0].writable() is None
        for n, rm in enumerate(rms[1:], 2):  # one at a time: registration order is the ids
            rm.start()
            stops.append(rm.stop)
            await until(lambda rm=rm: rm.role is Role.SLAVE, 15, f"replica {n} slave")
        assert [rm.broker_id for rm in rms] == [1, 2, 3]
        assert [h.events[0][:3] for h in hooks] == [
            ("master", 1, 1),
            ("slave", 1, 1),
            ("slave", 1, 1),
        ]
        assert "slave of broker 1 (127.0.0.1:10911)" in (rms[1].writable() or "")

        # the master's keeper expands the set once its slaves are alive in metaledger (in one
        # change or two, as it sees them come alive)
        e = await isr_is(client, [1, 2, 3])
        assert e in (2, 3)
        await until(lambda: rms[0].view and rms[0].view.sync_state_set_epoch == e, 5, "adopted")

        # quorum write, 2 of 3 (the group's policy in metaledger): the master answers PUT_OK
        # once an in-sync slave acked
        await call(client.replica_set_policy, GROUP, GroupPolicy(3, 2, 1, False))
        await rms[0].refresh()
        repl0 = hooks[0].repl
        assert repl0 is not None and repl0.writable() is None
        a = repl0.admit(3000)
        assert isinstance(a, QuorumAdmission) and (a.need_acks, a.master_epoch) == (2, 1)
        sent = asyncio.ensure_future(repl0.wait(3100, a, True))
        await asyncio.sleep(0.05)
        await hooks[0].ha.ack(2, 3100)
        assert await sent is PutStatus.PUT_OK
        in_flight = repl0.admit(3100)
        assert isinstance(in_flight, QuorumAdmission)

        # the master's heartbeats stop: it fences itself, metaledger elects 2 (in sync, the
        # highest offset of the alive members) at master epoch 2
        flaky.blocked = True
        cut = time.monotonic()
        await until(lambda: rms[1].role is Role.MASTER, 20, "replica 2 elected")
        elected = hooks[1].events[-1]
        assert elected[:3] == ("master", 2, 2)
        assert elected[3] - cut < 10, "a new master within seconds"
        old_then = hooks[1].writable_then[0] or ""
        assert "fenced: no heartbeat answer" in old_then, "fenced before the new master acts"
        await until(lambda: hooks[2].events[-1][:3] == ("slave", 2, 2), 15, "3 follows 2")
        assert "fenced: no heartbeat answer" in (rms[0].writable() or "")
        assert rms[0].role is Role.MASTER  # still believes it, but writes nothing:
        assert repl0.admit(3100) is PutStatus.SERVICE_NOT_AVAILABLE
        assert "fenced: no heartbeat answer" in (repl0.writable() or "")
        await hooks[0].ha.ack(3, 3200)  # acked by a quorum, yet no PUT_OK from a fenced master
        assert await repl0.wait(3200, in_flight, True) is PutStatus.FLUSH_SLAVE_TIMEOUT

        # heartbeats come back: the higher epoch fences it, then it is demoted to a slave of 2
        flaky.blocked = False
        await until(lambda: rms[0].role is Role.SLAVE, 15, "old master demoted")
        assert hooks[0].events[-1][:3] == ("slave", 2, 2)
        fenced_then = hooks[0].writable_then[0] or ""
        assert "fenced: master epoch 2 names broker 2" in fenced_then
        assert rms[0].writable() == "slave of broker 2 (127.0.0.1:10921), master epoch 2"

        # after the election the set was {2} (epoch e + 1); the new master's keeper adds 3 (its
        # HA slave from the start), then 1 once it follows, then drops 3 when its connection
        # closes: one in-sync set epoch per change
        g = await call(client.replica_group, GROUP)
        assert (g.master_id, g.master_epoch) == (2, 2)
        await isr_is(client, [2, 3], e + 2)
        repl1 = hooks[1].repl
        assert repl1 is not None
        await until(lambda: isinstance(repl1.admit(2000), QuorumAdmission), 5, "2 of {2, 3}")
        hooks[1].slave(1, 2000)
        await isr_is(client, [1, 2, 3], e + 3)
        hooks[1].ha.slave_map[3].connected = False
        await isr_is(client, [1, 2], e + 4)
        with pytest.raises(FailedPrecondition, match="CONTROLLER_FENCED_MASTER_EPOCH 2000"):
            await call(
                client.replica_alter_isr,
                GROUP,
                master_id=1,
                master_epoch=1,
                sync_state_set_epoch=e + 4,
                sync_state_set=[1],
            )
    finally:
        for stop in stops:
            await stop()


def test_roles_election_fencing_and_demotion(tmp_path: Path) -> None:
    with running_cluster(tmp_path, n=1) as c, Client(c.endpoints, timeout_s=5) as client:
        asyncio.run(scenario(client))
