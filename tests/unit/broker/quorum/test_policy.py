"""Table tests of the quorum-write policy at the pure-function level: every example of seed 004
(2, 3, 4 and 5 replicas, auto mode on and off, a slave down, lagging past haMaxGapNotInSync,
hung) and seed 001 (sync and async masters with the slave up, down and lagging)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.quorum.policy import (
    RULES,
    BrokerRole,
    QuorumSettings,
    Rule,
    SlaveAck,
    WaitFor,
    admit,
    after_append,
    behaviour_for,
    calc_need_ack_nums,
    in_sync_slave_nums,
)
from broker.replication import PutStatus
from nameserver.client import GroupPolicy

END = 1 << 30  # commit-log end before the append
SIZE = 200  # the message's bytes
GAP = 256 * 1024  # haMaxGapNotInSync (the group's)
FALLBEHIND = 256 * 1024 * 1024  # haSlaveFallbehindMax (4.x)

SYNC, ASYNC = BrokerRole.SYNC_MASTER, BrokerRole.ASYNC_MASTER
OK = PutStatus.PUT_OK
NOT_ENOUGH = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
SLAVE_TIMEOUT = PutStatus.FLUSH_SLAVE_TIMEOUT
NOT_AVAILABLE = PutStatus.SLAVE_NOT_AVAILABLE


@dataclass(frozen=True)
class Slave:
    """A slave in a scenario: its HA view, whether metaledger counts it alive, and whether
    it acks the new message before the slave timeout."""

    ack: SlaveAck
    alive: bool
    acks_message: bool


def up(i: int) -> Slave:  # caught up, acks the message
    return Slave(SlaveAck(i, END), True, True)


def down(i: int) -> Slave:  # process gone: no HA connection, not alive in metaledger
    return Slave(SlaveAck(i, END - 4096, connected=False), False, False)


def lagging(i: int, gap: int = GAP) -> Slave:  # connected and alive, `gap` bytes behind
    return Slave(SlaveAck(i, END - gap), True, False)


def hung(i: int) -> Slave:  # in sync a moment ago, acks nothing new (seed 004's "假死")
    return Slave(SlaveAck(i, END), True, False)


def run(
    role: BrokerRole, policy: GroupPolicy, slaves: list[Slave], wait_store_ok: bool = True
) -> tuple[int | PutStatus, PutStatus]:
    """admit -> append -> after_append -> (the wait, played from the scenario)."""
    behaviour = behaviour_for(role, policy)
    acks = [s.ack for s in slaves]
    alive = 1 + sum(s.alive for s in slaves)
    admitted = admit(behaviour, policy, alive, END, acks)
    if isinstance(admitted, PutStatus):
        return admitted, admitted
    settings = QuorumSettings(role)
    plan = after_append(behaviour, settings, admitted, END + SIZE, acks, wait_store_ok)
    if isinstance(plan, PutStatus):
        return admitted, plan
    assert plan.timeout_s == settings.slave_timeout_s
    acked = sum(1 for s in slaves if s.acks_message)
    return admitted, OK if acked >= plan.count else SLAVE_TIMEOUT


def quorum(
    total: int, isr: int, min_isr: int = 1, auto: bool = False, gap: int = GAP
) -> GroupPolicy:
    return GroupPolicy(total, isr, min_isr, auto, gap)


# (description, policy, slaves, need_acks or status before the append, answer)
SEED_004 = [
    # "两副本情况下,如果inSyncReplicas为2,则该条消息需要在Master和Slave中均复制完成"
    ("2 replicas, isr 2: master and slave", quorum(2, 2), [up(2)], 2, OK),
    ("2 replicas, isr 2, slave hung: waits, times out", quorum(2, 2), [hung(2)], 2, SLAVE_TIMEOUT),
    ("2 replicas, isr 2, auto off, slave down", quorum(2, 2), [down(2)], NOT_ENOUGH, NOT_ENOUGH),
    (
        "2 replicas, isr 2, auto off, slave past haMaxGapNotInSync",
        quorum(2, 2),
        [lagging(2)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    (
        "2 replicas, isr 2, auto off, slave one byte inside haMaxGapNotInSync: still in sync",
        quorum(2, 2),
        [lagging(2, GAP - 1)],
        2,
        SLAVE_TIMEOUT,
    ),
    # "totalReplicas=2,InSyncReplicas=2,minInSyncReplicas=1,enableAutoInSyncReplicas=true ...
    #  当Slave下线或假死时,会进行自适应降级,producer只需要发送到master即成功"
    ("2 replicas, auto, slave up: both", quorum(2, 2, 1, True), [up(2)], 2, OK),
    ("2 replicas, auto, slave down: master only", quorum(2, 2, 1, True), [down(2)], 1, OK),
    (
        "2 replicas, auto, slave past haMaxGapNotInSync: master only",
        quorum(2, 2, 1, True),
        [lagging(2)],
        1,
        OK,
    ),
    (
        "2 replicas, auto min 2, slave down: the floor holds",
        quorum(2, 2, 2, True),
        [down(2)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    # "三副本情况下,如果inSyncReplicas为2,则...还需要复制到任意一个slave上"
    ("3 replicas, isr 2: any one slave", quorum(3, 2), [up(2), hung(3)], 2, OK),
    ("3 replicas, isr 2, one slave down", quorum(3, 2), [down(2), up(3)], 2, OK),
    ("3 replicas, isr 2, one slave lagging", quorum(3, 2), [lagging(2), up(3)], 2, OK),
    (
        "3 replicas, isr 2, auto off, both slaves down",
        quorum(3, 2),
        [down(2), down(3)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    (
        "3 replicas, isr 2, auto, one slave down, one lagging: master only",
        quorum(3, 2, 1, True),
        [down(2), lagging(3)],
        1,
        OK,
    ),
    ("3 replicas, isr 2, both slaves hung", quorum(3, 2), [hung(2), hung(3)], 2, SLAVE_TIMEOUT),
    ("3 replicas, isr 3, all up", quorum(3, 3), [up(2), up(3)], 3, OK),
    ("3 replicas, isr 3, auto, one down", quorum(3, 3, 2, True), [up(2), down(3)], 2, OK),
    # "四副本情况下,如果inSyncReplicas为3,则...还需要复制到任意两个slave上"
    ("4 replicas, isr 3: any two slaves", quorum(4, 3), [up(2), hung(3), up(4)], 3, OK),
    (
        "4 replicas, isr 3, only one slave acks",
        quorum(4, 3),
        [up(2), hung(3), hung(4)],
        3,
        SLAVE_TIMEOUT,
    ),
    ("4 replicas, isr 3, one slave down", quorum(4, 3), [up(2), down(3), up(4)], 3, OK),
    (
        "4 replicas, isr 3, auto off, two down",
        quorum(4, 3),
        [up(2), down(3), down(4)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    (
        "4 replicas, isr 3, auto min 2, two down",
        quorum(4, 3, 2, True),
        [up(2), down(3), down(4)],
        2,
        OK,
    ),
    # five replicas, isr 3, floor 2
    ("5 replicas, isr 3", quorum(5, 3, 2, True), [up(2), up(3), hung(4), hung(5)], 3, OK),
    (
        "5 replicas, isr 3, auto, two down",
        quorum(5, 3, 2, True),
        [up(2), up(3), down(4), down(5)],
        3,
        OK,
    ),
    (
        "5 replicas, isr 3, auto, two down one lagging",
        quorum(5, 3, 2, True),
        [up(2), lagging(3), down(4), down(5)],
        2,
        OK,
    ),
    (
        "5 replicas, isr 3, auto, three down",
        quorum(5, 3, 2, True),
        [up(2), down(3), down(4), down(5)],
        2,
        OK,
    ),
    (
        "5 replicas, isr 3, auto, all slaves down: below the floor",
        quorum(5, 3, 2, True),
        [down(2), down(3), down(4), down(5)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    (
        "5 replicas, isr 3, auto off, three down",
        quorum(5, 3),
        [up(2), down(3), down(4), down(5)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    (
        "5 replicas, isr 5, auto off, one down",
        quorum(5, 5),
        [up(2), up(3), up(4), down(5)],
        NOT_ENOUGH,
        NOT_ENOUGH,
    ),
    ("5 replicas, isr 5, all up", quorum(5, 5), [up(2), up(3), up(4), up(5)], 5, OK),
]


@pytest.mark.parametrize(
    ("policy", "slaves", "admitted", "answer"),
    [row[1:] for row in SEED_004],
    ids=[row[0] for row in SEED_004],
)
def test_seed_004_quorum_write_and_degradation(
    policy: GroupPolicy, slaves: list[Slave], admitted: int | PutStatus, answer: PutStatus
) -> None:
    assert behaviour_for(SYNC, policy).rule is Rule.QUORUM
    assert run(SYNC, policy, slaves) == (admitted, answer)


def test_seed_004_formula_as_written() -> None:
    """calcNeedAckNums line by line, and inSyncSlaveNums' strict "<" against the gap."""
    assert calc_need_ack_nums(quorum(3, 2), 1) == 2  # auto off: config, whatever in sync
    assert calc_need_ack_nums(quorum(3, 3, 2, True), 1) == 2  # clamped up to the floor
    assert calc_need_ack_nums(quorum(3, 3, 2, True), 5) == 3  # never above inSyncReplicas
    acks = [SlaveAck(2, END - GAP), SlaveAck(3, END - GAP + 1), SlaveAck(4, END, connected=False)]
    assert in_sync_slave_nums(END, acks, GAP) == 1
    # the seed: inSync = min(alive, in-sync slaves + 1): alive caps it (metaledger's view)
    behaviour = behaviour_for(SYNC, quorum(3, 2))
    caught_up = [SlaveAck(2, END), SlaveAck(3, END)]
    assert admit(behaviour, quorum(3, 2), 1, END, caught_up) is NOT_ENOUGH
    assert admit(behaviour, quorum(3, 2), 2, END, caught_up) == 2


def one_slave(i: int, state: str) -> Slave:
    return {
        "up": up(i),
        "down": down(i),
        "lagging": lagging(i, FALLBEHIND),  # >= haSlaveFallbehindMax
        "slow": lagging(i, FALLBEHIND - SIZE - 1),  # close enough, but no ack in time
    }[state]


# (role, slave states, WAIT, answer)
SEED_001 = [
    (SYNC, ["up"], True, OK),
    (SYNC, ["down"], True, NOT_AVAILABLE),
    (SYNC, ["lagging"], True, NOT_AVAILABLE),
    (SYNC, ["slow"], True, SLAVE_TIMEOUT),
    (SYNC, [], True, NOT_AVAILABLE),  # no slave at all
    (SYNC, ["down", "up"], True, OK),  # trap 4: one slave is enough
    (SYNC, ["lagging", "up"], True, OK),
    (SYNC, ["lagging", "down"], True, NOT_AVAILABLE),
    (SYNC, ["down"], False, OK),  # WAIT=false: no replica wait
    (ASYNC, ["up"], True, OK),
    (ASYNC, ["down"], True, OK),
    (ASYNC, ["lagging"], True, OK),
    (ASYNC, ["slow"], True, OK),
]


@pytest.mark.parametrize(
    ("role", "states", "wait", "answer"),
    SEED_001,
    ids=[f"{r.value}-{'+'.join(s) or 'none'}-wait={w}" for r, s, w, _ in SEED_001],
)
def test_seed_001_sync_and_async_masters(
    role: BrokerRole, states: list[str], wait: bool, answer: PutStatus
) -> None:
    policy = GroupPolicy(total_replicas=1 + len(states))  # inSyncReplicas 1: no quorum asked
    slaves = [one_slave(i + 2, s) for i, s in enumerate(states)]
    admitted, got = run(role, policy, slaves, wait_store_ok=wait)
    assert admitted == (2 if role is SYNC else 1)  # never refused before the append
    assert got is answer


def test_async_master_with_a_quorum_policy_never_waits() -> None:
    assert run(ASYNC, quorum(3, 3), [down(2), down(3)]) == (1, OK)


def test_the_table_covers_every_role_and_names_its_source() -> None:
    assert {r for r, _ in RULES} == set(BrokerRole)
    assert {q for _, q in RULES} == {False, True}
    assert all(b.source for b in RULES.values())
    assert [b.rule for b in RULES.values() if b.confirmed_reads] == [Rule.QUORUM]


def test_after_append_waits_for_need_minus_the_master() -> None:
    b = behaviour_for(SYNC, quorum(5, 4))
    plan = after_append(b, QuorumSettings(slave_timeout_s=0.5), 4, END, [], True)
    assert plan == WaitFor(3, 0.5)


def test_settings_validate_names_the_field() -> None:
    with pytest.raises(ValueError, match="slave_timeout_s"):
        QuorumSettings(slave_timeout_s=0).validate()
    with pytest.raises(ValueError, match="ha_slave_fallbehind_max_bytes"):
        QuorumSettings(ha_slave_fallbehind_max_bytes=0).validate()
    QuorumSettings().validate()
