"""The ``rocketmq`` 0.4.4 wheel (C++ core) against a real ``metaledger broker`` registered in a
real metaledger node (issue 17, "Real clients, end to end"): producer sync, oneway, tags, keys,
properties; push consumer; bodies byte-exact (all 256 byte values, 4 MiB, empty); a restarted
group resumes from its committed offset; a failed message is redelivered through the retry
topic and lands in the DLQ after the maximum (``--retry-max-times 2``; fast delay levels).

Issue 30: a transaction's prepare half is held on the half topic and never delivered without
an end; the producer sends to a
topic nobody created (the broker's default: auto-creation on), and with
``--no-auto-create-topic`` such a send fails. The wheel's Python API has no transactional
producer (0.4.4 exports only ``Producer``, ``PushConsumer`` and ``PullConsumer``, and its
``librocketmq.so`` no C function for RocketMQ's ``TransactionMQProducer``), so its ordinary
producer sends the prepare half as a transactional producer puts it on the wire: the
``TRAN_MSG=true`` property, from which the C++ core sets the sysflag's TRANSACTION_PREPARED
type; ``rmq.connection`` checks the broker's answer itself."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, NotFound, QueueData
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import SendMessageHeader
from rmq.message import StoredMessage, decode_records
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, cli_env, metaledger, wait_for
from tests.integration.replicator.broker_env import broker_env

pytest.importorskip("rocketmq.client", reason="pip install rocketmq==0.4.4")
pytestmark = [pytest.mark.integration]

WHEEL = str(Path(__file__).with_name("wheel_client.py"))
TOPIC = "WheelTopic"
RETRY_TOPIC = "WheelRetried"
FAST_LEVELS = " ".join(["200ms"] * 18)


@dataclass
class Env:
    root: Path
    node: Cluster
    broker: BrokerProcess
    client: Client

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.node.nodes[0].remoting_port}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("wheel")
    node = Cluster(root / "node", n=1)
    broker = None
    try:
        node.wait_ready(30)
        broker = BrokerProcess(
            root, node.endpoints, "broker-a",
            "--retry-max-times", "2", "--message-delay-level", FAST_LEVELS,
        )  # fmt: skip
        with Client(node.endpoints, timeout_s=10) as client:
            wait_for(
                "broker-a registered",
                lambda: client.route_cluster_info().clusters.get("DefaultCluster"),
            )
            client.route_topic_create(TOPIC, [QueueData("broker-a", 4, 4, 6)])
            yield Env(root, node, broker, client)
    finally:
        code = 0
        if broker is not None:
            code = broker.stop()
            print(broker.log_tail())
        node.close()  # before the assert: a failed broker must not leave the node running
        assert code == 0, f"broker exited {code}"


def wheel_env(env: Env) -> dict[str, str]:
    e = cli_env(env.root)
    e["HOME"] = str(env.root)  # the C++ core logs to $HOME/logs/rocketmq-cpp
    return e


def produce(env: Env, spec: list[dict[str, Any]], group: str = "PG") -> list[dict[str, Any]]:
    r = subprocess.run(
        [sys.executable, WHEEL, "produce", env.namesrv, group],
        input=json.dumps(spec).encode(), capture_output=True, timeout=120, env=wheel_env(env), check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]


def consume(
    env: Env, group: str, expect: int, timeout_s: float = 60, fail: str = "", topic: str = TOPIC
) -> list[dict[str, Any]]:
    r = subprocess.run(
        [sys.executable, WHEEL, "consume", env.namesrv, group, topic, str(expect), str(timeout_s), fail],
        capture_output=True, timeout=timeout_s + 60, env=wheel_env(env), check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]


def item(keys: str, body: bytes, **kw: Any) -> dict[str, Any]:
    return {"topic": TOPIC, "keys": keys, "body_hex": body.hex()} | kw


def test_wheel_producer_and_push_consumer_bodies_byte_exact(env: Env) -> None:
    all_bytes = bytes(range(256)) * 4
    # 4 MiB, the store's limit: the C++ client zlib-compresses bodies over 4 KiB (random bytes
    # would grow past the limit and be refused with MESSAGE_ILLEGAL, as RocketMQ refuses them)
    big = (hashlib.shake_256(b"metaledger").digest(4096) + bytes(range(256))) * 1024
    big = big[: 4 * 1024 * 1024]
    spec = [
        item("k-all256", all_bytes, tags="bin"),
        item("k-big", big, tags="big"),
        item("k-props", b"with properties", tags="TagA", props={"color": "red"}),
        item("k-oneway", b"sent oneway", tags="TagB", oneway=True),
    ]
    results = produce(env, spec)
    assert [r.get("status", 0) for r in results] == [0, 0, 0, 0], results  # SEND_OK
    # the wheel refuses an empty body itself; one sent by the CLI reaches the C++ consumer
    r = metaledger(env.root, "send", TOPIC, "-", "--keys", "k-empty", "--property", "len=0",
                   "--endpoints", env.node.endpoints[0], stdin=b"")  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = {d["keys"]: d for d in consume(env, "G-exact", expect=5)}
    assert set(got) == {"k-all256", "k-big", "k-props", "k-oneway", "k-empty"}, got.keys()
    for it in spec:
        body = bytes.fromhex(it["body_hex"])
        d = got[it["keys"]]
        assert (d["len"], d["sha256"]) == (len(body), hashlib.sha256(body).hexdigest()), it["keys"]
        assert d["tags"] == it.get("tags", "") and d["topic"] == TOPIC
    assert got["k-props"]["color"] == "red"
    assert got["k-empty"]["len"] == 0


def test_a_restarted_group_resumes_from_its_committed_offset(env: Env) -> None:
    first = produce(env, [item(f"r1-{i}", f"first {i}".encode()) for i in range(8)])
    assert all(r["status"] == 0 for r in first)
    seen1 = consume(env, "G-resume", expect=8)
    assert {d["keys"] for d in seen1} >= {f"r1-{i}" for i in range(8)}
    wait_for(
        "G-resume's offsets in metaledger",
        lambda: (
            sum(
                int(kv.value)
                for kv in env.client.get("/brokers/broker-a/offsets/G-resume/", prefix=True).kvs
            )
            >= 8
        ),
    )
    produce(env, [item(f"r2-{i}", f"second {i}".encode()) for i in range(6)])
    seen2 = consume(env, "G-resume", expect=6)
    keys2 = {d["keys"] for d in seen2}
    assert keys2 >= {f"r2-{i}" for i in range(6)}
    assert not {k for k in keys2 if k.startswith("r1-")}, "the group started over"


async def _heartbeat(addr: str, group: str) -> None:
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port))
    body = {
        "clientID": "prime@1",
        "consumerDataSet": [{"groupName": group, "subscriptionDataSet": []}],
    }
    assert (await c.request(34, body=json.dumps(body).encode())).code == 0
    await c.request(35, {"clientID": "prime@1", "consumerGroup": group})
    await c.close()


def _dlq_depth(addr: str, group: str) -> int:
    async def go() -> int:
        host, _, port = addr.rpartition(":")
        c = await RemotingConnection.connect(host, int(port))
        r = await c.request(30, {"topic": f"%DLQ%{group}", "queueId": 0})
        await c.close()
        return int(r.ext_fields.get("offset", "0"))

    return asyncio.run(go())


def _dlq(addr: str, group: str) -> list[StoredMessage]:
    async def go() -> list[StoredMessage]:
        host, _, port = addr.rpartition(":")
        c = await RemotingConnection.connect(host, int(port))
        r = await c.request(11, {
            "consumerGroup": "inspect", "topic": f"%DLQ%{group}", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subVersion": 0, "subscription": "*"})  # fmt: skip
        await c.close()
        return decode_records(r.body)

    return asyncio.run(go())


def retry_topic_routed(client: Client, broker_addr: str, group: str) -> None:
    """Make the group's retry topic exist, with a route, before its consumer starts (as for a
    group that ran before). RocketMQ 4 clients (the C++ one, ali-ons) read a topic's route when
    they subscribe and then only every 30 s, and the broker creates ``%RETRY%<group>`` on the
    group's first heartbeat: a first consumer can miss its own retries for 30 s."""
    asyncio.run(_heartbeat(broker_addr, group))

    def retry_route() -> bool:
        try:
            return bool(client.route_get(f"%RETRY%{group}").queues)
        except NotFound:
            return False

    wait_for("the retry topic's route", retry_route)


def test_a_failed_message_is_retried_then_lands_in_the_dlq(env: Env) -> None:
    group = "G-retry"
    retry_topic_routed(env.client, env.broker.addr, group)
    # a topic of its own: the C++ client sends back every message of a failed callback's
    # batch, so a message pulled together with "bad" would be retried along with it
    env.client.route_topic_create(RETRY_TOPIC, [QueueData("broker-a", 1, 1, 6)])
    assert [r["status"] for r in produce(env, [item("bad", b"fails", topic=RETRY_TOPIC)])] == [0]
    proc = subprocess.Popen(
        [sys.executable, WHEEL, "consume", env.namesrv, group, RETRY_TOPIC, "0", "90", "bad"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=wheel_env(env), start_new_session=True,
    )  # fmt: skip
    try:
        wait_for("the DLQ", lambda: _dlq_depth(env.broker.addr, group) >= 1, timeout=60)
    except TimeoutError:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(
            f"no message in the DLQ; the consumer saw:\n{out.decode()}\n{err.decode()[-2000:]}"
        ) from None
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    seen = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    tries = sorted(d["reconsume_times"] for d in seen if d["keys"] == "bad")
    assert tries == [0, 1, 2], (tries, err.decode(errors="replace")[-2000:])
    assert all(d["topic"] == RETRY_TOPIC for d in seen)  # the retry copies carry the real topic
    (dead,) = _dlq(env.broker.addr, group)
    assert dead.body == b"fails" and dead.properties["RETRY_TOPIC"] == RETRY_TOPIC
    assert dead.properties["KEYS"] == "bad" and dead.reconsume_times == 3


async def _try_lock(addr: str, group: str, topic: str, queues: int) -> list[object]:
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port))
    mqs = [{"topic": topic, "brokerName": "broker-a", "queueId": q} for q in range(queues)]
    body = {"consumerGroup": group, "clientId": "intruder@1", "mqSet": mqs}
    r = await c.request(41, body=json.dumps(body).encode())
    await c.close()
    locked: list[object] = json.loads(r.body)["lockOKMQSet"]
    return locked


def test_orderly_push_consumer_holds_queue_locks_and_consumes_in_order(env: Env) -> None:
    topic, group = "WheelOrderly", "G-orderly"
    env.client.route_topic_create(topic, [QueueData("broker-a", 2, 2, 6)])
    sent = produce(env, [item(f"o-{i}", f"ordered {i}".encode(), topic=topic) for i in range(6)])
    assert all(r["status"] == 0 for r in sent)
    proc = subprocess.Popen(
        [sys.executable, WHEEL, "consume", env.namesrv, group, topic, "0", "60", "", "orderly"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=wheel_env(env), start_new_session=True,
    )  # fmt: skip
    lines: list[dict[str, Any]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(b"{"):
                lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for("6 messages consumed in order", lambda: len(lines) >= 6, timeout=60)
        # the C++ orderly consumer locked both queues (LOCK_BATCH_MQ): nobody else gets them
        wait_for(
            "the queues locked",
            lambda: asyncio.run(_try_lock(env.broker.addr, group, topic, 2)) == [],
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        reader.join(10)
    for q in (0, 1):
        offsets = [d["queue_offset"] for d in lines if d["queue_id"] == q]
        assert offsets == sorted(offsets) and len(offsets) == 3, lines
    assert sorted(d["keys"] for d in lines) == [f"o-{i}" for i in range(6)]


# --- issue 30: prepares held until ended, topics created on first send ----------------------


async def _request(addr: str, code: int, fields: dict[str, str], body: bytes = b"") -> Any:
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port))
    try:
        return await c.request(code, fields, body)
    finally:
        await c.close()


def _send_v2(addr: str, topic: str, sys_flag: int = 0, properties: str = "") -> Any:
    """SEND_MESSAGE_V2 as the C++ client writes it (defaultTopic TBW102, 4 queues)."""
    header = SendMessageHeader(
        producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=sys_flag, born_timestamp=1, flag=0, properties=properties,
    )  # fmt: skip
    request = header.request_v2(b"x")
    return asyncio.run(_request(addr, request.code, request.ext_fields, b"x"))


def _stored(env: Env, topic: str, queues: int) -> int:
    """Messages the broker holds for ``topic`` (its queues' max offsets, summed)."""
    fields = [{"topic": topic, "queueId": str(q)} for q in range(queues)]
    return sum(
        int(
            asyncio.run(_request(env.broker.addr, RequestCode.GET_MAX_OFFSET, f)).ext_fields[
                "offset"
            ]
        )
        for f in fields
    )


def _route(client: Client, topic: str) -> Any:
    try:
        return client.route_get(topic)
    except NotFound:
        return None


def test_a_transactional_prepare_is_held_and_never_delivered_without_an_end(env: Env) -> None:
    topic = "WheelTx"
    env.client.route_topic_create(topic, [QueueData("broker-a", 4, 4, 6)])
    half = item("half", b"prepare half", topic=topic, props={"TRAN_MSG": "true"}, expect_error=True)
    results = produce(
        env,
        [
            item("before", b"ordinary before", topic=topic),
            half,
            item("after", b"after", topic=topic),
        ],
    )
    by_key = {r["keys"]: r for r in results}
    assert by_key["before"]["status"] == 0 and by_key["after"]["status"] == 0, results
    # accepted (SEND_OK), stored on the half topic: nothing of it is on the topic's queues
    assert by_key["half"].get("status") == 0, results
    assert _stored(env, topic, 4) == 2

    raw = _send_v2(env.broker.addr, topic, sys_flag=0x4, properties="TRAN_MSG\x01true\x02")
    assert raw.code == ResponseCode.SUCCESS, raw.remark
    assert _stored(env, topic, 4) == 2

    # a consumer of the topic gets the two ordinary messages and nothing else
    seen = consume(env, "G-tx", expect=3, timeout_s=15, topic=topic)
    assert sorted(d["keys"] for d in seen) == ["after", "before"], seen


def test_the_wheel_sends_to_a_topic_nobody_created(env: Env) -> None:
    topic = "NeverCreatedByAnyone"
    assert _route(env.client, topic) is None
    tbw = env.client.route_get("TBW102")  # registered by the broker: auto-creation is on
    assert [(q.broker_name, q.perm) for q in tbw.queues] == [("broker-a", 7)]

    results = produce(env, [item(f"auto-{i}", f"auto {i}".encode(), topic=topic) for i in range(3)])
    assert [r.get("status") for r in results] == [0, 0, 0], results
    route = wait_for("the new topic's route", lambda: _route(env.client, topic))
    queues = [(q.broker_name, q.write_queue_nums, q.perm) for q in route.queues]
    assert queues == [("broker-a", 4, 6)]
    seen = consume(env, "G-auto", expect=3, timeout_s=60, topic=topic)
    assert {d["keys"] for d in seen} == {"auto-0", "auto-1", "auto-2"}, seen


def test_with_auto_create_off_a_send_to_an_unknown_topic_fails(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    start = contextlib.contextmanager(broker_env)
    with start(tmp_path_factory, "--no-auto-create-topic") as off:
        assert _route(off.client, "TBW102") is None  # nothing for a 4.x client to fall back to
        raw = _send_v2(off.broker.addr, "Unknown")
        assert raw.code == ResponseCode.TOPIC_NOT_EXIST, (raw.code, raw.remark)
        wheel = Env(off.root, off.node, off.broker, off.client)
        results = produce(wheel, [item("k", b"x", topic="Unknown", expect_error=True)])
        assert "error" in results[0], results
        assert _route(off.client, "Unknown") is None
