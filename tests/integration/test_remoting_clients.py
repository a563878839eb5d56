"""Real RocketMQ clients fetch routes from the remoting server scaffold (issue 5's
feasibility check, research note §4 (a)).

Two independent clients: ``ali-ons`` 3.12.0 (pure JS, npm, run as a node subprocess) and
the ``rocketmq`` 0.4.4 wheel (ctypes over a bundled C++ core, called from pytest). The
nameserver side is our codec and server with a test handler for GET_ROUTEINFO_BY_TOPIC
(105); a second server on another port plays the broker named in the route and records
what arrives, which is how a client that has no route-only API (the C++ one) shows that it
read the route: its SEND_MESSAGE lands on the address the route gave.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rmq.codec import RemotingCommand, dumps_fastjson, wants_standard_json
from rmq.codes import RequestCode, ResponseCode
from rmq.server import HandlerTable, Peer, RemotingServer

JS_DIR = Path(__file__).resolve().parents[1] / "js"

pytestmark = [pytest.mark.integration]

TOPIC = "MetaTopic"
"""Answered in the dialect the client's version asks for (fastjson for these old clients)."""
TOPIC_STD = "MetaTopicStd"
"""Always answered in standard JSON (quoted integer keys): clients must read both."""
MISSING = "NoSuchTopic"


@dataclass
class Servers:
    nameserver: tuple[str, int]
    broker: tuple[str, int]
    ns_requests: list[RemotingCommand] = field(default_factory=list)
    broker_requests: list[RemotingCommand] = field(default_factory=list)

    @property
    def namesrv_addr(self) -> str:
        return f"{self.nameserver[0]}:{self.nameserver[1]}"

    @property
    def broker_addr(self) -> str:
        return f"{self.broker[0]}:{self.broker[1]}"

    def route(self) -> dict[str, Any]:
        return {
            "brokerDatas": [
                {
                    "brokerAddrs": {0: self.broker_addr},
                    "brokerName": "broker-a",
                    "cluster": "DefaultCluster",
                    "enableActingMaster": False,
                }
            ],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": "broker-a",
                    "perm": 6,
                    "readQueueNums": 4,
                    "topicSysFlag": 0,
                    "writeQueueNums": 4,
                }
            ],
        }


class LoopThread:
    """An asyncio loop on its own thread, so blocking clients can run in the test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Any, timeout: float = 10) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def servers() -> Iterator[Servers]:
    loop = LoopThread()
    state: dict[str, Servers] = {}
    ns_table = HandlerTable()
    broker_table = HandlerTable()

    @ns_table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    async def route(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        s = state["servers"]
        s.ns_requests.append(request)
        topic = request.ext_str("topic")
        if topic not in (TOPIC, TOPIC_STD):
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        standard = topic == TOPIC_STD or wants_standard_json(request)
        return request.response(
            ResponseCode.SUCCESS, body=dumps_fastjson(s.route(), standard=standard)
        )

    async def record(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        state["servers"].broker_requests.append(request)
        if request.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return request.response(ResponseCode.SUCCESS)
        # No store behind this broker: a send is refused, which the clients report.
        return request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
        )

    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, 34, 35):
        broker_table.register(code)(record)

    ns_server, broker_server = RemotingServer(ns_table), RemotingServer(broker_table)
    try:
        ns_addr = loop.call(ns_server.start("127.0.0.1", 0))
        broker_addr = loop.call(broker_server.start("127.0.0.1", 0))
        state["servers"] = Servers(ns_addr, broker_addr)
        yield state["servers"]
    finally:
        loop.call(ns_server.close())
        loop.call(broker_server.close())
        loop.stop()


def run_ali_ons(servers: Servers, *ops: str, home: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        ["node", str(JS_DIR / "ons_client.js"), servers.namesrv_addr, *ops],
        cwd=JS_DIR,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    results: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


#: Outside CI a checkout without ``npm ci --prefix tests/js`` skips these; under CI (the
#: ``CI`` variable set, as ``.ci/run`` runs) a missing client is a failure, never a skip.
needs_ali_ons = pytest.mark.skipif(
    not os.environ.get("CI")
    and (shutil.which("node") is None or not (JS_DIR / "node_modules" / "ali-ons").is_dir()),
    reason="ali-ons is not installed (scripts/test.sh runs npm ci --prefix tests/js)",
)


def rocketmq_client() -> Any:
    """The ``rocketmq`` 0.4.4 wheel's client module (a skip outside CI when it is missing,
    a failure under CI)."""
    if os.environ.get("CI"):
        import rocketmq.client

        return rocketmq.client
    return pytest.importorskip("rocketmq.client", reason="pip install rocketmq==0.4.4")


@needs_ali_ons
def test_ali_ons_fetches_routes_and_gets_topic_not_exist(servers: Servers, tmp_path: Path) -> None:
    results = run_ali_ons(
        servers, f"route:{TOPIC}", f"route:{TOPIC_STD}", f"route:{MISSING}", home=tmp_path
    )
    expected = json.loads(json.dumps(servers.route()))  # integer keys as the client sees them
    for r in results[:2]:
        assert r["ok"], r
        assert r["route"] == expected
        assert r["route"]["brokerDatas"][0]["brokerAddrs"] == {"0": servers.broker_addr}
    missing = results[2]
    assert not missing["ok"]
    assert missing["error"] == {
        "name": "MQClientException",
        "code": ResponseCode.TOPIC_NOT_EXIST,
        "message": f"No topic route info in name server for the topic: {MISSING}",
    }
    # What ali-ons sends (research note §4): language JAVA, version 121, only `topic`.
    assert [(r.code, r.language, r.version, r.ext_fields) for r in servers.ns_requests] == [
        (105, "JAVA", 121, {"topic": t}) for t in (TOPIC, TOPIC_STD, MISSING)
    ]
    assert len({r.opaque for r in servers.ns_requests}) == 3


@needs_ali_ons
def test_ali_ons_producer_sends_to_the_broker_the_route_names(
    servers: Servers, tmp_path: Path
) -> None:
    missing, existing = run_ali_ons(servers, f"send:{MISSING}", f"send:{TOPIC}", home=tmp_path)
    assert not missing["ok"] and missing["error"]["code"] == ResponseCode.TOPIC_NOT_EXIST
    # The route was used: the send reached our stand-in broker, which refuses it.
    assert not existing["ok"]
    assert existing["error"]["code"] == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    sends = [r for r in servers.broker_requests if r.code == RequestCode.SEND_MESSAGE_V2]
    assert sends, servers.broker_requests
    for send in sends:
        # SEND_MESSAGE_V2 names fields a..n; b = topic, e = queueId, within the route's 4 queues.
        assert send.ext_fields["b"] == TOPIC and send.ext_fields["a"] == "PID_METALEDGER_TEST"
        assert 0 <= send.ext_int("e") < 4 and send.ext_bool("k") is False
        assert send.body == b"hello"
    assert not [r for r in servers.broker_requests if r.ext_fields.get("b") == MISSING]
    # close() unregisters the producer from the broker it used.
    assert RequestCode.UNREGISTER_CLIENT in [r.code for r in servers.broker_requests]


def test_rocketmq_cpp_producer_fetches_routes(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = rocketmq_client()
    from rocketmq.exceptions import ProducerSendSyncFailed

    monkeypatch.setenv("HOME", str(tmp_path))  # the C++ core logs to $HOME/logs/rocketmq-cpp
    producer = client.Producer("PID_METALEDGER_CPP", timeout=3000)
    producer.set_namesrv_addr(servers.namesrv_addr)
    producer.start()
    try:
        errors = {}
        for topic in (MISSING, TOPIC, TOPIC_STD):
            message = client.Message(topic)
            message.set_tags("tagA")
            message.set_keys("k1")
            message.set_body("hello")
            with pytest.raises(ProducerSendSyncFailed) as err:
                producer.send_sync(message)
            errors[topic] = str(err.value)
    finally:
        producer.shutdown()

    # The C++ core reports every failed send as "No route info"; what tells the cases apart
    # is where its requests went.
    assert errors[MISSING].startswith(f"No route info of this topic: {MISSING}")
    route_requests = [r for r in servers.ns_requests if r.code == 105]
    assert {(r.language, r.version) for r in route_requests} == {("CPP", 63)}
    asked = [r.ext_fields["topic"] for r in route_requests]
    # On TOPIC_NOT_EXIST it also asks for the auto-create default topic TBW102 (not found
    # here either), retrying the pair; it signs every request, even without credentials.
    assert set(asked) == {MISSING, "TBW102", TOPIC, TOPIC_STD}
    assert all(
        {"AccessKey", "OnsChannel", "Signature", "topic"} <= set(r.ext_fields)
        for r in route_requests
    )
    sends = [r for r in servers.broker_requests if r.code == RequestCode.SEND_MESSAGE]
    assert {s.ext_fields["topic"] for s in sends} == {TOPIC, TOPIC_STD}
    for send in sends:
        assert 0 <= send.ext_int("queueId") < 4
        assert send.ext_fields["defaultTopic"] == "TBW102" and send.body == b"hello"
        assert "UNIQ_KEY\x01" in send.ext_fields["properties"]
