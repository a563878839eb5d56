"""QuorumReplication against a fake HA master: acks count only from in-sync set members, a
fenced or deposed master never answers PUT_OK, the 4.x and async rules, the confirm offset."""

from __future__ import annotations

import asyncio

import pytest

from broker.quorum.policy import BrokerRole, QuorumSettings
from broker.quorum.replication import QuorumAdmission, QuorumReplication
from broker.replication import Admission, PutStatus
from nameserver.client import GroupPolicy
from tests.unit.broker.quorum.fakes import FakeHAMaster, FakeRoles, bump_epoch, view

END = 10_000
NEXT = END + 100
QUICK = QuorumSettings(slave_timeout_s=0.2)
TWO_OF_THREE = GroupPolicy(3, 2, 1, False)


def master(
    roles: FakeRoles, settings: QuorumSettings = QUICK, *slaves: tuple[int, int]
) -> tuple[QuorumReplication, FakeHAMaster]:
    ha = FakeHAMaster()
    for broker_id, acked in slaves:
        ha.add(broker_id, acked)
    r = QuorumReplication(roles, settings, lambda: END)
    r.attach(ha, confirmed=0)
    return r, ha


async def send(r: QuorumReplication, wait_store_ok: bool = True) -> PutStatus:
    a = r.admit(END)
    if isinstance(a, PutStatus):
        return a
    return await r.wait(NEXT, a, wait_store_ok)


def test_quorum_waits_for_an_in_sync_slave_and_answers_put_ok() -> None:
    async def main() -> None:
        roles = FakeRoles(view(isr=(1, 2, 3), policy=TWO_OF_THREE))
        r, ha = master(roles, QUICK, (2, END), (3, END))
        a = r.admit(END)
        assert isinstance(a, QuorumAdmission) and a.need_acks == 2 and a.master_epoch == 1
        waiting = asyncio.ensure_future(r.wait(NEXT, a, True))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await ha.ack(3, NEXT)
        assert await waiting is PutStatus.PUT_OK
        assert ha.waits == [(NEXT, 1, 0.2, frozenset({2, 3}))]

    asyncio.run(main())


def test_acks_from_slaves_outside_the_in_sync_set_do_not_count() -> None:
    async def main() -> None:
        # 3 is caught up and connected but not in the set: not in sync, its acks ignored
        roles = FakeRoles(view(isr=(1, 2), policy=TWO_OF_THREE))
        r, ha = master(roles, QUICK, (2, END), (3, END))
        a = r.admit(END)
        assert isinstance(a, Admission) and a.need_acks == 2
        waiting = asyncio.ensure_future(r.wait(NEXT, a, True))
        await asyncio.sleep(0.01)
        await ha.ack(3, NEXT)
        assert await waiting is PutStatus.FLUSH_SLAVE_TIMEOUT
        # with only the master in the set, seed 004 refuses before the append
        roles.view = view(isr=(1,), policy=TWO_OF_THREE)
        assert r.admit(END) is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        # auto mode degrades to the master alone
        roles.view = view(isr=(1,), policy=GroupPolicy(3, 2, 1, True))
        a = r.admit(END)
        assert isinstance(a, Admission) and a.need_acks == 1
        assert await r.wait(NEXT, a, True) is PutStatus.PUT_OK

    asyncio.run(main())


def test_a_member_without_connection_is_not_in_sync() -> None:
    async def main() -> None:
        roles = FakeRoles(view(isr=(1, 2), policy=GroupPolicy(2, 2)))
        r, ha = master(roles)  # 2 is in the set but never connected to this master
        assert r.admit(END) is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        ha.add(2, END, connected=False)
        assert r.admit(END) is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        ha.slave_map[2].connected = True
        assert r.admit(END) == QuorumAdmission(2, 1, r.behaviour(roles.view))  # type: ignore[arg-type]

    asyncio.run(main())


def test_fenced_or_deposed_master_never_answers_put_ok() -> None:
    async def main() -> None:
        roles = FakeRoles(view(isr=(1, 2), policy=GroupPolicy(2, 2)))
        r, ha = master(roles, QUICK, (2, END))
        # fenced while waiting: the ack arrives, the answer is not PUT_OK
        a = r.admit(END)
        assert isinstance(a, Admission)
        waiting = asyncio.ensure_future(r.wait(NEXT, a, True))
        await asyncio.sleep(0.01)
        roles.why = "fenced: no heartbeat answer for 10 s"
        await ha.ack(2, NEXT)
        assert await waiting is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert r.writable() == "fenced: no heartbeat answer for 10 s"
        assert r.admit(END) is PutStatus.SERVICE_NOT_AVAILABLE
        # a new master epoch between admission and answer (deposed and re-elected)
        roles.why = None
        a = r.admit(END)
        assert isinstance(a, Admission)
        roles.view = bump_epoch(roles.view, master_id=1)  # type: ignore[arg-type]
        assert await r.wait(NEXT + 100, a, True) is PutStatus.FLUSH_SLAVE_TIMEOUT
        # even a message that needs no slave (WAIT=false) is not PUT_OK once deposed
        a = r.admit(END)
        assert isinstance(a, Admission)
        r.detach()
        assert await r.wait(NEXT, a, False) is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert r.writable() == "this replica's HA master is not running"

    asyncio.run(main())


@pytest.mark.parametrize(
    ("slaves", "isr", "answer"),
    [
        ([], (1,), PutStatus.SLAVE_NOT_AVAILABLE),  # no slave
        ([(2, END)], (1,), PutStatus.SLAVE_NOT_AVAILABLE),  # connected, not yet in the set
        ([(2, END)], (1, 2), PutStatus.PUT_OK),
        ([(2, END - 256 * 1024 * 1024)], (1, 2), PutStatus.SLAVE_NOT_AVAILABLE),  # lagging
    ],
)
def test_sync_master_one_slave_rule(
    slaves: list[tuple[int, int]], isr: tuple[int, ...], answer: PutStatus
) -> None:
    async def main() -> PutStatus:
        roles = FakeRoles(view(isr=isr, policy=GroupPolicy(2)))
        r, ha = master(roles, QUICK, *slaves)
        a = r.admit(END)
        assert isinstance(a, Admission) and a.need_acks == 2
        waiting = asyncio.ensure_future(r.wait(NEXT, a, True))
        await asyncio.sleep(0.01)  # the wait decides on the slave as it is now
        if 2 in ha.slave_map:
            await ha.ack(2, NEXT)
        return await waiting

    assert asyncio.run(main()) is answer


def test_async_master_answers_after_its_own_write() -> None:
    async def main() -> None:
        roles = FakeRoles(view(isr=(1, 2), policy=GroupPolicy(3, 3)))
        r, ha = master(roles, QuorumSettings(BrokerRole.ASYNC_MASTER))
        assert await send(r) is PutStatus.PUT_OK
        assert ha.waits == []
        assert r.readable_limit() is None

    asyncio.run(main())


def test_readable_limit_is_the_confirm_offset_of_the_in_sync_set() -> None:
    async def main() -> None:
        roles = FakeRoles(view(isr=(1, 2, 3), policy=TWO_OF_THREE))
        r, ha = master(roles, QUICK, (2, 7000), (3, 9000))
        assert r.readable_limit() == 7000
        await ha.ack(2, 9500)
        assert r.readable_limit() == 9000
        ha.slave_map[3].connected = False  # unchanged while a member is disconnected
        await ha.ack(2, END)
        assert r.readable_limit() == 9000
        roles.view = view(isr=(1, 2), policy=TWO_OF_THREE)  # 3 left the set
        assert r.readable_limit() == END
        roles.view = view(isr=(1,), policy=GroupPolicy(2))  # 4.x rule: everything
        assert r.readable_limit() is None
        # promoted again: it starts from the log end at promotion, a member not yet
        # connected holds it there
        roles.view = view(isr=(1, 4), policy=TWO_OF_THREE)
        r.attach(ha, confirmed=8000)
        assert r.readable_limit() == 8000

    asyncio.run(main())


class FakeHAClient:
    """``broker.ha.HAClient`` as a slave's replication reads it."""

    def __init__(self, confirm_offset: int = 0) -> None:
        self.confirm_offset = confirm_offset


def test_a_slave_serves_up_to_the_confirm_offset_its_master_sent() -> None:
    end = [END]
    roles = FakeRoles(view(isr=(1, 2, 3), policy=TWO_OF_THREE))
    r = QuorumReplication(roles, QUICK, lambda: end[0])
    assert r.readable_limit() == 0  # no master followed yet: nothing
    client = FakeHAClient()
    r.follow(client)
    assert r.readable_limit() == 0  # no frame heard yet: nothing
    client.confirm_offset = 7000
    assert r.readable_limit() == 7000  # the tail 7000..10000 is not confirmed
    client.confirm_offset = 12_000
    assert r.readable_limit() == END  # never more than it holds
    end[0] = 6000  # truncated by a handshake
    assert r.readable_limit() == 6000
    r.unfollow()  # between roles
    assert r.readable_limit() == 0


def test_a_slave_under_the_4x_and_async_rules_serves_what_it_holds() -> None:
    client = FakeHAClient(7000)
    for settings, policy in (
        (QUICK, GroupPolicy(2)),  # ONE_SLAVE
        (QuorumSettings(BrokerRole.ASYNC_MASTER), TWO_OF_THREE),
    ):
        r = QuorumReplication(FakeRoles(view(isr=(1, 2), policy=policy)), settings, lambda: END)
        r.follow(client)
        assert r.readable_limit() is None


def test_a_master_ignores_a_stale_slave_confirm_offset() -> None:
    roles = FakeRoles(view(isr=(1, 2, 3), policy=TWO_OF_THREE))
    r, _ = master(roles, QUICK, (2, 9000), (3, 9500))
    r.follow(FakeHAClient(100))  # left over: a master reads its own in-sync set
    assert r.readable_limit() == 9000
    r.detach()  # demoted, not yet a slave: its own tail is not known to be committed
    r.unfollow()
    assert r.readable_limit() == 0
