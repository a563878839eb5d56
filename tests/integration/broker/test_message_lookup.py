"""Message lookup on real brokers (issue 30): messages sent with keys through remoting
(``metaledger send``) and through RocketMQ 5's Python client (gRPC) are found by key
(QUERY_MESSAGE), by the 5.x message id (UNIQ_KEY), by the offset message id a SEND answers
(VIEW_MESSAGE_BY_ID), with ``metaledger message get``, on the slave too, and after the
master restarts; bad input gets a clear error."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, QueueData
from rmq.codes import ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import QueryMessageHeader, ViewMessageHeader
from rmq.message import StoredMessage, decode, decode_records
from rmq.msgid import parse_offset_msg_id
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, metaledger, wait_for
from tests.integration.broker.test_grpc_producer import Env, produce

pytestmark = [pytest.mark.integration]

TOPIC = "LookupTopic"
FOREVER = 2**62


class Group:
    def __init__(self, root: Path, node: Cluster, client: Client, grpc_port: int) -> None:
        self.root, self.node, self.client, self.grpc_port = root, node, client, grpc_port
        self.replicas: list[BrokerProcess] = []


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    node = Cluster(tmp_path / "node", n=1)
    g = None
    try:
        node.wait_ready(30)
        client = Client(node.endpoints, timeout_s=10)
        g = Group(tmp_path, node, client, 0)
        g.replicas.append(
            BrokerProcess(tmp_path, node.endpoints, "broker-a", replica="a0", grpc=True)
        )
        g.grpc_port = g.replicas[0].grpc_port
        wait_for("a0 is master", lambda: client.replica_group("broker-a").master_id)
        g.replicas.append(
            BrokerProcess(tmp_path, node.endpoints, "broker-a", replica="a1", grpc=True)
        )
        wait_for(
            "the slave in the in-sync set",
            lambda: len(client.replica_group("broker-a").sync_state_set) == 2,
        )
        client.route_topic_create(TOPIC, [QueueData("broker-a", 2, 2, 6)])
        yield g
    finally:
        if g is not None:
            for p in g.replicas:
                p.stop()
                print(p.log_tail())
            g.client.close()
        node.close()


def cli(g: Group, *args: str) -> subprocess.CompletedProcess[bytes]:
    return metaledger(g.root, *args, "--endpoints", g.node.endpoints[0])


def produce_5x(python: Path, g: Group, spec: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return produce(python, Env(g.root, g.node, g.replicas[0], g.grpc_port), spec, topic=TOPIC)


async def _call(addr: str, request: Any) -> Any:
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port))
    try:
        return await c.call(request, timeout_s=10)
    finally:
        await c.close()


def query(addr: str, key: str, unique: bool = False) -> list[StoredMessage]:
    request = QueryMessageHeader(TOPIC, key, 32, 0, FOREVER).request()
    if unique:
        request.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    r = asyncio.run(_call(addr, request))
    if r.code == ResponseCode.QUERY_NOT_FOUND:
        return []
    assert r.code == ResponseCode.SUCCESS, r.remark
    return decode_records(r.body)


def view(addr: str, offset: int) -> StoredMessage | None:
    r = asyncio.run(_call(addr, ViewMessageHeader(offset).request()))
    return decode(r.body) if r.code == ResponseCode.SUCCESS else None


def test_lookup_by_key_and_ids_on_master_and_slave_and_after_a_restart(
    group: Group, rocketmq5_python: Path
) -> None:
    g = group
    master, slave = g.replicas
    out = cli(g, "send", TOPIC, "from-remoting", "--keys", "order-1 shared", "--tags", "t1")
    assert out.returncode == 0, out.stderr.decode()
    offset_id = out.stdout.decode().split("msgId=")[1].split()[0]
    sent = produce_5x(
        rocketmq5_python,
        g,
        [{"body_hex": b"from-grpc".hex(), "tag": "t2", "keys": ["order-2", "shared"]}],
    )
    assert "message_id" in sent[0], sent
    uniq = sent[0]["message_id"]

    # QUERY_MESSAGE by key and by UNIQ_KEY, VIEW_MESSAGE_BY_ID by the SEND answer's msgId
    assert [m.body for m in query(master.addr, "order-1")] == [b"from-remoting"]
    assert [m.body for m in query(master.addr, "shared")] == [b"from-remoting", b"from-grpc"]
    assert [m.body for m in query(master.addr, uniq, unique=True)] == [b"from-grpc"]
    where = parse_offset_msg_id(offset_id)
    assert (where.ip, where.port) == ("127.0.0.1", master.port)
    seen = view(master.addr, where.offset)
    assert seen is not None and seen.body == b"from-remoting" and seen.keys == "order-1 shared"

    # the slave indexed what it copied, and serves it once the master's confirm offset
    # (sent over HA) covers it: both messages, which may arrive a frame apart
    wait_for("the slave's index", lambda: len(query(slave.addr, "shared")) == 2, timeout=20)
    assert [m.body for m in query(slave.addr, "order-2")] == [b"from-grpc"]
    on_slave = view(slave.addr, where.offset)
    assert on_slave is not None and on_slave.body == b"from-remoting"

    # metaledger message get
    r = cli(g, "message", "get", "--key", "order-2", "--topic", TOPIC, "--json")
    assert r.returncode == 0, r.stderr.decode()
    (doc,) = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert doc["body"] == "from-grpc" and doc["uniqKey"] == uniq and doc["tags"] == "t2"
    assert sorted(doc["keys"].split()) == ["order-2", "shared"] and doc["storeHost"] == master.addr
    r = cli(g, "message", "get", "--id", offset_id)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert (
        f"msgId={offset_id}" in text
        and "body: from-remoting" in text
        and "KEYS=order-1 shared" in text
    )
    r = cli(g, "message", "get", "--id", uniq, "--topic", TOPIC, "-w", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["body"] == "from-grpc"

    # bad input
    r = cli(g, "message", "get", "--id", "not-an-id")
    assert r.returncode == 2 and b"not an offset message id" in r.stderr
    r = cli(g, "message", "get", "--id", "0" * 32, "--topic", TOPIC)
    assert r.returncode in (3, 4), r.stderr.decode()
    r = cli(g, "message", "get", "--id", "NO-SUCH-ID", "--topic", TOPIC)
    assert r.returncode == 4 and b"no message with id 'NO-SUCH-ID' in topic" in r.stderr
    r = cli(g, "message", "get", "--key", "order-1")
    assert r.returncode == 2 and b"--key needs --topic" in r.stderr
    r = cli(g, "message", "get", "--key", "order-1", "--topic", "NoSuchTopic")
    assert r.returncode == 4 and b"no route" in r.stderr

    # the master restarts: its index is still there (and the slave's, meanwhile)
    assert master.stop() == 0
    assert [m.body for m in query(slave.addr, "shared")] == [b"from-remoting", b"from-grpc"]
    master.start()
    # a restarted master serves what its in-sync slave confirms again: once it reconnected
    both = [b"from-remoting", b"from-grpc"]
    wait_for(
        "the restarted master's index",
        lambda: [m.body for m in query(master.addr, "shared")] == both,
        timeout=20,
    )
    assert [m.body for m in query(master.addr, uniq, unique=True)] == [b"from-grpc"]
    wait_for(
        "a master in the routes",
        lambda: any(b.addrs.get(0) for b in g.client.route_get(TOPIC).brokers),
    )
    r = cli(g, "message", "get", "--key", "order-1", "--topic", TOPIC, "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["body"] == "from-remoting"
    r = cli(g, "message", "get", "--id", offset_id, "--topic", TOPIC, "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["msgId"] == offset_id
