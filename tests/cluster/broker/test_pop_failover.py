"""POP consumption across a master's death (real replica group, real processes).

A POP group pops five messages and acks three of them; the master's progress reaches
metaledger within a second; the master is killed (kill -9) and metaledger elects the slave.
The new master has the log but not the books: it merges the progress, so the message that
was in flight is delivered again (attempt 2) and no message acked before the last flush is;
an ack of the last second before the kill may be lost (that message is delivered again).
The group's consumer offset on the new master is its low.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from nameserver.client import GroupPolicy
from rmq.codec import RemotingCommand
from rmq.connection import RemotingConnection
from rmq.message import decode_records
from tests.cluster.broker.conftest import SEND_OK, TOPIC, BrokerGroup
from tests.harness import wait_until

pytestmark = pytest.mark.cluster


async def request(port: int, code: int, ext: dict[str, object]) -> RemotingCommand:
    conn = await RemotingConnection.connect("127.0.0.1", port, 10)
    try:
        return await conn.request(code, ext, timeout_s=10)
    finally:
        await conn.close()


def pop(port: int) -> RemotingCommand:
    ext = {
        "consumerGroup": "G", "topic": TOPIC, "queueId": 0, "maxMsgNums": 32,
        "invisibleTime": 60_000, "pollTime": 0, "bornTime": 0, "initMode": 0,
    }  # fmt: skip
    return asyncio.run(request(port, 200050, ext))


def ack(port: int, r: RemotingCommand, offset: int, group_name: str) -> int:
    e = r.ext_fields
    handle = f"0 {e['popTime']} {e['invisibleTime']} 0 0 {group_name} 0 {offset}"
    ext = {
        "consumerGroup": "G",
        "topic": TOPIC,
        "queueId": 0,
        "extraInfo": handle,
        "offset": offset,
    }
    return asyncio.run(request(port, 200051, ext)).code


def test_a_new_master_redelivers_what_was_in_flight_not_what_was_acked(
    broker_group: Callable[..., BrokerGroup],
) -> None:
    group = broker_group(2, "SYNC_MASTER", GroupPolicy(2))
    for i in range(6):
        assert group.send(b"m%d" % i)[0] == SEND_OK
    old = group.master
    r = pop(old.port)
    assert [m.body for m in decode_records(r.body)] == [b"m%d" % i for i in range(6)]
    for off in (0, 1, 3):
        assert ack(old.port, r, off, group.name) == 0
    time.sleep(1.5)  # the progress flush (every second)
    assert ack(old.port, r, 4, group.name) == 0  # may be lost with the master
    old.kill()
    wait_until(lambda: group.info().master_address not in ("", old.address), 60, "a new master")
    new = group.master

    def served() -> RemotingCommand | None:
        got = pop(new.port)
        return None if got.code == 14 else got  # 14 until it is master and serving

    again = wait_until(served, 30, "POP on the new master")
    assert again is not None and again.code == 0, (again.code, again.remark)
    messages = decode_records(again.body)
    bodies = [m.body for m in messages]
    assert all(m.reconsume_times == 1 for m in messages)  # the second delivery of each
    assert b"m2" in bodies and b"m5" in bodies  # in flight at the kill: delivered again
    assert not {b"m0", b"m1", b"m3"} & set(bodies)  # acked before the last flush: never
    assert set(bodies) <= {b"m2", b"m4", b"m5"}
    q = {"consumerGroup": "G", "topic": TOPIC, "queueId": 0}
    offset = asyncio.run(request(new.port, 14, q)).ext_fields["offset"]
    assert offset == "2"
