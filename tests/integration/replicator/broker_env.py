"""A real metaledger node with one real ``metaledger broker`` registered in it: what the
replicators' integration tests send into and read back from (PULL, byte for byte)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nameserver.client import Client, QueueData
from rmq.connection import RemotingConnection
from rmq.message import StoredMessage, decode_records
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for

QUEUES = 4


@dataclass
class Env:
    root: Path
    node: Cluster
    broker: BrokerProcess
    client: Client

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.node.nodes[0].remoting_port}"

    def topic(self, name: str) -> str:
        self.client.route_topic_create(name, [QueueData("broker-a", QUEUES, QUEUES, 6)])
        return name


def broker_env(
    tmp_path_factory: pytest.TempPathFactory, *flags: str, nodes: int = 1
) -> Iterator[Env]:
    """The node (or a cluster of ``nodes``) and broker ``broker-a`` (``flags``: more of its
    command line), stopped after."""
    root = tmp_path_factory.mktemp("broker-env")
    node = Cluster(root / "node", n=nodes)
    broker = None
    try:
        node.wait_ready(30)
        if nodes > 1:
            node.wait_announced(30)
        broker = BrokerProcess(root, node.endpoints, "broker-a", *flags)
        with Client(node.endpoints, timeout_s=10) as client:
            wait_for(
                "broker-a registered",
                lambda: client.route_cluster_info().clusters.get("DefaultCluster"),
            )
            yield Env(root, node, broker, client)
    finally:
        if broker is not None:
            code = broker.stop()
            print(broker.log_tail())
            assert code in (0, None), f"broker exited {code}"
        node.close()


def pull_all(addr: str, topic: str, queue: int, start: int = 0) -> list[StoredMessage]:
    """Every message of the queue from queue offset ``start`` on (offsets count messages)."""
    out: list[StoredMessage] = []
    scan(addr, topic, queue, out.append, start)
    return out


def scan(
    addr: str, topic: str, queue: int, on_message: Callable[[StoredMessage], None], start: int = 0
) -> int:
    """``on_message`` for every message of the queue from ``start`` on, none kept (a big
    queue); returns the offset after the last."""

    async def go() -> int:
        host, _, port = addr.rpartition(":")
        c = await RemotingConnection.connect(host, int(port))
        offset = start
        try:
            while True:
                r = await c.request(11, {
                    "consumerGroup": "inspect", "topic": topic, "queueId": queue,
                    "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                    "suspendTimeoutMillis": 0, "subVersion": 0, "subscription": "*"})  # fmt: skip
                if r.code != 0:
                    assert r.code in (19, 20, 21), (r.code, r.remark)
                    return offset
                for m in decode_records(r.body):
                    on_message(m)
                offset = int(r.ext_fields["nextBeginOffset"])
        finally:
            await c.close()

    return asyncio.run(go())
