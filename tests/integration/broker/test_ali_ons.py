"""``ali-ons`` (pure JS, npm) producer and push consumer against a real ``metaledger broker``
(issue 17, "Real clients, end to end"): bodies byte-exact (all 256 byte values, empty, 4 MiB),
tags, keys and properties; a failed message goes back through CONSUMER_SEND_MSG_BACK with
the client's ``maxReconsumeTimes`` and lands in the DLQ after it; a timed message
(``__STARTDELIVERTIME``) waits for its time (issue 30)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, QueueData
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for
from tests.integration.broker.test_wheel import FAST_LEVELS, _dlq, retry_topic_routed

JS_DIR = Path(__file__).resolve().parents[2] / "js"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("node") is None or not (JS_DIR / "node_modules" / "ali-ons").is_dir(),
        reason="ali-ons is not installed (scripts/test.sh runs npm ci --prefix tests/js)",
    ),
]
TOPIC = "OnsTopic"


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
    root = tmp_path_factory.mktemp("ons")
    node = Cluster(root / "node", n=1)
    broker = None
    try:
        node.wait_ready(30)
        broker = BrokerProcess(
            root, node.endpoints, "broker-a", "--message-delay-level", FAST_LEVELS
        )
        with Client(node.endpoints, timeout_s=10) as client:
            wait_for("registration", lambda: client.route_cluster_info().brokers)
            client.route_topic_create(TOPIC, [QueueData("broker-a", 2, 2, 6)])
            client.route_topic_create("OnsRetried", [QueueData("broker-a", 1, 1, 6)])
            yield Env(root, node, broker, client)
    finally:
        if broker is not None:
            assert broker.stop() == 0, broker.log_tail()
        node.close()


def node_js(
    env: Env, *args: str, stdin: str | None = None, timeout: float = 120
) -> list[dict[str, Any]]:
    r = subprocess.run(
        ["node", str(JS_DIR / "ons_broker.js"), *args],
        cwd=JS_DIR, env={"PATH": os.environ.get("PATH", ""), "HOME": str(env.root)},
        input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def spec(topic: str, keys: str, body: bytes, **kw: Any) -> dict[str, Any]:
    return {"topic": topic, "keys": keys, "body_b64": base64.b64encode(body).decode()} | kw


def test_ali_ons_producer_and_consumer_bodies_byte_exact(env: Env) -> None:
    bodies = {
        "all256": bytes(range(256)) * 4,
        "empty": b"",
        "big": (bytes(range(256)) * 16384)[: 4 * 1024 * 1024],
        "props": b"with properties",
    }
    items = [
        spec(TOPIC, k, b, tags="T" + k, props={"color": "blue"} if k == "props" else {})
        for k, b in bodies.items()
    ]
    sent = node_js(env, "produce", env.namesrv, stdin=json.dumps(items))
    assert [r["ok"] for r in sent] == [True] * 4, sent
    assert all(r["status"] == "SEND_OK" for r in sent)
    got = {
        d["keys"]: d
        for d in node_js(env, "consume", env.namesrv, "GID_ONS", TOPIC, "4", "60000", "", "16")
    }
    assert set(got) == set(bodies), got.keys()
    for k, body in bodies.items():
        assert (got[k]["len"], got[k]["sha256"]) == (len(body), hashlib.sha256(body).hexdigest()), k
        assert got[k]["tags"] == "T" + k and got[k]["topic"] == TOPIC
    assert got["props"]["props"]["color"] == "blue"


def test_ali_ons_failed_message_reaches_the_dlq_after_max_reconsume(env: Env) -> None:
    sent = node_js(
        env, "produce", env.namesrv, stdin=json.dumps([spec("OnsRetried", "bad", b"fails")])
    )
    assert sent[0]["ok"], sent
    retry_topic_routed(env.client, env.broker.addr, "GID_ONS_RETRY")
    # ali-ons sends maxReconsumeTimes 2 with each send-back: tries 0, 1, 2, then the DLQ
    seen = node_js(
        env, "consume", env.namesrv, "GID_ONS_RETRY", "OnsRetried", "0", "15000", "bad", "2"
    )
    tries = sorted(d["reconsumeTimes"] for d in seen if d["keys"] == "bad")
    assert tries == [0, 1, 2], seen
    (dead,) = _dlq(env.broker.addr, "GID_ONS_RETRY")
    assert dead.body == b"fails" and dead.properties["RETRY_TOPIC"] == "OnsRetried"


def test_ali_ons_start_deliver_time_is_a_timer_message(env: Env) -> None:
    """What ali-ons' ``Message.setStartDeliverTime(ms)`` sets: ``__STARTDELIVERTIME``, epoch ms
    (Aliyun ONS's timed messages): delivered at that time, not before (issue 30)."""
    topic = "OnsTimed"
    env.client.route_topic_create(topic, [QueueData("broker-a", 1, 1, 6)])
    at = int(time.time() * 1000) + 4000
    item = spec(topic, "later", b"at its time", props={"__STARTDELIVERTIME": str(at)})
    sent = node_js(env, "produce", env.namesrv, stdin=json.dumps([item]))
    assert sent[0]["ok"] and sent[0]["status"] == "SEND_OK", sent
    assert time.time() * 1000 < at, "the send took too long to see the wait"
    got = node_js(env, "consume", env.namesrv, "GID_ONS_TIMED", topic, "1", "30000", "", "16")
    assert time.time() * 1000 >= at
    (d,) = [d for d in got if d["keys"] == "later"]
    assert d["topic"] == topic and d["props"]["__STARTDELIVERTIME"] == str(at)
    assert int(d["props"]["TIMER_DEQUEUE_MS"]) >= at
