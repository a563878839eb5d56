"""In-sync set upkeep decisions (expand on ack >= confirm offset and >= epoch start, shrink on
no catch-up or a closed connection) and the keeper's reports: epoch-fenced, re-reading the
group when refused, silent while fenced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest

from broker.quorum.group import GroupView
from broker.quorum.isr import IsrKeeper, IsrSettings, plan
from nameserver.client import (
    FailedPrecondition,
    GroupReplica,
    ReplicaGroupInfo,
    ReplicaGroupWrite,
)
from tests.unit.broker.quorum.fakes import FakeHAMaster, FakeSlave, view

MAX_S = 15.0
NOW = 1000.0


def slaves(*xs: FakeSlave) -> dict[int, FakeSlave]:
    return {s.broker_id: s for s in xs}


def test_expand_needs_confirm_offset_epoch_start_connection_and_liveness() -> None:
    v = view(isr=(1,), alive=(1, 2, 3, 4))
    got = plan(
        v,
        slaves(
            FakeSlave(2, 500, True, NOW),  # caught up to the confirm offset: joins
            FakeSlave(3, 499, True, NOW),  # one byte short
            FakeSlave(4, 900, False, NOW),  # not connected
            FakeSlave(5, 900, True, NOW),  # connected, but metaledger says not alive
        ),
        confirm_offset=500,
        epoch_start=100,
        now=NOW,
        started_at=0,
        max_not_catchup_s=MAX_S,
    )
    assert got is not None and got.new_set == {1, 2} and got.added == {2} and not got.removed
    # below the current epoch's start: nothing of this epoch proven, no join
    assert plan(v, slaves(FakeSlave(2, 500, True, NOW)), 500, 501, NOW, 0, MAX_S) is None


def test_shrink_on_no_catch_up_or_a_closed_connection() -> None:
    v = view(isr=(1, 2, 3, 4))
    got = plan(
        v,
        slaves(
            FakeSlave(2, 10, True, NOW - MAX_S - 0.1),  # not caught up for too long
            FakeSlave(3, 10, False, NOW),  # connection closed: at once
            FakeSlave(4, 10, True, NOW - MAX_S + 0.1),  # lagging, still within the time
        ),
        confirm_offset=10,
        epoch_start=0,
        now=NOW,
        started_at=0,
        max_not_catchup_s=MAX_S,
    )
    assert got is not None and got.new_set == {1, 4}
    assert got.removed == {2: "not caught up for 15.1 s", 3: "HA connection closed"}
    assert "in-sync set -> [1, 4]; 2 left (not caught up" in got.describe()


def test_a_member_never_connected_gets_the_same_time_after_a_start() -> None:
    v = view(isr=(1, 2))
    assert plan(v, {}, 0, 0, NOW, NOW - MAX_S + 1, MAX_S) is None
    got = plan(v, {}, 0, 0, NOW, NOW - MAX_S - 1, MAX_S)
    assert got is not None and got.new_set == {1} and 2 in got.removed


def test_no_change_and_the_master_always_stays() -> None:
    v = view(isr=(1, 2))
    assert plan(v, slaves(FakeSlave(2, 5, True, NOW)), 5, 0, NOW, 0, MAX_S) is None
    got = plan(view(isr=(1,)), slaves(FakeSlave(2, 0, False, NOW)), 0, 0, NOW, 0, MAX_S)
    assert got is None


# ------------------------------------------------------------------ the keeper
def info(v: GroupView) -> ReplicaGroupInfo:
    return ReplicaGroupInfo(
        v.broker_name,
        "c",
        [GroupReplica(i, f"h:{i}", i in v.alive, i in v.sync_state_set, 10_000) for i in (1, 2, 3)],
        v.master_id,
        v.master_address,
        v.master_epoch,
        sorted(v.sync_state_set),
        v.sync_state_set_epoch,
        v.policy,
        1,
        1,
        1,
    )


class FakeMetaledger:
    """AlterSyncStateSet as metaledger applies it: fenced by both epochs."""

    def __init__(self, group: GroupView) -> None:
        self.group = group
        self.calls: list[tuple[int, int, int, list[int]]] = []

    def replica_alter_isr(
        self,
        broker_name: str,
        *,
        master_id: int,
        master_epoch: int,
        sync_state_set_epoch: int,
        sync_state_set: Sequence[int],
    ) -> ReplicaGroupWrite:
        self.calls.append((master_id, master_epoch, sync_state_set_epoch, list(sync_state_set)))
        g = self.group
        if (master_epoch, sync_state_set_epoch) != (g.master_epoch, g.sync_state_set_epoch):
            raise FailedPrecondition("metaledger: [CONTROLLER_FENCED_MASTER_EPOCH 2000] stale")
        self.group = replace(
            g,
            sync_state_set=frozenset(sync_state_set),
            sync_state_set_epoch=g.sync_state_set_epoch + 1,
        )
        return ReplicaGroupWrite(9, info(self.group))


class FakeGroupRoles:
    def __init__(self, v: GroupView, server: FakeMetaledger) -> None:
        self.view: GroupView | None = v
        self.server = server
        self.why: str | None = None
        self.refreshes = 0

    def writable(self) -> str | None:
        return self.why

    async def adopt(self, i: ReplicaGroupInfo) -> GroupView:
        self.view = GroupView.of(i, 1)
        return self.view

    async def refresh(self) -> GroupView:
        self.refreshes += 1
        return await self.adopt(info(self.server.group))


def keeper(
    v: GroupView, confirm: list[int], now: list[float]
) -> tuple[IsrKeeper, FakeGroupRoles, FakeMetaledger, FakeHAMaster]:
    server = FakeMetaledger(v)
    roles = FakeGroupRoles(v, server)
    ha = FakeHAMaster()
    k = IsrKeeper(server, roles, lambda: confirm[0], IsrSettings(1.0, MAX_S), lambda: now[0])
    k.ha, k.epoch_start = ha, 100
    return k, roles, server, ha


def test_keeper_reports_with_both_epochs_and_adopts_the_answer() -> None:
    async def main() -> None:
        confirm, now = [400], [NOW]
        k, roles, server, ha = keeper(view(isr=(1,), isr_epoch=3, master_epoch=2), confirm, now)
        ha.add(2, 400).caught_up_at = NOW
        ha.add(3, 399).caught_up_at = NOW
        change = await k.check()
        assert change is not None and change.new_set == {1, 2}
        assert server.calls == [(1, 2, 3, [1, 2])]
        assert roles.view is not None and roles.view.sync_state_set == {1, 2}
        assert roles.view.sync_state_set_epoch == 4
        # busy master: the confirm offset moved on, 3 reached the previous one: it joins
        confirm[0] = 800
        ha.slave_map[3].acked = 500
        change = await k.check()
        assert change is not None and change.added == {3}
        assert server.calls[-1] == (1, 2, 4, [1, 2, 3])
        # 2 stops catching up: it leaves after haMaxTimeSlaveNotCatchup
        ha.slave_map[3].caught_up_at = now[0] = NOW + MAX_S + 1
        change = await k.check()
        assert change is not None and change.new_set == {1, 3}
        assert server.calls[-1] == (1, 2, 5, [1, 3])
        assert await k.check() is None  # nothing to change: nothing sent
        assert len(server.calls) == 3

    asyncio.run(main())


def test_keeper_rereads_the_group_when_fenced_and_is_silent_while_not_writable() -> None:
    async def main() -> None:
        k, roles, server, ha = keeper(view(isr=(1,)), [0], [NOW])
        ha.add(2, 100).caught_up_at = NOW  # at the epoch start
        server.group = replace(server.group, sync_state_set_epoch=7)  # changed elsewhere
        assert await k.check() is None
        assert roles.refreshes == 1 and roles.view is not None
        assert roles.view.sync_state_set_epoch == 7
        assert await k.check() is not None  # planned again from the re-read group
        assert server.calls[-1] == (1, 1, 7, [1, 2])
        calls = len(server.calls)
        roles.why = "fenced: master epoch 2 names broker 3"
        ha.slave_map[2].connected = False
        assert await k.check() is None
        roles.why = None
        roles.view = replace(roles.view, master_id=3)  # a slave keeps no set
        assert await k.check() is None
        assert len(server.calls) == calls

    asyncio.run(main())


def test_keeper_rereads_the_group_for_a_connected_slave_it_does_not_count_alive() -> None:
    """A slave that registered after the master last read the group joins at the next check,
    not after the role manager's periodic refresh (5 s)."""

    async def main() -> None:
        k, roles, server, ha = keeper(view(isr=(1,), alive=(1,)), [0], [NOW])
        ha.add(2, 100).caught_up_at = NOW
        server.group = replace(server.group, alive=frozenset({1, 2}))  # 2 registered since
        change = await k.check()
        assert roles.refreshes == 1
        assert change is not None and change.added == {2}
        assert server.calls == [(1, 1, 1, [1, 2])]
        assert await k.check() is None and roles.refreshes == 1  # counted alive now: no re-read
        # one metaledger still counts dead (no heartbeat yet): re-read, and it does not join
        ha.add(3, 100).caught_up_at = NOW
        assert await k.check() is None
        assert roles.refreshes == 2 and len(server.calls) == 1

    asyncio.run(main())


def test_settings_validate_names_the_field() -> None:
    with pytest.raises(ValueError, match="check_interval_s"):
        IsrSettings(check_interval_s=0).validate()
    with pytest.raises(ValueError, match="ha_max_time_slave_not_catchup_s"):
        IsrSettings(ha_max_time_slave_not_catchup_s=-1).validate()


def test_keeper_checks_at_once_when_poked_not_at_its_next_interval() -> None:
    """After a failover the new master admits no send until a slave is back in its set: the
    HA master pokes the keeper when a slave connects, and it joins then (seen in the
    network fault harness: a second of a failover's five with no acknowledged send)."""

    async def main() -> None:
        v = view(isr=(1,))
        server = FakeMetaledger(v)
        roles = FakeGroupRoles(v, server)
        ha = FakeHAMaster()
        k = IsrKeeper(server, roles, lambda: 100, IsrSettings(60.0, MAX_S))
        k.start(ha, 100)
        try:
            ha.add(2, 100).caught_up_at = time.monotonic()
            k.poke(2)
            deadline = time.monotonic() + 5
            while not server.calls and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert server.calls == [(1, 1, 1, [1, 2])]
        finally:
            await k.stop()

    asyncio.run(main())
