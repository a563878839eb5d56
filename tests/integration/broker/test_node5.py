"""RocketMQ 5's Node.js client (npm ``rocketmq-client-nodejs`` 1.0.8, gRPC) against a real
``metaledger broker``'s gRPC front, driven by ``tests/js/grpc_client.js``:

- its producer's messages are read back over remoting (PULL through ``rmq.connection``) with
  the body byte for byte (all 256 byte values, 4 MiB), keys, tag, properties and message id;
- its producer's FIFO messages (messageGroup) reach a PushConsumer of a ``--fifo-group`` one
  message group in order (a failure goes to the DLQ at once: the client has no policy for the
  customized backoff the broker announces, as RocketMQ's proxy does); its timer message
  (deliveryTimestamp) is received not before its time; its transactional producer commits,
  rolls back and answers the broker's check-back; an empty body is refused by the broker;
- its SimpleConsumer receives, acks and changes a message's invisible duration (redelivered as
  attempt 2), gets a message it never acks again after the invisible time and, after the
  group's max attempts, not at all (it is in ``%DLQ%<group>``); its PushConsumer sees a failed
  message again, over the POP model;
- the broker's metrics count it by protocol, language and version beside a remoting
  connection, and forget both when they go."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode
from rmq.connection import RemotingConnection
from rmq.message import MAX_BODY
from tests.integration.broker import test_grpc_producer as producer5
from tests.integration.broker.conftest import wait_for
from tests.integration.broker.test_grpc_producer import TOPIC, _pull_all, large_body, read_back

JS_DIR = Path(__file__).resolve().parents[2] / "js"
CLIENT = "rocketmq-client-nodejs"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("node") is None or not (JS_DIR / "node_modules" / CLIENT).is_dir(),
        reason=f"{CLIENT} is not installed (scripts/test.sh runs npm ci --prefix tests/js)",
    ),
]
SIMPLE, PUSH = "Node5Simple", "Node5Push"  # the consumers' topics
FIFO, TIMER, TX, DEAD = "Node5Fifo", "Node5Timer", "Node5Tx", "Node5Dead"
FIFO_GROUP = "GID_NODE5_FIFO"
MAX_ATTEMPTS = 3  # --retry-max-times 2, + 1
FAST_CHECKS = ("--transaction-timeout-ms", "1000", "--transaction-check-interval-ms", "300")


class Env(producer5.Env):
    def __init__(self, e: producer5.Env, metrics_port: int) -> None:
        super().__init__(e.root, e.node, e.broker, e.grpc_port)
        self.metrics_port = metrics_port

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("node5")
    topics = (TOPIC, SIMPLE, PUSH, FIFO, TIMER, TX, DEAD)
    flags = ("--fifo-group", FIFO_GROUP, "--retry-max-times", str(MAX_ATTEMPTS - 1), *FAST_CHECKS)
    with producer5.grpc_env(root, *flags, topics=topics, metrics=True) as e:
        yield Env(e, e.broker.metrics_port)


def node_js(env: Env, *args: str, stdin: Any = None, timeout: float = 120) -> list[dict[str, Any]]:
    """``grpc_client.js`` with ``args``; its JSON lines."""
    r = subprocess.run(
        ["node", str(JS_DIR / "grpc_client.js"), *args],
        cwd=JS_DIR, env={"PATH": os.environ.get("PATH", ""), "HOME": str(env.root)},
        input=None if stdin is None else json.dumps(stdin), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:] + env.broker.log_tail()
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def b64(body: bytes) -> str:
    return base64.b64encode(body).decode()


def test_node5_producer_bodies_keys_tag_and_properties_read_back_over_remoting(env: Env) -> None:
    four_mib = large_body(4 * 1024 * 1024)
    assert len(four_mib) <= MAX_BODY
    spec = [
        {"body_b64": b64(bytes(range(256))), "tag": "TagA", "keys": ["k1", "k2"],
         "props": {"p1": "v1", "unicode": "h\u00e9llo \u4e16\u754c"}},
        {"body_b64": b64(four_mib), "tag": "Big", "keys": ["big"]},
        {"body_b64": b64(b"\x00")},
        {"body_b64": b64(large_body(MAX_BODY + 1))},  # over the limit the server announced
    ]  # fmt: skip
    started = time.time()
    results = node_js(env, "produce", env.endpoint, TOPIC, stdin=spec)
    assert len(results) == len(spec), results
    assert "exceeds" in results[3].get("error", {}).get("message", ""), results[3]
    sent = results[:3]
    assert all("message_id" in r for r in sent), sent
    ids = [r["message_id"] for r in sent]
    bodies = [base64.b64decode(item["body_b64"]) for item in spec[:3]]
    stored = read_back(env, spec[:3], ids, bodies, started)
    assert [stored[r["message_id"]].queue_offset for r in sent] == [r["offset"] for r in sent]


def clients(env: Env) -> dict[tuple[str, str, str], float]:
    """``metaledger_broker_clients`` of a scrape: (protocol, language, version) -> count."""
    url = f"http://127.0.0.1:{env.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("metaledger_broker_clients{"):
            labels, _, value = line.rpartition(" ")
            pairs = (part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(","))
            f = {k: v.strip('"') for k, v in pairs}
            out[(f["protocol"], f["language"], f["version"])] = float(value)
    return out


def test_metrics_count_clients_by_protocol_language_and_version(env: Env) -> None:
    node = ("grpc", "node_js", "1.0.8")
    go = ("remoting", "go", "v5_0_0")
    holder = subprocess.Popen(
        ["node", str(JS_DIR / "grpc_client.js"), "hold", env.endpoint, TOPIC],
        cwd=JS_DIR, env={"PATH": os.environ.get("PATH", ""), "HOME": str(env.root)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert "ready" in json.loads(holder.stdout.readline()), env.broker.log_tail()

        async def remoting() -> None:
            c = await RemotingConnection.connect("127.0.0.1", env.broker.port)
            try:
                request = RemotingCommand.request(
                    RequestCode.GET_ALL_TOPIC_CONFIG, language="GO", version=413
                )
                assert (await c.call(request, timeout_s=10)).code == 0
                seen = clients(env)
                assert seen.get(node) == 1 and seen.get(go) == 1, seen
            finally:
                await c.close()

        asyncio.run(remoting())
        wait_for("the closed connection forgotten", lambda: go not in clients(env))
        assert clients(env).get(node) == 1
        holder.stdin.close()  # the client shuts down: NotifyClientTermination
        assert "closed" in json.loads(holder.stdout.readline())
        wait_for("the terminated client forgotten", lambda: node not in clients(env))
    finally:
        holder.kill()
        holder.wait(10)


def consumer_spec() -> list[dict[str, Any]]:
    return [
        {"body_b64": b64(bytes(range(256))), "tag": "TagA", "keys": ["all256"],
         "props": {"p1": "v1", "unicode": "h\u00e9llo"}},
        {"body_b64": b64(large_body(4 * 1024 * 1024 - 1024)), "tag": "Big", "keys": ["big"]},
        {"body_b64": b64(b"again"), "keys": ["later", "fail"]},
        {"body_b64": b64(b"\x00"), "keys": ["zero"]},
    ]  # fmt: skip


def check_delivered(spec: list[dict[str, Any]], sent: list[dict[str, Any]], got: Any) -> None:
    """Every sent message arrived once per attempt with its body, tag, keys and properties."""
    by_id = {s["message_id"]: item for s, item in zip(sent, spec, strict=True)}
    assert {d["message_id"] for d in got} == set(by_id)
    for d in got:
        item = by_id[d["message_id"]]
        body = base64.b64decode(item["body_b64"])
        assert (d["len"], d["sha256"]) == (len(body), hashlib.sha256(body).hexdigest()), d
        assert not d["corrupted"] and d["tag"] == item.get("tag", "")
        assert sorted(d["keys"]) == sorted(item["keys"]) and d["props"] == item.get("props", {})


def test_node5_simple_consumer_receives_acks_and_changes_invisible_duration(env: Env) -> None:
    spec = consumer_spec()
    sent = node_js(env, "produce", env.endpoint, SIMPLE, stdin=spec)
    assert all("message_id" in r for r in sent), sent
    got = node_js(env, "simple", env.endpoint, "GID_NODE5_SIMPLE", SIMPLE, "4", "60000")
    assert got[-1] == {"idle": True}, got  # acked messages never come back
    deliveries = got[:-1]
    check_delivered(spec, sent, deliveries)
    later = [d for d in deliveries if "later" in d["keys"]]
    assert [(d["attempt"], d["action"]) for d in later] == [(1, "later"), (2, "ack")], later
    others = [d for d in deliveries if "later" not in d["keys"]]
    assert sorted(d["attempt"] for d in others) == [1, 1, 1] and len(others) == 3


def test_node5_push_consumer_consumes_and_a_failure_comes_back(env: Env) -> None:
    spec = consumer_spec()
    sent = node_js(env, "produce", env.endpoint, PUSH, stdin=spec)
    assert all("message_id" in r for r in sent), sent
    got = node_js(env, "push", env.endpoint, "GID_NODE5_PUSH", PUSH, "4", "90000")
    check_delivered(spec, sent, got)
    failing = [d for d in got if "fail" in d["keys"]]
    assert [(d["attempt"], d["result"]) for d in failing][:2] == [(1, "FAILURE"), (2, "SUCCESS")]
    ok = {d["message_id"] for d in got if d["result"] == "SUCCESS"}
    assert ok == {s["message_id"] for s in sent}


def test_node5_an_empty_body_is_refused_by_the_broker(env: Env) -> None:
    """The client sends an empty body as it is; the broker answers MESSAGE_BODY_EMPTY."""
    (result,) = node_js(env, "produce", env.endpoint, TOPIC, stdin=[{"body_b64": ""}])
    error = result.get("error", {})
    assert error.get("code") == v2.MESSAGE_BODY_EMPTY, result
    assert "messages[0].body: empty" in error.get("message", ""), result


def test_node5_fifo_producer_and_push_consumer_keep_each_message_group_in_order(env: Env) -> None:
    """One message group, one queue; a FIFO group's PushConsumer consumes each group in order.
    The client has no retry policy for the customized backoff the broker announces (as
    RocketMQ's proxy does for a group's default retry policy; its PushSubscriptionSettings
    skips CUSTOMIZED_BACKOFF): a FIFO failure is at its max attempts (1) at once, so the client
    forwards g1-2 to ``%DLQ%<group>`` and g1 goes on with g1-3."""
    spec = [
        {"body_b64": b64(f"{g}-{n}".encode()), "group": g,
         "keys": [f"{g}-{n}", *(["fail"] if (g, n) == ("g1", 2) else [])]}
        for n in range(5) for g in ("g0", "g1", "g2")
    ]  # fmt: skip
    sent = node_js(env, "produce", env.endpoint, FIFO, stdin=spec)
    assert all("message_id" in r for r in sent), sent
    stored = asyncio.run(_pull_all(env.broker.port, FIFO))
    queues: dict[str, set[int]] = {}
    for m in stored:
        queues.setdefault(m.properties["__SHARDINGKEY"], set()).add(m.queue_id)
    assert set(queues) == {"g0", "g1", "g2"} and all(len(q) == 1 for q in queues.values())
    got = node_js(env, "push", env.endpoint, FIFO_GROUP, FIFO, str(len(spec) - 1), "90000")
    check_delivered(spec, sent, got)
    for g in ("g0", "g1", "g2"):
        seen = [(d["keys"][-1] if d["keys"][0] == "fail" else d["keys"][0], d["result"], d["attempt"])
                for d in got if d["group"] == g]  # fmt: skip
        expect = [(f"{g}-{n}", "SUCCESS", 1) for n in range(5)]
        if g == "g1":
            expect[2] = ("g1-2", "FAILURE", 1)
        assert seen == expect, (g, seen)
    failed = next(
        s["message_id"] for s, item in zip(sent, spec, strict=True) if "fail" in item["keys"]
    )

    def in_dlq() -> bool:
        dead = asyncio.run(_pull_all(env.broker.port, f"%DLQ%{FIFO_GROUP}"))
        return [(m.body, m.properties.get("DLQ_ORIGIN_MESSAGE_ID")) for m in dead] == [
            (b"g1-2", failed)
        ]

    wait_for("g1-2 in the DLQ", in_dlq, timeout=30, every=0.5)


def test_node5_a_timer_message_is_not_received_before_its_time(env: Env) -> None:
    at = int(time.time() * 1000) + 4000
    spec = [{"body_b64": b64(b"timed"), "tag": "TagT", "keys": ["tk"], "at_ms": at}]
    sent = node_js(env, "produce", env.endpoint, TIMER, stdin=spec)
    assert "message_id" in sent[0], sent
    assert time.time() * 1000 < at, "the send took too long to see the wait"
    assert asyncio.run(_pull_all(env.broker.port, TIMER)) == []
    got = node_js(env, "simple", env.endpoint, "GID_NODE5_TIMER", TIMER, "1", "60000")
    assert got[-1] == {"idle": True}, got
    (d,) = got[:-1]
    check_delivered(spec, sent, [d])
    assert d["now_ms"] >= at - 5 and d["delivery_ms"] == at, (d, at)
    (m,) = asyncio.run(_pull_all(env.broker.port, TIMER))
    assert m.properties["TIMER_DELIVER_MS"] == str(at)


def test_node5_transactional_producer_commits_rolls_back_and_answers_checks(env: Env) -> None:
    """Commit and rollback from the Transaction; two left open are checked back and the
    TransactionChecker answers COMMIT for one, ROLLBACK for the other: exactly the two
    committed are read back over remoting, once each."""
    spec = [
        {"body_b64": b64(b"committed"), "keys": ["c"], "action": "commit"},
        {"body_b64": b64(b"rolled back"), "action": "rollback"},
        {"body_b64": b64(b"checked"), "action": "check", "props": {"answer": "COMMIT"}},
        {"body_b64": b64(b"checked away"), "action": "check", "props": {"answer": "ROLLBACK"}},
    ]
    *sent, checked = node_js(env, "transact", env.endpoint, TX, "30000", stdin=spec)
    assert all(s.get("transaction_id") for s in sent), sent
    ids = [s["message_id"] for s in sent]
    assert sorted(checked["checked"]) == sorted(ids[2:]), (checked, env.broker.log_tail())
    found: list[Any] = []

    def both() -> bool:
        found[:] = asyncio.run(_pull_all(env.broker.port, TX))
        return len(found) >= 2

    wait_for("the committed messages", both, timeout=30, every=0.2)
    time.sleep(1.5)  # and nothing more, nothing twice
    found[:] = asyncio.run(_pull_all(env.broker.port, TX))
    assert sorted(m.body for m in found) == [b"checked", b"committed"]
    assert sorted(m.properties["UNIQ_KEY"] for m in found) == sorted([ids[0], ids[2]])


def test_node5_simple_consumer_redelivery_after_the_invisible_time_then_the_dlq(env: Env) -> None:
    """Never acked: back after the receive's 10 s invisible time, then after 1 s each; after
    the group's max attempts it is in ``%DLQ%<group>`` and not received again."""
    group = "GID_NODE5_DEAD"
    sent = node_js(env, "produce", env.endpoint, DEAD, stdin=[{"body_b64": b64(b"dead")}])
    assert "message_id" in sent[0], sent
    got = node_js(env, "neglect", env.endpoint, group, DEAD, str(MAX_ATTEMPTS), "90000")
    assert got[-1] == {"idle": True}, got
    deliveries = got[:-1]
    assert {d["message_id"] for d in deliveries} == {sent[0]["message_id"]}
    assert [(d["attempt"], d["action"]) for d in deliveries] == [
        (1, "expire"),
        *((n, "later") for n in range(2, MAX_ATTEMPTS + 1)),
    ]
    assert deliveries[1]["now_ms"] - deliveries[0]["now_ms"] >= 10_000 - 500, deliveries

    def in_dlq() -> bool:
        dead = asyncio.run(_pull_all(env.broker.port, f"%DLQ%{group}"))
        return [(m.body, m.properties.get("DLQ_ORIGIN_MESSAGE_ID")) for m in dead] == [
            (b"dead", sent[0]["message_id"])
        ]

    wait_for("the message in the DLQ", in_dlq, timeout=30, every=0.5)
