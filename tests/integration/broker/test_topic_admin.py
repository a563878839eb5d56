"""UPDATE_AND_CREATE_TOPIC (17) on a real broker beside a real metaledger node: the answer
comes once metaledger's routes hold the change, so the route read right after shows the new
queues and permissions; sends and pulls follow them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, NotFound, QueueData
from rmq.connection import RemotingConnection
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for

pytestmark = [pytest.mark.integration]

ROUTE_WAIT_S = 2.0  # the answer waited for the registration: the route is there at once


def create(topic: str, queues: int, perm: int = 6, order: bool = False) -> dict[str, Any]:
    return {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
        "writeQueueNums": queues, "perm": perm, "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0, "order": order,
    }  # fmt: skip


def send_fields(topic: str, queue: int) -> dict[str, Any]:
    return {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4, "queueId": queue, "sysFlag": 0,
        "bornTimestamp": 1700000000000, "flag": 0, "properties": "", "reconsumeTimes": 0,
        "unitMode": False,
    }  # fmt: skip


def pull_fields(topic: str, queue: int) -> dict[str, Any]:
    return {
        "consumerGroup": "CG", "topic": topic, "queueId": queue, "queueOffset": 0,
        "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
        "subVersion": 0, "subscription": "*",
    }  # fmt: skip


def queue_data(client: Client, topic: str) -> QueueData | None:
    try:
        route = client.route_get(topic)
    except NotFound:
        return None
    return next((q for q in route.queues if q.broker_name == "broker-a"), None)


def test_create_and_update_a_topic_through_the_broker(
    tmp_path: Path, node: Cluster, client: Client
) -> None:
    broker = BrokerProcess(tmp_path, node.endpoints, "broker-a", "--no-auto-create-topic")
    try:
        wait_for("registration", lambda: client.route_cluster_info().brokers)
        asyncio.run(scenario(broker, client))
    finally:
        code = broker.stop()
        assert code in (0, None), broker.log_tail()


async def scenario(broker: BrokerProcess, client: Client) -> None:
    c = await RemotingConnection.connect("127.0.0.1", broker.port)
    try:
        assert queue_data(client, "Made") is None
        r = await c.request(17, create("Made", 4))
        assert r.code == 0 and not r.remark, r.remark
        # no wait: the answer came after the registration went through
        assert queue_data(client, "Made") == QueueData("broker-a", 4, 4, 6, 0, False)
        sent = await c.request(10, send_fields("Made", 3), b"first")
        assert sent.code == 0, sent.remark
        pulled = await c.request(11, pull_fields("Made", 3))
        assert pulled.code == 0 and b"first" in pulled.body

        # read-only: sends refused, the route says perm 4
        r = await c.request(17, create("Made", 4, perm=4))
        assert r.code == 0, r.remark
        wait_for(
            "perm 4 in the route",
            lambda: getattr(queue_data(client, "Made"), "perm", None) == 4,
            timeout=ROUTE_WAIT_S,
        )
        refused = await c.request(10, send_fields("Made", 0), b"no")
        assert refused.code == 16, (refused.code, refused.remark)

        # 4 -> 8 queues, writable again, orderly
        r = await c.request(17, create("Made", 8, order=True))
        assert r.code == 0, r.remark
        q = wait_for(
            "8 queues in the route",
            lambda: (d := queue_data(client, "Made")) is not None and d.write_queue_nums == 8 and d,
            timeout=ROUTE_WAIT_S,
        )
        assert q == QueueData("broker-a", 8, 8, 6, 0, True)
        sent = await c.request(10, send_fields("Made", 7), b"on queue 7")
        assert sent.code == 0, sent.remark

        # a bad request changes nothing, and the broker still serves
        bad = await c.request(17, create("Made", 2, perm=64))
        assert bad.code == 1 and "perm" in (bad.remark or "")
        table = json.loads((await c.request(21, {})).body)["topicConfigTable"]
        assert table["Made"]["writeQueueNums"] == 8 and table["Made"]["perm"] == 6

        # deleted as mqadmin deleteTopic does: from the broker (215), then from the routes
        r = await c.request(215, {"topic": "Made"})
        assert r.code == 0, r.remark
        table = json.loads((await c.request(21, {})).body)["topicConfigTable"]
        assert "Made" not in table
        client.route_topic_delete("Made")
        gone = await c.request(10, send_fields("Made", 0), b"gone")
        assert gone.code == 17, (gone.code, gone.remark)
    finally:
        await c.close()
