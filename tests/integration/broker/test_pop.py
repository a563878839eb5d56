"""POP consumption against a real ``metaledger broker`` process and a real metaledger node,
over remoting (``rmq.connection``): pop, ack, batch ack, change of invisibility, redelivery,
the DLQ after max attempts, a PULL group beside, a restart that keeps every handle's fate,
and a master that lost its books (a failover's new master) taking the progress from
metaledger."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, QueueData
from rmq.codec import RemotingCommand
from rmq.connection import RemotingConnection
from rmq.message import StoredMessage, decode_records
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for

pytestmark = [pytest.mark.integration]
TOPIC = "PopTopic"


class Conn:
    def __init__(self, conn: RemotingConnection) -> None:
        self.conn = conn

    async def send(self, body: bytes, tags: str = "") -> None:
        ext = {
            "producerGroup": "PG", "topic": TOPIC, "queueId": 0, "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000), "flag": 0,
            "properties": f"TAGS\x01{tags}\x02" if tags else "",
        }  # fmt: skip
        r = await self.conn.request(10, ext, body)
        assert r.code == 0, r.remark

    async def pop(
        self, group: str = "G", invisible_ms: int = 60_000, n: int = 32
    ) -> RemotingCommand:
        ext = {
            "consumerGroup": group, "topic": TOPIC, "queueId": 0, "maxMsgNums": n,
            "invisibleTime": invisible_ms, "pollTime": 0, "bornTime": 0, "initMode": 0,
        }  # fmt: skip
        return await self.conn.request(200050, ext)

    async def ack(self, m: StoredMessage, handle: str, group: str = "G") -> int:
        ext = {
            "consumerGroup": group, "topic": TOPIC, "queueId": 0, "extraInfo": handle,
            "offset": m.queue_offset,
        }  # fmt: skip
        return (await self.conn.request(200051, ext)).code

    async def offset(self, group: str = "G") -> int:
        q = {"consumerGroup": group, "topic": TOPIC, "queueId": 0}
        return int((await self.conn.request(14, q)).ext_fields["offset"])


def popped(r: RemotingCommand) -> list[tuple[StoredMessage, str]]:
    """Messages and their handles as the Java client builds them."""
    assert r.code == 0, (r.code, r.remark)
    e = r.ext_fields
    start = e["startOffsetInfo"].split(" ")[2]
    return [
        (m, f"{start} {e['popTime']} {e['invisibleTime']} {e['reviveQid']} 0 broker-a 0 "
            f"{m.queue_offset}")
        for m in decode_records(r.body)
    ]  # fmt: skip


async def session(broker: BrokerProcess, scenario: Any) -> None:
    conn = await RemotingConnection.connect("127.0.0.1", broker.port)
    c = Conn(conn)
    try:
        # a started replica serves POP once metaledger made it the master (14 until then)
        probe = StoredMessage(TOPIC, b"")
        while await c.ack(probe, "0 0 1 0 0 broker-a 0 0", group="probe") == 14:
            await asyncio.sleep(0.1)
        await asyncio.wait_for(scenario(c), 60)
    finally:
        await conn.close()


def test_pop_against_a_real_broker_and_metaledger(
    tmp_path: Path, node: Cluster, client: Client
) -> None:
    broker = BrokerProcess(tmp_path, node.endpoints, "broker-a", "--retry-max-times", "1")
    kept: dict[str, Any] = {}
    try:
        wait_for("registration", lambda: client.route_cluster_info().brokers)
        client.route_topic_create(TOPIC, [QueueData("broker-a", 1, 1, 6)])

        async def first(c: Conn) -> None:
            for i in range(8):
                await c.send(f"m{i}".encode(), tags="a")
            got = popped(await c.pop(n=6))
            assert [m.body for m, _ in got] == [f"m{i}".encode() for i in range(6)]
            assert await c.ack(*got[0]) == 0
            e = (await c.pop(n=1)).ext_fields  # m6, to batch-ack with a bitset
            ack = {
                "c": "G", "t": TOPIC, "r": "0", "so": 6, "q": 0, "rq": 0,
                "pt": int(e["popTime"]), "it": int(e["invisibleTime"]),
                "b": base64.b64encode(b"\x01").decode(),
            }  # fmt: skip
            body = json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()
            assert (await c.conn.request(200151, {}, body)).code == 0
            m1, h1 = got[1]
            change = {
                "consumerGroup": "G", "topic": TOPIC, "queueId": 0, "extraInfo": h1,
                "offset": m1.queue_offset, "invisibleTime": 300,
            }  # fmt: skip
            assert (await c.conn.request(200053, change)).code == 0
            await asyncio.sleep(0.4)
            (again, _h), = popped(await c.pop(invisible_ms=300, n=1))  # fmt: skip
            assert again.body == b"m1" and again.reconsume_times == 1  # redelivered
            assert await c.ack(m1, h1) == 208  # the first handle is stale
            await asyncio.sleep(0.4)  # attempt 2 of 2 expires: the next pop dead-letters m1
            (m7, h7), = popped(await c.pop(n=1))  # fmt: skip
            assert m7.body == b"m7" and await c.ack(m7, h7) == 0
            pull = {
                "consumerGroup": "DLQREADER", "topic": "%DLQ%G", "queueId": 0, "queueOffset": 0,
                "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                "subVersion": 0, "subscription": "*", "expressionType": "TAG",
            }  # fmt: skip
            (dead,) = decode_records((await c.conn.request(11, pull)).body)
            assert dead.body == b"m1" and dead.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
            pull.update(consumerGroup="PULLG", topic=TOPIC)
            everything = decode_records((await c.conn.request(11, pull)).body)
            assert len(everything) == 8  # a PULL group sees everything beside the POP group
            assert await c.ack(*got[2]) == 0
            assert await c.offset() == 3  # low: 0, 1 (DLQ) and 2 done; 3 in flight
            kept["got"] = got

        asyncio.run(session(broker, first))
        assert broker.stop() == 0
        broker.start()  # the same master again: its books are on its disk

        async def restarted(c: Conn) -> None:
            got = kept["got"]
            assert await c.ack(*got[0]) == 208  # acked stays acked
            assert (await c.pop()).code == 210  # in flight stays invisible
            assert await c.ack(*got[3]) == 0  # and its handle still works
            assert await c.offset() == 4

        asyncio.run(session(broker, restarted))
        assert broker.stop() == 0  # and its last flush of the progress to metaledger
        (progress,) = client.get("/brokers/broker-a/pop/G/PopTopic/0").kvs
        assert json.loads(progress.value) == {"low": 4, "next": 8, "acked": [6, 7]}
        shutil.rmtree(broker.data_dir / "pop")  # a new master: the log, not the books
        broker.start()

        async def failed_over(c: Conn) -> None:
            got = popped(await c.pop())
            assert [m.body for m, _ in got] == [b"m4", b"m5"]  # in flight: delivered again
            assert [m.reconsume_times for m, _ in got] == [1, 1]
            assert await c.offset() == 4

        asyncio.run(session(broker, failed_over))
    finally:
        assert broker.stop() in (0, None)
