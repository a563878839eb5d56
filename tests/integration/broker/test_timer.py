"""Timer messages on a real ``metaledger broker`` (issue 30): sent over remoting
(SEND_MESSAGE_V2 with ``TIMER_DELIVER_MS``), with ``metaledger send --deliver-at`` and by
RocketMQ 5's Python producer (a DELAY message with ``delivery_timestamp``); not pullable before
their time, pullable after it with body, keys, tag and properties; delivered once across a
broker restart while they wait; refused beyond ``timerMaxDelaySec``; delay levels still work."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from nameserver.client import Client, QueueData
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.codes import ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import SendMessageHeader
from rmq.message import StoredMessage, properties_text
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, metaledger, wait_for
from tests.integration.broker.test_grpc_producer import Env, _pull_all, produce

pytestmark = [pytest.mark.integration]
TOPIC = "TimerTopic"


async def _send(port: int, body: bytes, **props: str) -> tuple[int, str]:
    c = await RemotingConnection.connect("127.0.0.1", port)
    try:
        header = SendMessageHeader(
            producer_group="PG", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=0, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
            properties=properties_text(props), reconsume_times=0, unit_mode=False, batch=False,
        )  # fmt: skip
        r = await c.call(header.request_v2(body), timeout_s=10)
        return r.code, r.remark or ""
    finally:
        await c.close()


def send(port: int, body: bytes, **props: str) -> tuple[int, str]:
    return asyncio.run(_send(port, body, **props))


def pull(broker: BrokerProcess) -> list[StoredMessage]:
    return asyncio.run(_pull_all(broker.port, TOPIC))  # its 2 queues: the others answer none


def pull_until(broker: BrokerProcess, n: int, timeout: float = 30) -> list[StoredMessage]:
    got: list[StoredMessage] = []

    def enough() -> bool:
        got[:] = pull(broker)
        return len(got) >= n

    wait_for(f"{n} messages", enough, timeout=timeout, every=0.2)
    return got


def start(
    tmp_path: Path, node: Cluster, client: Client, *extra: str, grpc: bool = False
) -> BrokerProcess:
    broker = BrokerProcess(tmp_path, node.endpoints, "broker-a", *extra, grpc=grpc)
    wait_for("registration", lambda: client.route_cluster_info().brokers)
    client.route_topic_create(TOPIC, [QueueData("broker-a", 2, 2, 6)])
    return broker


def test_a_timer_message_waits_for_its_time_and_survives_a_restart(
    tmp_path: Path, node: Cluster, client: Client
) -> None:
    broker = start(tmp_path, node, client, "--message-delay-level", "1s 2s")
    try:
        at = int(time.time() * 1000) + 3000
        code, _ = send(broker.port, b"timer", TIMER_DELIVER_MS=str(at), KEYS="k1", TAGS="t", p="v")
        assert code == ResponseCode.SUCCESS
        assert pull(broker) == []
        (m,) = pull_until(broker, 1)
        assert time.time() * 1000 >= at - 5  # never before its time (a 1 s slot at most late)
        assert (m.topic, m.body, m.keys, m.tags, m.properties["p"]) == (
            TOPIC,
            b"timer",
            "k1",
            "t",
            "v",
        )
        assert m.properties["TIMER_DELIVER_MS"] == str(at)
        assert "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties

        # a delay level still goes through SCHEDULE_TOPIC_XXXX, and wins over a timer property
        code, _ = send(broker.port, b"level", DELAY="1", TIMER_DELAY_SEC="600")
        assert code == ResponseCode.SUCCESS
        pull_until(broker, 2, timeout=15)

        # beyond timerMaxDelaySec: refused, naming the property
        code, remark = send(broker.port, b"far", TIMER_DELAY_SEC=str(4 * 86_400))
        assert code == ResponseCode.MESSAGE_ILLEGAL and "timerMaxDelaySec" in remark

        # a restart while messages wait: each delivered once, none before its time
        at = int(time.time() * 1000) + 4000
        for i in range(5):
            assert send(broker.port, b"w%d" % i, TIMER_DELIVER_MS=str(at + i * 300))[0] == 0
        out = metaledger(
            tmp_path, "send", TOPIC, "cli", "--deliver-at", "+3s", "--endpoints", node.endpoints[0]
        )
        assert out.returncode == 0, out.stderr.decode()
        assert broker.stop() == 0
        broker.start()
        got = pull_until(broker, 8)
        assert time.time() * 1000 >= at
        time.sleep(2.5)  # anything delivered twice would be there by now
        bodies = sorted(m.body for m in pull(broker))
        assert bodies == sorted([b"timer", b"level", b"cli"] + [b"w%d" % i for i in range(5)])
        assert len(got) == 8
    finally:
        assert broker.stop() in (0, None), broker.log_tail()


def test_a_5x_producer_sends_a_delay_message(
    rocketmq5_python: Path, tmp_path: Path, node: Cluster, client: Client
) -> None:
    broker = start(tmp_path, node, client, grpc=True)
    grpc_port = broker.grpc_port
    try:
        at_s = int(time.time()) + 5
        at = at_s * 1000
        # the 5.1.2 client puts Message.delivery_timestamp into Timestamp.seconds as it is
        # (its docstring says ms): seconds work; ms are out of Timestamp's range, refused
        spec = [
            {"body_hex": b"delayed".hex(), "tag": "TagD", "keys": ["dk"], "props": {"p": "v"},
             "delivery_timestamp": at_s},
            {"body_hex": b"too-far".hex(), "delivery_timestamp": at_s + 4 * 86_400},
            {"body_hex": b"ms".hex(), "delivery_timestamp": at},
        ]  # fmt: skip
        results = produce(rocketmq5_python, Env(tmp_path, node, broker, grpc_port), spec,
                          broker, grpc_port, TOPIC)  # fmt: skip
        assert "message_id" in results[0], results
        for bad in results[1:]:
            assert f"{v2.ILLEGAL_DELIVERY_TIME}, " in bad.get("error", ""), results
            assert "delivery_timestamp" in bad["error"], results
        assert time.time() * 1000 < at, "the send took too long to see the wait"
        assert pull(broker) == []
        (m,) = pull_until(broker, 1)
        assert time.time() * 1000 >= at - 5
        assert (m.body, m.tags, m.keys, m.properties["p"]) == (b"delayed", "TagD", "dk", "v")
        assert m.properties["UNIQ_KEY"] == results[0]["message_id"]
        assert m.properties["TIMER_DELIVER_MS"] == str(at)
    finally:
        assert broker.stop() in (0, None), broker.log_tail()
