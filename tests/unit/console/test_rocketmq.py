"""The RocketMQ page's reads against an in-memory routing table: 1,000 topics page 50 at a
time and only the page's routes are read, a filter narrows the names, and a broker that does
not answer (a closed port) is named in the answer instead of raising; consumer groups, their
clients and message lookup against a real broker replica."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from console import rocketmq, rocketmq_groups
from console.errors import BadInput, NotFound
from nameserver.client import (
    BrokerGroup,
    BrokerInfo,
    ClusterInfo,
    QueueData,
    Route,
    TopicList,
)
from tests.harness import free_ports
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker


class FakeRoutes:
    def __init__(self, topics: list[str], master: str) -> None:
        self.topics = topics
        self.master = master
        self.route_calls = 0

    def route_topics(self, cluster: str = "", system: bool = False) -> TopicList:
        return TopicList(list(reversed(self.topics)), "", 7)

    def route_get(self, topic: str) -> Route:
        self.route_calls += 1
        group = BrokerGroup("c", "b1", {0: self.master, 1: "127.0.0.1:2"}, "", False)
        return Route(topic, [group], [QueueData("b1", 2, 2, 6)], "", 7)

    def route_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {"c": ["b1"]}, [BrokerInfo("c", "b1", 0, self.master, "", "", 6000, 1)], 7
        )


def _closed_port() -> str:
    return f"127.0.0.1:{free_ports(1)[0]}"


def test_a_thousand_topics_page_and_only_the_page_is_read() -> None:
    c = FakeRoutes([f"T{i:04d}" for i in range(1000)], _closed_port())
    page = rocketmq.topic_page(c, "", 50)  # type: ignore[arg-type]
    assert page["total"] == 1000 and c.route_calls == 50
    assert [t["topic"] for t in page["topics"]] == [f"T{i:04d}" for i in range(50)]
    assert page["topics"][0]["queues"] == [
        {"broker": "b1", "addrs": {"0": c.master, "1": "127.0.0.1:2"}, "read": 2, "write": 2,
         "perm": 6}
    ]  # fmt: skip
    seen = 50
    cursor = page["next"]
    while cursor is not None:
        page = rocketmq.topic_page(c, cursor, 50)  # type: ignore[arg-type]
        seen += len(page["topics"])
        cursor = page["next"]
    assert seen == 1000 and c.route_calls == 1000
    narrowed = rocketmq.topic_page(c, "", 50, "T09")  # type: ignore[arg-type]
    assert narrowed["total"] == 100 and narrowed["next"] == "T0949"
    with pytest.raises(BadInput):
        rocketmq.topic_page(c, "", 0)  # type: ignore[arg-type]


def test_a_broker_that_does_not_answer_is_named() -> None:
    c = FakeRoutes(["T"], _closed_port())
    out = rocketmq.queue_offsets(c, "T", 2.0)  # type: ignore[arg-type]
    assert out["brokers"][0]["broker"] == "b1"
    assert out["brokers"][0]["error"].startswith(f"broker {c.master}")
    assert "queues" not in out["brokers"][0]
    lag = rocketmq.consumer_lag(c, "G", "", 2.0)  # type: ignore[arg-type]
    assert lag["queues"] == [] and lag["lag"] == 0 and lag["masters"] == [c.master]
    assert lag["errors"][0].startswith(f"broker {c.master}")
    with pytest.raises(BadInput):
        rocketmq.consumer_lag(c, "", "")  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        rocketmq.queue_offsets(c, "")  # type: ignore[arg-type]


def test_groups_clients_lag_in_time_and_lookup_against_a_broker(tmp_path: Path) -> None:
    """A real broker replica: its groups (committed offsets, a POP book, a heartbeat) are
    listed with lag in messages and in time and their clients; messages are found by key
    and by id, and an unknown or malformed id is a clear message."""

    async def scenario(ctx: Ctx) -> None:
        sent = []
        for i in range(4):
            r = await ctx.send(f"m{i}".encode(), properties=props(KEYS=f"k{i}", UNIQ_KEY=f"U{i}"))
            assert r.code == 0, r.remark
            sent.append(r.ext_fields["msgId"])
        ext = {"consumerGroup": "PULL", "topic": TOPIC, "queueId": 0, "commitOffset": 1}
        assert (await ctx.client.request(15, ext)).code == 0
        assert len(await ctx.replica.pop.pop("POP", TOPIC, 0, 2, 60_000, init_mode=0)) == 2
        heartbeat = {"clientID": "java-1", "consumerDataSet": [{
            "groupName": "PULL", "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}  # fmt: skip
        assert (await ctx.client.request(34, {}, json.dumps(heartbeat).encode())).code == 0
        c = FakeRoutes([TOPIC], f"127.0.0.1:{ctx.port}")

        page = await asyncio.to_thread(rocketmq_groups.group_page, c, "", 1)
        assert (page["total"], page["next"], page["errors"]) == (2, "POP", [])
        (pop,) = page["groups"]
        assert (pop["group"], pop["brokers"], pop["lag"], pop["inflight"]) == (
            "POP", ["b1"], 4, 2
        )  # fmt: skip
        (pull,) = (await asyncio.to_thread(rocketmq_groups.group_page, c, "POP", 1))["groups"]
        lag = await asyncio.to_thread(rocketmq.consumer_lag, c, "PULL", TOPIC)
        assert (pull["lag"], pull["lag_ms"], pull["clients"]) == (3, lag["lag_ms"], 1)
        (q0,) = [q for q in lag["queues"] if q["queue"] == 0]
        assert q0["lag_ms"] == q0["newest_timestamp"] - q0["next_timestamp"] >= 0
        assert q0["next_timestamp"] > 0 and pull["protocols"][0].startswith("remoting V")

        who = await asyncio.to_thread(rocketmq_groups.group_clients, c, "PULL")
        (java,) = who["clients"]
        assert (java["client_id"], java["protocol"], java["brokers"]) == (
            "java-1", "remoting", [c.master]
        )  # fmt: skip
        assert who["topics"] == [TOPIC] and who["errors"] == []
        nobody = await asyncio.to_thread(rocketmq_groups.group_clients, c, "POP")
        assert nobody["clients"] == [] and nobody["errors"] == []

        find = rocketmq_groups.find_messages
        by_key = await asyncio.to_thread(find, c, TOPIC, "k2")
        assert [m["body"] for m in by_key["messages"]] == ["m2"]
        by_offset_id = await asyncio.to_thread(find, c, "", "", sent[1])
        (m,) = by_offset_id["messages"]
        assert (m["msg_id"], m["body"], m["keys"]) == (sent[1], "m1", "k1")
        assert [x["body"] for x in (await asyncio.to_thread(find, c, TOPIC, "", "U3"))["messages"]] == ["m3"]  # fmt: skip
        with pytest.raises(NotFound, match="no message with id 'U9' in topic"):
            await asyncio.to_thread(find, c, TOPIC, "", "U9")
        with pytest.raises(NotFound, match="no message with id"):
            await asyncio.to_thread(find, c, "", "", sent[1][:-6] + "FFFFFF")
        with pytest.raises(BadInput, match="32 or 56 hex digits"):
            await asyncio.to_thread(find, c, "", "", "not-an-id")
        with pytest.raises(BadInput, match="needs the topic"):
            await asyncio.to_thread(find, c, "", "k1")
        with pytest.raises(BadInput, match="one of them"):
            await asyncio.to_thread(find, c, TOPIC, "", "")

    run_broker(tmp_path, scenario)


def test_a_group_list_without_brokers_names_them() -> None:
    c = FakeRoutes(["T"], _closed_port())
    page = rocketmq_groups.group_page(c, "", 50, "", 2.0)  # type: ignore[arg-type]
    assert page["groups"] == [] and page["errors"][0].startswith(f"broker {c.master}")
    who = rocketmq_groups.group_clients(c, "G", 2.0)  # type: ignore[arg-type]
    assert who["clients"] == [] and who["errors"][0].startswith(f"broker {c.master}")
    with pytest.raises(BadInput):
        rocketmq_groups.group_page(c, "", 0)  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        rocketmq_groups.group_clients(c, "")  # type: ignore[arg-type]
