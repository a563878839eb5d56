"""Reads from a slave (issue 17 item 4, "consumers may read from a slave when the master
suggests it"): a master and a slave with ``--slave-read-enable`` and a 1-byte lag limit; the
``rocketmq`` wheel's push consumer, behind the commit log's end, is told
``suggestWhichBrokerId`` = the slave's id, pulls from the slave (its metrics count the pulls)
and gets every message exactly as sent."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import Client, QueueData
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for
from tests.integration.broker.test_wheel import Env, consume, item, produce

pytest.importorskip("rocketmq.client", reason="pip install rocketmq==0.4.4")
pytestmark = [pytest.mark.integration]

TOPIC = "WheelTopic"  # test_wheel's produce/consume helpers use this topic


def pulls_served(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^metaledger_broker_pull_latency_seconds_count\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Env, BrokerProcess, int, Client]]:
    node = Cluster(tmp_path / "node", n=1)
    procs: list[BrokerProcess] = []
    try:
        node.wait_ready(30)
        client = Client(node.endpoints, timeout_s=10)
        flags = ("--slave-read-enable", "--slave-read-lag-bytes", "1")
        master = BrokerProcess(
            tmp_path, node.endpoints, "broker-a", *flags, replica="a0", metrics=True
        )
        procs.append(master)
        wait_for("a0 is master", lambda: client.replica_group("broker-a").master_id)
        slave = BrokerProcess(
            tmp_path, node.endpoints, "broker-a", *flags, replica="a1", metrics=True
        )
        procs.append(slave)
        wait_for(
            "the slave in the in-sync set",
            lambda: len(client.replica_group("broker-a").sync_state_set) == 2,
        )
        client.route_topic_create(TOPIC, [QueueData("broker-a", 1, 1, 6)])
        yield Env(tmp_path, node, master, client), slave, slave.metrics_port, client
    finally:
        for p in procs:
            p.stop()
        node.close()


def test_a_lagging_consumer_is_sent_to_the_slave_and_gets_everything(
    pair: tuple[Env, BrokerProcess, int, Client],
) -> None:
    env, _slave, slave_metrics, client = pair
    spec = [item(f"s-{i}", b"%05d" % i + bytes(range(256))) for i in range(200)]
    assert all(r["status"] == 0 for r in produce(env, spec))
    assert client.replica_group("broker-a").master_id
    assert pulls_served(slave_metrics) == 0
    got = consume(env, "G-slave-read", expect=200, timeout_s=60)
    assert sorted(d["keys"] for d in got) == sorted(it["keys"] for it in spec)
    bodies = {it["keys"]: it for it in spec}
    for d in got:
        assert d["len"] == len(bytes.fromhex(bodies[d["keys"]]["body_hex"]))
    assert pulls_served(slave_metrics) > 0, "the consumer never pulled from the slave"
