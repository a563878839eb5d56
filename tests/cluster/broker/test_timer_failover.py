"""Timer messages and delay levels across a master failover (issue 30): three real replicas
(SYNC_MASTER, totalReplicas 3, inSyncReplicas 2) on a real metaledger node; timer messages
wait while the master is killed with SIGKILL; the new master delivers each exactly once.

Before the kill, some timer messages and a delay-level message were delivered, and the
delivery positions flushed to metaledger (the test waits 2 s, twice the flush interval, with
nothing due): the new master must not deliver those again, the rest exactly once, among them
those that fell due while the group had no master. (What may repeat in general, messages due
within the last flush interval before the crash, is kept out of this test by its timing.)
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

import pytest

from nameserver.client import GroupPolicy
from tests.cluster.broker.conftest import (
    SEND_OK,
    SEND_V2,
    TOPIC,
    BrokerGroup,
    BrokerProc,
    _request,
    props,
)
from tests.harness import wait_until

pytestmark = pytest.mark.cluster
PULL = 11


def send(group: BrokerGroup, body: bytes, **properties: str) -> None:
    ext: dict[str, object] = {
        "a": "TimerProducer", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0,
        "g": int(time.time() * 1000), "h": 0, "i": props(WAIT="true", **properties), "j": 0,
        "k": "false",
    }  # fmt: skip
    r = asyncio.run(_request(group.master.port, SEND_V2, ext, body, 15.0))
    assert r.code == SEND_OK, r.remark


def bodies(proc: BrokerProc) -> list[bytes]:
    """Every body of the topic's queue on ``proc``."""

    async def pull() -> list[bytes]:
        from rmq.connection import RemotingConnection
        from rmq.message import decode_records

        c = await RemotingConnection.connect("127.0.0.1", proc.port)
        out: list[bytes] = []
        offset = 0
        try:
            while True:
                r = await c.request(
                    PULL,
                    {
                        "consumerGroup": "timer-checker", "topic": TOPIC, "queueId": 0,
                        "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 0x4,
                        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                        "subVersion": 0, "expressionType": "TAG",
                    },
                )  # fmt: skip
                if r.code != 0:
                    return out
                got = decode_records(r.body)
                out += (m.body for m in got)
                offset = int(r.ext_fields["nextBeginOffset"])
                if not got:
                    return out
        finally:
            await c.close()

    return asyncio.run(pull())


def test_a_new_master_delivers_each_waiting_timer_message_once(
    broker_group: Callable[..., BrokerGroup],
) -> None:
    group = broker_group(3, "SYNC_MASTER", GroupPolicy(3, 2, 2))
    old = group.master
    now = int(time.time() * 1000)
    early = [b"early-%d" % i for i in range(3)]
    due = [b"due-while-down-%d" % i for i in range(3)]
    late = [b"late-%d" % i for i in range(3)]
    for i, body in enumerate(early):
        send(group, body, TIMER_DELIVER_MS=str(now + 2000 + 200 * i))
    send(group, b"level", DELAY="1")  # 1 s: the default first delay level
    for i, body in enumerate(due):
        send(group, body, TIMER_DELIVER_MS=str(now + 9000 + 300 * i))
    for i, body in enumerate(late):
        send(group, body, TIMER_DELIVER_MS=str(now + 25_000 + 300 * i))
    assert bodies(old) == []

    wait_until(lambda: len(bodies(old)) == 4, 20, "the early ones and the level delivered")
    assert time.time() * 1000 >= now + 2400
    time.sleep(2.0)  # the positions flushed to metaledger (every 1 s), nothing due meanwhile
    assert time.time() * 1000 < now + 8000, "too slow to kill before the next ones are due"
    old.kill()

    rest = [p for p in group.procs if p is not old]
    group.wait_in_sync(rest, 60)
    new = group.master
    assert new is not old
    wanted = sorted([*early, b"level", *due, *late])

    def all_due_and_there() -> bool:
        return time.time() * 1000 >= now + 25_600 and len(bodies(new)) >= len(wanted)

    wait_until(all_due_and_there, 60, "every message on the new master")
    time.sleep(2.0)  # a repeat would show by now
    got = bodies(new)
    repeated = {b: n for b, n in collections.Counter(got).items() if n > 1}
    assert not repeated, f"delivered more than once: {repeated}\n{new.log_tail()}"
    assert sorted(got) == wanted
