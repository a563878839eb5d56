"""RocketMQ 5's Python producer (``rocketmq-python-client`` 5.1.2, gRPC) sends through a real
``metaledger broker``'s gRPC front; the 4.x side (PULL_MESSAGE over ``rmq.connection``) reads
every message back with its body byte for byte, its keys, tag, properties and message id.

The 5.x client runs in a venv of its own, made once per session: it ships a top-level
``rocketmq`` package as the 4.x ``rocketmq`` wheel of the dev extras does, and its own generated
``apache.rocketmq.v2``, whose symbols cannot share a descriptor pool with ``protos.apache``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, GroupPolicy, QueueData
from rmq.connection import RemotingConnection
from rmq.headers import PullMessageHeader
from rmq.message import MAX_BODY, StoredMessage, decode_records
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for

pytestmark = [pytest.mark.integration]

PRODUCER = str(Path(__file__).with_name("grpc_producer.py"))
TOPIC = "GrpcTopic"
QUEUES = 4


class Env:
    def __init__(self, root: Path, node: Cluster, broker: BrokerProcess, grpc_port: int) -> None:
        self.root, self.node, self.broker, self.grpc_port = root, node, broker, grpc_port


@contextlib.contextmanager
def grpc_env(
    root: Path, *broker_args: str, topics: tuple[str, ...] = (TOPIC,), metrics: bool = False
) -> Iterator[Env]:
    """A node and broker-a with a gRPC port (and ``broker_args``; ``metrics``: a metrics port,
    ``env.broker.metrics_port``), ``topics`` of 4 queues. The broker's ports are picked free
    and picked again if one was taken before it bound it (tests/ports.py)."""
    node = Cluster(root / "node", n=1)
    broker = None
    try:
        node.wait_ready(30)
        broker = BrokerProcess(
            root, node.endpoints, "broker-a", *broker_args, grpc=True, metrics=metrics
        )
        with Client(node.endpoints, timeout_s=10) as client:
            wait_for(
                "broker-a registered",
                lambda: client.route_cluster_info().clusters.get("DefaultCluster"),
            )
            for topic in topics:
                client.route_topic_create(topic, [QueueData("broker-a", QUEUES, QUEUES, 6)])
        yield Env(root, node, broker, broker.grpc_port)
    finally:
        code = 0
        if broker is not None:
            code = broker.stop()
            print(broker.log_tail())
        node.close()  # before the assert: a failed broker must not leave the node running
        assert code == 0, f"broker exited {code}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with grpc_env(tmp_path_factory.mktemp("grpc")) as e:
        yield e


def produce(
    python: Path,
    env: Env,
    spec: list[dict[str, Any]],
    broker: BrokerProcess | None = None,
    grpc_port: int = 0,
    topic: str = TOPIC,
) -> list[dict[str, Any]]:
    broker = broker or env.broker
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    clean["HOME"] = str(env.root)  # the client logs under $HOME/logs
    r = subprocess.run(
        [str(python), PRODUCER, f"127.0.0.1:{grpc_port or env.grpc_port}", topic],
        input=json.dumps(spec).encode(), capture_output=True, timeout=180, env=clean, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:] + broker.log_tail()
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]


async def _pull_all(port: int, topic: str = TOPIC) -> list[StoredMessage]:
    c = await RemotingConnection.connect("127.0.0.1", port)
    out: list[StoredMessage] = []
    try:
        for q in range(QUEUES):
            offset = 0
            while True:
                pull = PullMessageHeader(
                    consumer_group="inspect", topic=topic, queue_id=q, queue_offset=offset,
                    max_msg_nums=32, sys_flag=0x4, commit_offset=0, suspend_timeout_ms=0,
                    sub_version=0, subscription="*",
                )  # fmt: skip
                r = await c.call(pull.request(), timeout_s=10)
                if r.code != 0:
                    break
                got = decode_records(r.body)
                out.extend(got)
                offset = int(r.ext_fields["nextBeginOffset"])
                if not got:
                    break
    finally:
        await c.close()
    return out


def pull_all(env: Env, expect: int) -> list[StoredMessage]:
    found: list[StoredMessage] = []

    def enough() -> bool:
        found[:] = asyncio.run(_pull_all(env.broker.port))
        return len(found) >= expect

    wait_for(f"{expect} messages pulled", enough, timeout=30, every=0.2)
    return found


def large_body(n: int) -> bytes:
    blocks = (hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n // 32 + 1))
    return b"".join(blocks)[:n]


def test_a_5x_producer_sends_and_the_4x_side_reads_every_field(
    rocketmq5_python: Path, env: Env
) -> None:
    spec = [
        {"body_hex": bytes(range(256)).hex(), "tag": "TagA", "keys": ["k1", "k2"],
         "props": {"p1": "v1", "unicode": "h\u00e9llo \u4e16\u754c"}},
        {"body_hex": large_body(1024 * 1024 + 7).hex(), "tag": "Big", "keys": ["big"]},
        {"body_hex": "00"},
        {"body_hex": ""},  # the client refuses a blank body itself
        {"body_hex": large_body(MAX_BODY + 1).hex()},  # over the limit the server announced
    ]  # fmt: skip
    started = time.time()
    results = produce(rocketmq5_python, env, spec)
    assert len(results) == len(spec), results
    assert "body" in results[3].get("error", ""), results[3]
    assert "exceeds" in results[4].get("error", "") and str(MAX_BODY) in results[4]["error"]
    sent = results[:3]
    assert all("message_id" in r for r in sent), sent
    ids = [r["message_id"] for r in sent]
    bodies = [bytes.fromhex(item["body_hex"]) for item in spec[:3]]
    read_back(env, spec[:3], ids, bodies, started)


def read_back(
    env: Any, items: list[dict[str, Any]], ids: list[str], bodies: list[bytes], started: float
) -> dict[str, StoredMessage]:
    """Every sent message pulled back by its message id (``env.broker``'s ``TOPIC``): its
    body, and the tag, keys and properties of its spec ``items``; the stored messages."""
    assert len(set(ids)) == len(ids)
    stored = {m.properties.get("UNIQ_KEY"): m for m in pull_all(env, len(ids))}
    assert set(stored) == set(ids)
    for item, message_id, body in zip(items, ids, bodies, strict=True):
        m = stored[message_id]
        assert m.topic == TOPIC and 0 <= m.queue_id < QUEUES
        assert m.body == body, message_id
        assert m.tags == item.get("tag", "")
        assert set(filter(None, m.keys.split(" "))) == set(item.get("keys", []))
        user = {
            k: v for k, v in m.properties.items() if k not in ("UNIQ_KEY", "KEYS", "TAGS", "WAIT")
        }
        assert user == item.get("props", {}), user
        assert int(started) * 1000 - 1000 <= m.born_timestamp <= time.time() * 1000 + 1000
    return {k: m for k, m in stored.items() if k is not None}


def test_a_send_the_quorum_refuses_is_not_ok_for_the_5x_producer(
    rocketmq5_python: Path, env: Env
) -> None:
    """A SYNC_MASTER alone in a group whose policy wants 2 in-sync replicas stores nothing:
    the 5.x producer gets HA_NOT_AVAILABLE with the reason, never a receipt."""
    group, topic = "broker-q", "QuorumTopic"
    with Client(env.node.endpoints, timeout_s=10) as client:
        client.replica_set_policy(group, GroupPolicy(2, 2, 2), cluster_name="DefaultCluster")
        broker = BrokerProcess(
            env.root, env.node.endpoints, group, "--broker-role", "SYNC_MASTER", grpc=True
        )
        try:
            wait_for(
                f"{group} registered",
                lambda: group in client.route_cluster_info().clusters.get("DefaultCluster", ()),
            )
            client.route_topic_create(topic, [QueueData(group, 1, 1, 6)])
            results = produce(
                rocketmq5_python, env, [{"body_hex": "61"}], broker, broker.grpc_port, topic
            )
            assert len(results) == 1 and "error" in results[0], results
            assert "in-sync replicas not enough" in results[0]["error"], results
            assert asyncio.run(_pull_all(broker.port, topic)) == []
        finally:
            assert broker.stop() == 0, broker.log_tail()


def test_the_replica_publishes_its_grpc_front_in_metaledger(env: Env) -> None:
    """``/brokers/<group>/grpc/<replica id>`` (broker/grpc/forward.py), where the other
    replicas find it to forward to it and QueryRoute lists it."""
    with Client(env.node.endpoints, timeout_s=10) as client:
        replica_id = client.replica_group("broker-a").master_id
        key = f"/brokers/broker-a/grpc/{replica_id}"

        def published() -> bool:
            kvs = client.get(key).kvs
            return bool(kvs) and kvs[0].value == f"127.0.0.1:{env.grpc_port}".encode()

        wait_for(f"{key} published", published)
