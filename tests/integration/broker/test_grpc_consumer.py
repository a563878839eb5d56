"""RocketMQ 5's Python consumers (``rocketmq-python-client`` 5.1.2, gRPC) against a real
``metaledger broker``: the simple consumer (receive, ack, change the invisible duration,
redelivery, the DLQ after the group's max attempts), the push consumer (concurrent with a
retry, and FIFO: one message group's messages in order), bodies byte for byte, keys, tags and
properties; both protocols on one topic (the 4.x wheel's messages reach the 5.x consumer, the
5.x producer's reach the 4.x consumer, a POP group and a PULL group each see everything); bad
input on the gRPC port gets its v2 code, names the field and changes nothing.

The clients run as subprocesses in their own venv (see test_grpc_producer.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from protos.apache.rocketmq.v2 import service_pb2_grpc as svc_grpc
from rmq.connection import RemotingConnection
from rmq.consume_stats import decode_consume_stats
from rmq.headers import GetConsumeStatsHeader
from rmq.message import MAX_BODY, SYSFLAG_COMPRESSED, inflate
from tests.integration.broker import test_wheel
from tests.integration.broker.conftest import wait_for
from tests.integration.broker.test_grpc_producer import (
    Env,
    _pull_all,
    grpc_env,
    large_body,
    produce,
)

pytestmark = [pytest.mark.integration]

CONSUMER = str(Path(__file__).with_name("grpc_consumer.py"))
TOPICS = (
    "SimpleTopic", "RetryTopic", "PushTopic", "FifoTopic", "BothTopic", "BadTopic", "GzipTopic",
    "RenewTopic",
)  # fmt: skip
FIFO_GROUP = "FifoG"
MAX_ATTEMPTS = 3  # --retry-max-times 2, + 1
#: the broker's auto_renew invisible time (60 s by default): a listener holding a message
#: past it (HOLD_S) shows the renewal in seconds rather than minutes
AUTO_RENEW_INVISIBLE_S = 10
HOLD_S = 15


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with grpc_env(
        tmp_path_factory.mktemp("grpcc"),
        "--fifo-group", FIFO_GROUP, "--retry-max-times", str(MAX_ATTEMPTS - 1),
        "--pop-auto-renew-invisible-ms", str(AUTO_RENEW_INVISIBLE_S * 1000),
        topics=TOPICS,
    ) as e:  # fmt: skip
        yield e


def consume(
    python: Path, env: Env, topic: str, group: str, mode: str, spec: dict[str, Any]
) -> list[dict[str, Any]]:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    clean["HOME"] = str(env.root)
    r = subprocess.run(
        [str(python), CONSUMER, f"127.0.0.1:{env.grpc_port}", topic, group, mode],
        input=json.dumps(spec).encode(), capture_output=True, timeout=240, env=clean, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:] + env.broker.log_tail()
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]


def events(out: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in out if e["event"] == kind]


def test_a_simple_consumer_receives_every_field_and_acks(rocketmq5_python: Path, env: Env) -> None:
    topic = "SimpleTopic"
    spec = [
        {"body_hex": bytes(range(256)).hex(), "tag": "TagA", "keys": ["k1", "k2"],
         "props": {"p1": "v1", "unicode": "h\u00e9llo \u4e16\u754c"}},
        {"body_hex": large_body(MAX_BODY).hex(), "tag": "Big"},
        {"body_hex": "00"},
    ]  # fmt: skip
    sent = produce(rocketmq5_python, env, spec, topic=topic)
    ids = [r["message_id"] for r in sent]
    assert len(set(ids)) == 3, sent
    steps = [
        {"op": "receive", "expect": 3, "invisible_s": 20},
        {"op": "ack"},
        {"op": "receive", "expect": 1, "invisible_s": 20, "within_s": 6},
    ]
    out = consume(rocketmq5_python, env, topic, "SimpleG", "simple", {"steps": steps})
    got = {m["message_id"]: m for m in events(out, "received")}
    assert set(got) == set(ids), out
    assert len(events(out, "received")) == 3, "an acked message came back"
    assert len(events(out, "acked")) == 3 and not events(out, "error"), out
    for item, message_id in zip(spec, ids, strict=True):
        m = got[message_id]
        assert m["body_hex"] == item["body_hex"] and not m["corrupted"]
        assert m["topic"] == topic and m["attempt"] == 1
        assert m["tag"] == item.get("tag") or (m["tag"] in ("", None) and "tag" not in item)
        assert m["keys"] == sorted(item.get("keys", []))
        assert m["props"] == item.get("props", {})
        assert m["born_host"] and not m["message_group"]


def test_change_invisible_duration_redelivers_then_the_dlq(
    rocketmq5_python: Path, env: Env
) -> None:
    """Each delivery is put back visible after 1 s; the third is the group's last: the
    message then goes to ``%DLQ%<group>`` and is not delivered again."""
    topic, group = "RetryTopic", "SimpleR"
    sent = produce(rocketmq5_python, env, [{"body_hex": b"retry me".hex()}], topic=topic)
    cycle = [
        {"op": "receive", "expect": 1, "invisible_s": 20},
        {"op": "change", "invisible_s": 1},
        {"op": "sleep", "s": 1.5},
    ]
    steps = cycle * MAX_ATTEMPTS + [
        {"op": "receive", "expect": 1, "invisible_s": 20, "within_s": 8}
    ]
    out = consume(rocketmq5_python, env, topic, group, "simple", {"steps": steps})
    received = events(out, "received")
    assert [m["attempt"] for m in received] == list(range(1, MAX_ATTEMPTS + 1)), out
    assert {m["message_id"] for m in received} == {sent[0]["message_id"]}
    assert len(events(out, "changed")) == MAX_ATTEMPTS and not events(out, "error"), out

    def in_dlq() -> bool:
        dead = asyncio.run(_pull_all(env.broker.port, f"%DLQ%{group}"))
        return [m.body for m in dead] == [b"retry me"]

    wait_for("the message in the DLQ", in_dlq, timeout=30, every=0.5)


def test_a_push_consumer_consumes_and_a_failure_is_redelivered(
    rocketmq5_python: Path, env: Env
) -> None:
    topic = "PushTopic"
    spec = [{"body_hex": f"push-{i}".encode().hex(), "props": {"fail": "1" if i == 2 else "0"}}
            for i in range(6)]  # fmt: skip
    ids = [r["message_id"] for r in produce(rocketmq5_python, env, spec, topic=topic)]
    out = consume(rocketmq5_python, env, topic, "PushG", "push", {"expect": 6, "within_s": 60})
    assert events(out, "started")[0]["fifo"] is False
    calls = events(out, "consume")
    ok = {c["message_id"] for c in calls if c["ok"]}
    assert ok == set(ids), out
    failed = [c for c in calls if c["message_id"] == ids[2]]
    assert [(c["ok"], c["attempt"]) for c in failed[:2]] == [(False, 1), (True, 2)], failed


def test_a_fifo_group_gets_each_message_group_in_order(rocketmq5_python: Path, env: Env) -> None:
    """g1-2 fails once and is consumed again before g1-3; g2-4 always fails: after the group's
    max attempts (local retries, FIFO) the client forwards it to the DLQ and g2 goes on."""
    topic = "FifoTopic"
    fail = {("g1", 2): "1", ("g2", 4): "99"}
    spec = [
        {"body_hex": f"{g}-{n}".encode().hex(), "group": g,
         "props": {"fail": fail.get((g, n), "0")}}
        for n in range(6) for g in ("g0", "g1", "g2")
    ]  # fmt: skip
    sent = produce(rocketmq5_python, env, spec, topic=topic)
    assert all("message_id" in r for r in sent), sent
    stored = asyncio.run(_pull_all(env.broker.port, topic))
    queues: dict[str, set[int]] = {}
    for m in stored:
        queues.setdefault(m.properties["__SHARDINGKEY"], set()).add(m.queue_id)
    assert all(len(q) == 1 for q in queues.values()), queues  # one group, one queue
    out = consume(
        rocketmq5_python, env, topic, FIFO_GROUP, "push",
        {"expect": len(spec) - 1, "within_s": 90, "linger_s": 3},
    )  # fmt: skip
    assert events(out, "started")[0]["fifo"] is True
    for g in ("g0", "g1", "g2"):
        ok = [bytes.fromhex(c["body_hex"]).decode() for c in events(out, "consume")
              if c["ok"] and c["message_group"] == g]  # fmt: skip
        assert ok == [f"{g}-{n}" for n in range(6) if (g, n) != ("g2", 4)], (g, ok)
    retried = [c for c in events(out, "consume") if bytes.fromhex(c["body_hex"]) == b"g1-2"]
    assert [c["ok"] for c in retried] == [False, True]
    dead = [c for c in events(out, "consume") if bytes.fromhex(c["body_hex"]) == b"g2-4"]
    assert [c["ok"] for c in dead] == [False] * MAX_ATTEMPTS

    def in_dlq() -> bool:
        return [m.body for m in asyncio.run(_pull_all(env.broker.port, f"%DLQ%{FIFO_GROUP}"))] == [
            b"g2-4"
        ]

    wait_for("g2-4 in the DLQ", in_dlq, timeout=30, every=0.5)


def test_both_protocols_on_one_topic(rocketmq5_python: Path, env: Env) -> None:
    """A 4.x wheel message reaches the 5.x consumer, a 5.x producer's reaches the 4.x push
    consumer; the POP group and the PULL group each see all four."""
    topic = "BothTopic"
    new = [b"from-5x-\x00\xff", b"from-5x-2"]
    old = [b"from-4x-\x00\x01", b"from-4x-2"]
    produce(rocketmq5_python, env,
            [{"body_hex": b.hex(), "keys": [f"k5{i}"], "tag": "T5",
              "props": {"len": str(len(b))}} for i, b in enumerate(new)],
            topic=topic)  # fmt: skip
    wheel_env = test_wheel.Env(env.root, env.node, env.broker, None)  # type: ignore[arg-type]
    results = test_wheel.produce(
        wheel_env, [{"topic": topic, "keys": f"k4{i}", "tags": "T4", "body_hex": b.hex()}
                    for i, b in enumerate(old)]
    )  # fmt: skip
    assert all(r.get("status") == 0 for r in results), results
    steps = [{"op": "receive", "expect": 4, "invisible_s": 20}, {"op": "ack"}]
    out = consume(rocketmq5_python, env, topic, "BothPop", "simple", {"steps": steps})
    got = {bytes.fromhex(m["body_hex"]): m for m in events(out, "received")}
    assert set(got) == set(new + old), out
    for i, b in enumerate(old):
        assert got[b]["keys"] == [f"k4{i}"] and got[b]["tag"] == "T4"
        assert got[b]["props"].get("len") == str(len(b))
    pulled = test_wheel.consume(wheel_env, "BothPull", 4, topic=topic)
    by_hash = {r["sha256"]: r for r in pulled}
    assert set(by_hash) == {hashlib.sha256(b).hexdigest() for b in new + old}, pulled
    assert {r["keys"] for r in pulled} == {"k50", "k51", "k40", "k41"}


def test_gzip_encoded_bodies_reach_5x_and_4x_consumers_as_sent(
    rocketmq5_python: Path, env: Env
) -> None:
    """The 5.x producer's requests with ``body_encoding`` GZIP: a zlib stream (the Java
    client's Deflater, stored compressed) and a gzip member (the C# and Go clients'), of all
    256 byte values and of 4 MiB; the 5.x simple consumer and the 4.x wheel's push consumer
    each get the original bytes. A body that does not inflate is MESSAGE_CORRUPTED for the
    client and nothing is stored."""
    topic = "GzipTopic"
    all_bytes = bytes(range(256)) * 64
    big = (bytes(range(256)) * 4096 + b"end")[:MAX_BODY]
    bodies = [all_bytes, big, b"short, gzip", all_bytes[::-1]]
    spec = [
        {"body_hex": all_bytes.hex(), "encoding": "zlib", "keys": ["z1"], "tag": "Z"},
        {"body_hex": big.hex(), "encoding": "zlib", "keys": ["z2"], "tag": "Z"},
        {"body_hex": bodies[2].hex(), "encoding": "gzip", "keys": ["g1"], "tag": "G"},
        {"body_hex": bodies[3].hex(), "encoding": "gzip", "keys": ["g2"], "tag": "G"},
        {"body_hex": b"never stored".hex(), "encoding": "corrupt", "keys": ["bad"]},
    ]
    for item in spec:  # the wheel's consumer reads a body of this length (its C API has none)
        item["props"] = {"len": str(len(bytes.fromhex(item["body_hex"])))}
    sent = produce(rocketmq5_python, env, spec, topic=topic)
    assert [("error" in r) for r in sent] == [False] * 4 + [True], sent
    assert "MESSAGE_CORRUPTED" in sent[4]["error"] or "40016" in sent[4]["error"], sent[4]
    stored = {m.properties["KEYS"]: m for m in asyncio.run(_pull_all(env.broker.port, topic))}
    assert sorted(stored) == ["g1", "g2", "z1", "z2"], "nothing of the corrupt one is stored"
    for key, body in (("z1", bodies[0]), ("z2", bodies[1])):  # as sent, flagged compressed
        assert stored[key].sysflag & SYSFLAG_COMPRESSED and len(stored[key].body) < len(body)
        assert inflate(stored[key].body, stored[key].sysflag) == body
    for key, body in (("g1", bodies[2]), ("g2", bodies[3])):  # inflated
        assert stored[key].body == body and not stored[key].sysflag & SYSFLAG_COMPRESSED
    steps = [{"op": "receive", "expect": 4, "invisible_s": 30}, {"op": "ack"}]
    out = consume(rocketmq5_python, env, topic, "GzipPop", "simple", {"steps": steps})
    got = {m["message_id"]: m for m in events(out, "received")}
    assert len(got) == 4 and not events(out, "error"), out
    for item, r in zip(spec[:4], sent[:4], strict=True):
        m = got[r["message_id"]]
        assert m["body_hex"] == item["body_hex"] and not m["corrupted"]
        assert m["keys"] == item["keys"] and m["tag"] == item["tag"]
    wheel_env = test_wheel.Env(env.root, env.node, env.broker, None)  # type: ignore[arg-type]
    pulled = test_wheel.consume(wheel_env, "GzipPull", 4, topic=topic)
    assert sorted(r["sha256"] for r in pulled) == sorted(
        hashlib.sha256(b).hexdigest() for b in bodies
    ), pulled
    assert sorted(r["keys"] for r in pulled) == ["g1", "g2", "z1", "z2"]


def test_a_push_listener_holding_a_message_past_its_invisible_time_sees_it_once(
    rocketmq5_python: Path, env: Env
) -> None:
    """The push consumer receives with ``auto_renew`` (the broker's
    ``--pop-auto-renew-invisible-ms``, 10 s here) and renews nothing itself; its listener holds
    the message 15 s. The broker renews the handle ahead of its instant, so the message is not
    delivered again meanwhile, and the client's ack with the handle it got acks it (the group's
    offset passes it, nothing in flight)."""
    assert HOLD_S > AUTO_RENEW_INVISIBLE_S  # without the renewal it would come back
    topic = "RenewTopic"
    body = {"body_hex": b"slow".hex(), "props": {"hold_s": str(HOLD_S)}}
    sent = produce(rocketmq5_python, env, [body], topic=topic)
    spec = {"expect": 1, "within_s": 150, "linger_s": 3}
    out = consume(rocketmq5_python, env, topic, "RenewPush", "push", spec)
    calls = [e for e in events(out, "consume") if e["message_id"] == sent[0]["message_id"]]
    assert [(c["call"], c["ok"], c["attempt"]) for c in calls] == [(1, True, 1)], out
    assert events(out, "holding"), out

    async def settled() -> bool:
        c = await RemotingConnection.connect("127.0.0.1", env.broker.port)
        try:
            r = await c.call(GetConsumeStatsHeader("RenewPush", topic).request())
        finally:
            await c.close()
        rows = decode_consume_stats(r.body)[0] if r.code == 0 else []
        return (
            bool(rows)
            and all(q.consumer_offset == q.broker_offset and q.inflight == 0 for q in rows)
            and sum(q.broker_offset for q in rows) == 1
        )

    wait_for("the held message acked", lambda: asyncio.run(settled()), timeout=20, every=0.5)


# ------------------------------------------------------------------------------ bad input
async def _bad_input(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        md = (("x-mq-client-id", "bad-input-test"),)

        async def receive(group: str, invisible_s: int) -> list[Any]:
            req = svc.ReceiveMessageRequest(batch_size=4, auto_renew=False)
            req.group.name = group
            req.message_queue.topic.name = "BadTopic"
            req.invisible_duration.FromSeconds(invisible_s)
            req.long_polling_timeout.FromSeconds(5)
            return [r async for r in stub.ReceiveMessage(req, metadata=md, timeout=20)]

        async def ack(group: str, handle: str) -> Any:
            req = svc.AckMessageRequest(entries=[svc.AckMessageEntry(receipt_handle=handle)])
            req.group.name, req.topic.name = group, "BadTopic"
            return await stub.AckMessage(req, metadata=md, timeout=10)

        send = svc.SendMessageRequest()
        m = send.messages.add(body=b"only one")
        m.topic.name = "BadTopic"
        m.system_properties.message_id = "BAD-INPUT-1"
        assert (await stub.SendMessage(send, metadata=md, timeout=10)).status.code == v2.OK

        out = await receive("", 20)
        assert out[0].status.code == v2.ILLEGAL_CONSUMER_GROUP, out
        assert "group.name" in out[0].status.message
        out = await receive("BadA", 1)
        assert out[0].status.code == v2.ILLEGAL_INVISIBLE_TIME, out
        assert "invisible_duration" in out[0].status.message

        out = await receive("BadA", 20)
        assert out[0].status.code == v2.OK and len(out) == 3, out
        handle = out[1].message.system_properties.receipt_handle
        assert out[1].message.body == b"only one" and handle

        r = await ack("BadA", "not-a-handle")
        assert r.status.code == v2.INVALID_RECEIPT_HANDLE, r
        assert "entries[0].receipt_handle" in r.entries[0].status.message
        r = await ack("BadB", handle)  # another group's handle
        assert r.status.code == v2.INVALID_RECEIPT_HANDLE, r

        change = svc.ChangeInvisibleDurationRequest(receipt_handle=handle)
        change.group.name, change.topic.name = "BadA", "BadTopic"
        change.invisible_duration.FromSeconds(13 * 3600)
        r = await stub.ChangeInvisibleDuration(change, metadata=md, timeout=10)
        assert r.status.code == v2.ILLEGAL_INVISIBLE_TIME and "invisible_duration" in str(r)

        assignment = svc.QueryAssignmentRequest()
        assignment.topic.name, assignment.group.name = "NoSuchTopic", "BadA"
        r = await stub.QueryAssignment(assignment, metadata=md, timeout=10)
        assert r.status.code == v2.TOPIC_NOT_FOUND, r

        # malformed protos: the method's answer, BAD_REQUEST naming the message
        raw_send = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            response_deserializer=svc.SendMessageResponse.FromString,
        )
        r = await raw_send(b"\xff\xff\xff\xff", metadata=md, timeout=10)
        assert r.status.code == v2.BAD_REQUEST, r
        assert "cannot decode apache.rocketmq.v2.SendMessageRequest" in r.status.message
        raw_ack = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/AckMessage",
            response_deserializer=svc.AckMessageResponse.FromString,
        )
        r = await raw_ack(b"\x0a\xff", metadata=md, timeout=10)
        assert r.status.code == v2.BAD_REQUEST and "AckMessageRequest" in r.status.message

        # nothing changed: the handle still acks, once; nothing more was stored
        assert (await ack("BadA", handle)).status.code == v2.OK
        assert (await ack("BadA", handle)).status.code == v2.INVALID_RECEIPT_HANDLE
        out = await receive("BadC", 20)
        assert [m.message.body for m in out if m.HasField("message")] == [b"only one"], out


def test_bad_input_gets_its_code_names_the_field_and_changes_nothing(env: Env) -> None:
    asyncio.run(_bad_input(env.grpc_port))
