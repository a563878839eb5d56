"""The RocketMQ replicator's test environment itself (``clusters.py``): two independent
clusters, each its own nameserver and broker under its own cluster name; produced messages
(binary bodies, tags, keys, user properties) read back byte for byte where the send answer
said they were stored; a broker stopped and started again keeps its messages, and a paused
one answers nothing until resumed."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

import pytest

from nameserver.client import NotFound
from rmq.connection import RemotingConnection
from rmq.message import StoredMessage
from tests.integration.replicator.rocketmq.clusters import Message, RmqCluster

pytestmark = [pytest.mark.integration]

BODIES = [bytes(range(256)), b"\xff\xfe\x80 not utf-8 \xc3\x28", b"", b"\x00" * 3000]


def messages(tag: str) -> list[Message]:
    return [
        Message(
            body + i.to_bytes(2, "big"),
            tags=tag,
            keys=f"key-{i} other-{i}",
            properties={"seq": str(i), "note": "δ ünïcode ✓"},
        )
        for i, body in enumerate(BODIES * 3)
    ]


def test_two_independent_clusters(two_clusters: tuple[RmqCluster, RmqCluster]) -> None:
    a, b = two_clusters
    assert (a.name, b.name) == ("A", "B")
    assert a.namesrv != b.namesrv and a.broker_addr != b.broker_addr
    assert a.endpoints != b.endpoints
    for c in (a, b):
        info = c.routes.route_cluster_info()
        assert info.clusters == {c.name: [c.broker_name]}, info
    a.topic("OnlyInA", queues=8)
    b.topic("OnlyInB", queues=2, perm=4, order=True)
    assert [q.write_queue_nums for q in a.route("OnlyInA").queues] == [8]
    route_b = b.route("OnlyInB")
    assert [(q.read_queue_nums, q.perm, q.order) for q in route_b.queues] == [(2, 4, True)]
    assert {g.cluster for g in route_b.brokers} == {"B"}
    assert "OnlyInA" not in b.routes.route_topics().topics
    assert "OnlyInB" not in a.routes.route_topics().topics


def test_produce_and_pull_byte_exact(two_clusters: tuple[RmqCluster, RmqCluster]) -> None:
    a, b = two_clusters
    for c in (a, b):
        topic = c.topic(f"RoundTrip{c.name}", queues=4)
        msgs = messages(f"TAG_{c.name}")
        stored = c.produce(topic, msgs)
        assert [s.queue for s in stored] == [i % 4 for i in range(len(msgs))]
        assert len({s.msg_id for s in stored}) == len(msgs)
        by_queue = {q: c.pull_all(topic, q) for q in range(4)}
        for m, s in zip(msgs, stored, strict=True):
            got = by_queue[s.queue][s.offset]
            assert (got.queue_id, got.queue_offset, got.topic) == (s.queue, s.offset, topic)
            assert got.body == m.body
            assert got.tags == m.tags and got.properties["KEYS"] == m.keys
            assert {k: got.properties[k] for k in m.properties} == m.properties
            assert got.properties["UNIQ_KEY"] == s.msg_id
        everything = c.all_messages(topic)
        assert sorted(m.body for m in everything) == sorted(m.body for m in msgs)
        scanned: list[StoredMessage] = []
        assert c.scan(topic, scanned.append) == len(msgs)
        assert [(m.queue_id, m.queue_offset, m.body) for m in scanned] == [
            (m.queue_id, m.queue_offset, m.body) for m in everything
        ]
        # a chosen queue, offsets dense in send order, a given UNIQ_KEY kept
        fixed = c.produce(topic, [Message(b"q3", queue=3, properties={"UNIQ_KEY": "ID-1"})] * 2)
        end = len(by_queue[3])
        assert [(s.queue, s.offset, s.msg_id) for s in fixed] == [
            (3, end, "ID-1"),
            (3, end + 1, "ID-1"),
        ]
        assert [m.body for m in c.pull_all(topic, 3, start=end)] == [b"q3", b"q3"]
    with pytest.raises(NotFound):  # one cluster's topics are not in the other
        a.route("RoundTripB")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_stop_and_start_keeps_messages(
    two_clusters: tuple[RmqCluster, RmqCluster], sig: int
) -> None:
    _, b = two_clusters
    topic = b.topic(f"Outage{int(sig)}", queues=2)
    before = b.produce(topic, [f"before-{i}".encode() for i in range(10)])
    old_pid = b.broker_pid
    code = b.stop_broker(sig)
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
    host, _, port = b.broker_addr.rpartition(":")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    b.start_broker()
    assert b.broker_pid != old_pid
    assert [m.body for m in b.all_messages(topic)] == [
        f"before-{i}".encode() for i in (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)
    ]
    after = b.produce(topic, [b"after"], timeout=30)
    assert after[0].offset == sum(1 for s in before if s.queue == after[0].queue)


def test_pause_and_resume(two_clusters: tuple[RmqCluster, RmqCluster]) -> None:
    a, _ = two_clusters
    topic = a.topic("Paused", queues=1)

    async def send_while_paused() -> None:
        host, _, port = a.broker_addr.rpartition(":")
        conn = await RemotingConnection.connect(host, int(port))  # connected before the pause
        try:
            a.pause_broker()
            try:
                with pytest.raises(TimeoutError):
                    await conn.request(30, {"topic": topic, "queueId": 0}, timeout_s=1.0)
            finally:
                a.resume_broker()
            r = await conn.request(30, {"topic": topic, "queueId": 0}, timeout_s=10)
            assert r.code == 0 and int(r.ext_fields["offset"]) == 0, (r.code, r.remark)
        finally:
            await conn.close()

    asyncio.run(send_while_paused())
    assert [s.offset for s in a.produce(topic, [b"x", b"y"])] == [0, 1]


def test_three_clusters_one_name_inside_another(
    make_clusters: Callable[..., list[RmqCluster]],
) -> None:
    clusters = make_clusters()  # "A", "B", "AB"
    assert [c.name for c in clusters] == ["A", "B", "AB"]
    assert len({c.namesrv for c in clusters}) == 3
    for c in clusters:
        assert c.routes.route_cluster_info().clusters == {c.name: [c.broker_name]}
        topic = c.topic("Shared", queues=1)
        assert [s.offset for s in c.produce(topic, [c.name.encode()] * 2)] == [0, 1]
        assert [m.body for m in c.all_messages(topic)] == [c.name.encode()] * 2
        assert {g.cluster for g in c.route(topic).brokers} == {c.name}
