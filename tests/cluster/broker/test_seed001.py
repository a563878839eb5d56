"""Seed 001 (master-slave replication, sync and async) through real broker processes.

Seed 001: a SYNC master answers success only once master and slave both wrote the message
("只有主备都写成功,才向应用返回成功"); an ASYNC master answers after its own write, the slave
copying shortly after ("主备有短暂消息延迟"). The statuses (seed 004's background,
research/broker.md §0 traps 3-4): SEND_OK; FLUSH_SLAVE_TIMEOUT when the slave does not ack
in time; SLAVE_NOT_AVAILABLE when no slave is connected or the best one is more than
haSlaveFallbehindMax behind -- both mean "stored on the master". The group asks for no
quorum (inSyncReplicas 1), so SYNC_MASTER follows RocketMQ 4.x's one-slave rule
(broker/quorum/policy.py). The rows mirror ``SEED_001`` of
tests/unit/broker/quorum/test_policy.py, here with a real metaledger node, real broker
processes, real HA connections and a slave killed (down), stopped (hung: alive, acks
nothing) or stopped after falling more than haSlaveFallbehindMax behind (lagging).

Then seed 001's replication itself: the slave reports its own commit-log max offset and
the master streams from there ("Slave 向 Master 汇报拉取消息偏移量"): a slave killed and
restarted on its data dir catches up from its own offset, its log ends byte-identical to
the master's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from nameserver.client import GroupPolicy
from tests.cluster.broker.conftest import (
    FLUSH_SLAVE_TIMEOUT,
    SEND_OK,
    SLAVE_NOT_AVAILABLE,
    BrokerGroup,
)
from tests.harness import wait_until

pytestmark = pytest.mark.cluster

SYNC, ASYNC = "SYNC_MASTER", "ASYNC_MASTER"
#: haSlaveFallbehindMax for these groups (RocketMQ's 256 MiB would take 256 MiB of sends)
FALLBEHIND = 4096
BODY = b"seed-001 " + bytes(range(256))

# (role, slave states, WAIT, the code the client gets) -- SEED_001 of test_policy.py
ROWS = [
    (SYNC, ["up"], True, SEND_OK),
    (SYNC, ["down"], True, SLAVE_NOT_AVAILABLE),
    (SYNC, ["lagging"], True, SLAVE_NOT_AVAILABLE),
    (SYNC, ["hung"], True, FLUSH_SLAVE_TIMEOUT),
    (SYNC, [], True, SLAVE_NOT_AVAILABLE),  # no slave at all
    (SYNC, ["down", "up"], True, SEND_OK),  # trap 4: one slave is enough
    (SYNC, ["lagging", "up"], True, SEND_OK),
    (SYNC, ["lagging", "down"], True, SLAVE_NOT_AVAILABLE),
    (SYNC, ["down"], False, SEND_OK),  # WAIT=false: no replica wait
    (ASYNC, ["up"], True, SEND_OK),
    (ASYNC, ["down"], True, SEND_OK),
    (ASYNC, ["lagging"], True, SEND_OK),
    (ASYNC, ["hung"], True, SEND_OK),
]


@pytest.mark.parametrize(
    ("role", "states", "wait", "code"),
    ROWS,
    ids=[f"{r}-{'+'.join(s) or 'no-slave'}-wait={w}" for r, s, w, _ in ROWS],
)
def test_seed_001_sync_and_async_masters(
    broker_group: Callable[..., BrokerGroup],
    role: str,
    states: list[str],
    wait: bool,
    code: int,
) -> None:
    group = broker_group(
        1 + len(states), role, GroupPolicy(1 + len(states)), fallbehind_bytes=FALLBEHIND
    )
    # all slaves up: every rule answers SEND_OK (a SYNC master without slaves cannot)
    expected_up = SLAVE_NOT_AVAILABLE if role == SYNC and not states else SEND_OK
    got, remark = group.send(BODY)
    assert got == expected_up, remark
    group.apply(states, 2 * FALLBEHIND)
    before = group.master.max_offset()
    got, remark = group.send(BODY, wait=wait)
    assert got == code, remark
    assert group.master.max_offset() > before  # stored on the master whatever the status


@pytest.mark.parametrize(("role", "while_down"), [(SYNC, SLAVE_NOT_AVAILABLE), (ASYNC, SEND_OK)])
def test_seed_001_killed_slave_catches_up_from_its_own_offset(
    broker_group: Callable[..., BrokerGroup], role: str, while_down: int
) -> None:
    group = broker_group(2, role, GroupPolicy(2))
    master, slave = group.master, group.slaves[0]
    for i in range(20):
        assert group.send(b"before %d " % i + BODY)[0] == SEND_OK
    end_before = master.max_offset()
    wait_until(lambda: slave.max_offset() == end_before, 10, "slave holds every message")

    sid = group.id_of(slave)
    group.down([slave])
    own = slave.commit_log()[:end_before]  # what the dead slave holds, as on its disk
    assert len(own) == end_before
    for i in range(30):  # stored on the master only (a SYNC master says so)
        assert group.send(b"while down %d " % i + BODY)[0] == while_down
    end = master.max_offset()
    assert end > end_before

    slave.spawn()  # the same data dir and port: metaledger gives it its id back
    wait_until(slave.serving, 30, "restarted slave serving")
    group.wait_in_sync(group.procs, 30)
    assert group.id_of(slave) == sid  # the same replica, its id given back
    wait_until(lambda: slave.max_offset() == end, 15, "restarted slave caught up")
    assert group.send(b"after " + BODY)[0] == SEND_OK  # replication works again
    end = master.max_offset()
    wait_until(lambda: slave.max_offset() == end, 10, "slave holds the last message")

    # it continued from its own offset: nothing cut or copied anew, its bytes kept
    restarted = slave.log_since_start()
    assert not re.search(r"truncates its log|emptied to copy anew", restarted), restarted
    group.close(failed=False)
    mine, theirs = slave.commit_log(), master.commit_log()
    assert mine[:end_before] == own
    assert mine[:end] == theirs[:end]
    assert not any(mine[end : end + 4096])  # nothing past the master's end
