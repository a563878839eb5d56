"""``metaledger broker|send|consume`` as a person runs them, and consumer offsets kept in
metaledger: they survive a broker restart with its offsets nowhere else, and only rise."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from broker.state.offsets import KvOffsetStore
from nameserver.client import Client, NotFound, QueueData
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, metaledger, wait_for

pytestmark = [pytest.mark.integration]


def has_route(client: Client, topic: str) -> bool:
    try:
        return bool(client.route_get(topic).queues)
    except NotFound:
        return False


def consume(
    root: Path, node: Cluster, topic: str, group: str, count: int
) -> list[dict[str, object]]:
    r = metaledger(
        root, "consume", topic, "--group", group, "--count", str(count), "--wait", "20",
        "--endpoints", node.endpoints[0], "-w", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def send(root: Path, node: Cluster, topic: str, body: str, *flags: str) -> str:
    r = metaledger(root, "send", topic, body, *flags, "--endpoints", node.endpoints[0])
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def test_send_consume_and_offsets_across_a_broker_restart(
    tmp_path: Path, node: Cluster, client: Client
) -> None:
    broker = BrokerProcess(tmp_path, node.endpoints)
    try:
        wait_for("registration", lambda: client.route_cluster_info().brokers)
        client.route_topic_create("CliTopic", [QueueData("broker-a", 2, 2, 6)])
        out = send(
            tmp_path, node, "CliTopic", "one", "--tags", "red", "--keys", "k1", "--property", "p=v"
        )
        assert out.startswith("SEND_OK msgId=")
        send(tmp_path, node, "CliTopic", "two")
        got = consume(tmp_path, node, "CliTopic", "people", 2)
        assert sorted(m["body"] for m in got) == ["one", "two"]
        one = next(m for m in got if m["body"] == "one")
        assert (one["tags"], one["keys"], one["properties"]["p"]) == ("red", "k1", "v")  # type: ignore[index]
        assert broker.stop() == 0
        # the broker keeps no consumer offsets of its own: they are in metaledger
        assert sorted(p.name for p in broker.data_dir.glob("*.json")) == [
            "delayOffset.json",
            "topics.json",
        ]
        stored = client.get("/brokers/broker-a/offsets/people/CliTopic/", prefix=True).kvs
        assert sum(int(kv.value) for kv in stored) == 2
        broker.start()
        wait_for("the route again", lambda: has_route(client, "CliTopic"))
        send(tmp_path, node, "CliTopic", "three")
        again = consume(tmp_path, node, "CliTopic", "people", 1)
        assert [m["body"] for m in again] == ["three"]
        r = metaledger(tmp_path, "send", "NoSuchTopic", "x", "--endpoints", node.endpoints[0])
        assert r.returncode == 4 and b"no route" in r.stderr
    finally:
        assert broker.stop() in (0, None)


def test_consume_without_count_stops_once_idle(
    tmp_path: Path, node: Cluster, client: Client
) -> None:
    """Without ``--count``, consume stops once no message came for ``--idle`` seconds after
    the last one, not at ``--wait``."""
    broker = BrokerProcess(tmp_path, node.endpoints)
    try:
        wait_for("registration", lambda: client.route_cluster_info().brokers)
        client.route_topic_create("IdleTopic", [QueueData("broker-a", 2, 2, 6)])
        wait_for("route", lambda: has_route(client, "IdleTopic"))
        base = ["consume", "IdleTopic", "--group", "idle", "--endpoints", node.endpoints[0]]
        # the group's offsets start at the topic's end: a first run records them
        first = metaledger(tmp_path, *base, "--wait", "1")
        assert first.returncode == 0, first.stderr.decode()
        send(tmp_path, node, "IdleTopic", "one")
        send(tmp_path, node, "IdleTopic", "two")
        started = time.monotonic()
        r = metaledger(tmp_path, *base, "--wait", "90", "-w", "json")
        took = time.monotonic() - started
        assert r.returncode == 0, r.stderr.decode()
        got = [json.loads(line)["body"] for line in r.stdout.decode().splitlines()]
        assert sorted(got) == ["one", "two"]
        assert took < 45, took  # gone about a second after the last message, not at --wait
    finally:
        assert broker.stop() == 0


def test_kv_offsets_only_rise_and_survive_a_new_store(node: Cluster, client: Client) -> None:
    a = KvOffsetStore(client, "bx")
    a.commit("g", "t", 0, 10)
    a.flush()
    b = KvOffsetStore(client, "bx")  # a new master: loads what the old one flushed
    assert b.load_all() == 1 and b.load("g", "t", 0) == 10
    b.commit("g", "t", 0, 4)  # lower: ignored
    b.commit("g", "t", 1, 3)
    b.flush()
    a.commit("g", "t", 0, 7)  # a stale writer cannot lower the stored offset
    a.flush()
    kvs = {
        kv.key.decode(): kv.value.decode()
        for kv in client.get("/brokers/bx/offsets/", prefix=True).kvs
    }
    assert kvs == {"/brokers/bx/offsets/g/t/0": "10", "/brokers/bx/offsets/g/t/1": "3"}
