"""The RocketMQ page's reads against an in-memory routing table: 1,000 topics page 50 at a
time and only the page's routes are read, a filter narrows the names, and a broker that does
not answer (a closed port) is named in the answer instead of raising."""

from __future__ import annotations

import pytest

from console import rocketmq
from console.errors import BadInput
from nameserver.client import (
    BrokerGroup,
    BrokerInfo,
    ClusterInfo,
    QueueData,
    Route,
    TopicList,
)
from tests.harness import free_ports


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
