"""Seed 004 (RocketMQ 5 quorum write and automatic degradation) through real broker processes.

Every example of the seed, as the rows of ``SEED_004`` in
tests/unit/broker/quorum/test_policy.py, here with a real metaledger node holding the group's
policy (totalReplicas, inSyncReplicas, minInSyncReplicas, enableAutoInSyncReplicas,
haMaxGapNotInSync), R real SYNC_MASTER broker processes of one replica group, real HA
connections, and real messages sent to the master metaledger names:

* "两副本情况下,如果inSyncReplicas为2,则该条消息需要在Master和Slave中均复制完成": 2 replicas,
  inSyncReplicas 2 -- the slave must ack; hung (SIGSTOP: alive, acks nothing) ->
  FLUSH_SLAVE_TIMEOUT; down (kill -9) or lagging past haMaxGapNotInSync with auto mode off ->
  IN_SYNC_REPLICAS_NOT_ENOUGH before the append (code 1, remark "in-sync replicas not
  enough", nothing stored).
* "totalReplicas=2,InSyncReplicas=2,minInSyncReplicas=1,enableAutoInSyncReplicas=true ...
  当Slave下线或假死时,会进行自适应降级,producer只需要发送到master即成功": auto mode degrades to
  the master alone when the slave is down or lagging; minInSyncReplicas is the floor.
* "三副本情况下,如果inSyncReplicas为2,则...还需要复制到任意一个slave上": any one slave of two.
* "四副本情况下,如果inSyncReplicas为3,则...还需要复制到任意两个slave上": any two of three.
* five replicas, inSyncReplicas 3 and 5, auto mode on and off, slaves down and lagging.

"Lagging past haMaxGapNotInSync": the group's haMaxGapNotInSync is 4096 bytes; the slave is
stopped, then 8 KiB of body is sent with WAIT=false (no admission, no replica wait), so its
last ack is that far behind the master's end when the row's message is admitted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nameserver.client import GroupPolicy
from tests.cluster.broker.conftest import (
    FLUSH_SLAVE_TIMEOUT,
    NOT_ENOUGH_REMARK,
    SEND_OK,
    SYSTEM_ERROR,
    BrokerGroup,
)

pytestmark = pytest.mark.cluster

GAP = 4096  # the groups' haMaxGapNotInSync
BODY = b"seed-004 " + bytes(range(256))
OK, TIMEOUT, NOT_ENOUGH = SEND_OK, FLUSH_SLAVE_TIMEOUT, SYSTEM_ERROR


def quorum(total: int, isr: int, min_isr: int = 1, auto: bool = False) -> GroupPolicy:
    return GroupPolicy(total, isr, min_isr, auto, GAP)


# (description, policy, slave states, the code the client gets) -- SEED_004 of test_policy.py
ROWS = [
    ("2 replicas, isr 2: master and slave", quorum(2, 2), ["up"], OK),
    ("2 replicas, isr 2, slave hung: times out", quorum(2, 2), ["hung"], TIMEOUT),
    ("2 replicas, isr 2, auto off, slave down", quorum(2, 2), ["down"], NOT_ENOUGH),
    ("2 replicas, isr 2, auto off, slave past the gap", quorum(2, 2), ["lagging"], NOT_ENOUGH),
    ("2 replicas, isr 2, auto off, slave inside the gap", quorum(2, 2), ["inside"], TIMEOUT),
    ("2 replicas, auto, slave up: both", quorum(2, 2, 1, True), ["up"], OK),
    ("2 replicas, auto, slave down: master only", quorum(2, 2, 1, True), ["down"], OK),
    ("2 replicas, auto, slave past the gap: master only", quorum(2, 2, 1, True), ["lagging"], OK),
    ("2 replicas, auto min 2, slave down: the floor", quorum(2, 2, 2, True), ["down"], NOT_ENOUGH),
    ("3 replicas, isr 2: any one slave", quorum(3, 2), ["up", "hung"], OK),
    ("3 replicas, isr 2, one slave down", quorum(3, 2), ["down", "up"], OK),
    ("3 replicas, isr 2, one slave lagging", quorum(3, 2), ["lagging", "up"], OK),
    ("3 replicas, isr 2, auto off, both down", quorum(3, 2), ["down", "down"], NOT_ENOUGH),
    (
        "3 replicas, isr 2, auto, one down one lagging: master only",
        quorum(3, 2, 1, True),
        ["down", "lagging"],
        OK,
    ),
    ("3 replicas, isr 2, both slaves hung", quorum(3, 2), ["hung", "hung"], TIMEOUT),
    ("3 replicas, isr 3, all up", quorum(3, 3), ["up", "up"], OK),
    ("3 replicas, isr 3, auto min 2, one down", quorum(3, 3, 2, True), ["up", "down"], OK),
    ("4 replicas, isr 3: any two slaves", quorum(4, 3), ["up", "hung", "up"], OK),
    ("4 replicas, isr 3, one slave acks", quorum(4, 3), ["up", "hung", "hung"], TIMEOUT),
    ("4 replicas, isr 3, one down", quorum(4, 3), ["up", "down", "up"], OK),
    ("4 replicas, isr 3, auto off, two down", quorum(4, 3), ["up", "down", "down"], NOT_ENOUGH),
    ("4 replicas, isr 3, auto min 2, two down", quorum(4, 3, 2, True), ["up", "down", "down"], OK),
    ("5 replicas, isr 3", quorum(5, 3, 2, True), ["up", "up", "hung", "hung"], OK),
    ("5 replicas, isr 3, auto, two down", quorum(5, 3, 2, True), ["up", "up", "down", "down"], OK),
    (
        "5 replicas, isr 3, auto, two down one lagging",
        quorum(5, 3, 2, True),
        ["up", "lagging", "down", "down"],
        OK,
    ),
    (
        "5 replicas, isr 3, auto, three down",
        quorum(5, 3, 2, True),
        ["up", "down", "down", "down"],
        OK,
    ),
    (
        "5 replicas, isr 3, auto, all slaves down: below the floor",
        quorum(5, 3, 2, True),
        ["down", "down", "down", "down"],
        NOT_ENOUGH,
    ),
    (
        "5 replicas, isr 3, auto off, three down",
        quorum(5, 3),
        ["up", "down", "down", "down"],
        NOT_ENOUGH,
    ),
    ("5 replicas, isr 5, auto off, one down", quorum(5, 5), ["up", "up", "up", "down"], NOT_ENOUGH),
    ("5 replicas, isr 5, all up", quorum(5, 5), ["up", "up", "up", "up"], OK),
]


@pytest.mark.parametrize(
    ("policy", "states", "code"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_seed_004_quorum_write_and_degradation(
    broker_group: Callable[..., BrokerGroup], policy: GroupPolicy, states: list[str], code: int
) -> None:
    group = broker_group(1 + len(states), "SYNC_MASTER", policy)
    got, remark = group.send(BODY)  # every replica in sync: the quorum is there
    assert got == OK, remark
    group.apply(states, 2 * GAP)
    before = group.master.max_offset()
    got, remark = group.send(BODY)
    assert got == code, remark
    if code == NOT_ENOUGH:
        assert remark == NOT_ENOUGH_REMARK
        assert group.master.max_offset() == before  # refused before the append: not stored
    else:
        assert group.master.max_offset() > before
