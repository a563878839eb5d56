"""Real RocketMQ clients fetch routes from a real 3-node metaledger (issue 5).

The broker is registered through a REGISTER_BROKER frame built by our codec, sent to one
node's remoting port; its address is a stand-in broker (our remoting server recording what
arrives), so a client that has no route-only API (the C++ one) shows it read the route by
sending to that address. ``ali-ons`` 3.12.0 (pure JS) and the ``rocketmq`` 0.4.4 wheel
(C++ core) each ask a different node; a missing topic gives each its TOPIC_NOT_EXIST error.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import GetRouteInfoHeader
from rmq.server import HandlerTable, Peer, RemotingServer
from tests.harness import Cluster, wait_until
from tests.integration.test_remoting_clients import (
    JS_DIR,
    LoopThread,
    needs_ali_ons,
    rocketmq_client,
)
from tests.remoting_client import call, register_request

pytestmark = [pytest.mark.integration]

TOPIC = "RouteTopic"
MISSING = "NoSuchTopic"


class StandInBroker:
    def __init__(self) -> None:
        self.loop = LoopThread()
        self.requests: list[RemotingCommand] = []
        table = HandlerTable()

        async def record(request: RemotingCommand, peer: Peer) -> RemotingCommand:
            self.requests.append(request)
            if request.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
                return request.response(ResponseCode.SUCCESS)
            return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " not a broker")

        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, 34, 35):
            table.register(code)(record)
        self.server = RemotingServer(table)
        host, port = self.loop.call(self.server.start("127.0.0.1", 0))
        self.addr = f"{host}:{port}"

    def close(self) -> None:
        self.loop.call(self.server.close())
        self.loop.stop()


@pytest.fixture(scope="module")
def routed(module_cluster: Cluster) -> Iterator[tuple[Cluster, StandInBroker]]:
    c = module_cluster
    broker = StandInBroker()
    try:
        reply = call(remoting(c, 1), register_request("broker-a", broker.addr, [TOPIC, "Other"]))
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        wait_until(
            lambda: all(
                call(remoting(c, i), GetRouteInfoHeader(topic=TOPIC).request()).code == 0
                for i in range(3)
            ),
            10,
            "the route on every node",
        )
        yield c, broker
    finally:
        broker.close()


def remoting(c: Cluster, i: int) -> str:
    return f"127.0.0.1:{c.nodes[i].remoting_port}"


def run_ali_ons(namesrv: str, *ops: str, home: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        ["node", str(JS_DIR / "ons_client.js"), namesrv, *ops],
        cwd=JS_DIR,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    results: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


@needs_ali_ons
@pytest.mark.parametrize("node", [0, 2])
def test_ali_ons_fetches_the_route_from_metaledger(
    routed: tuple[Cluster, StandInBroker], tmp_path: Path, node: int
) -> None:
    c, broker = routed
    found, missing = run_ali_ons(
        remoting(c, node), f"route:{TOPIC}", f"route:{MISSING}", home=tmp_path
    )
    assert found["ok"], found
    assert found["route"] == {
        "brokerDatas": [
            {
                "brokerAddrs": {"0": broker.addr},
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
    assert not missing["ok"]
    assert missing["error"]["name"] == "MQClientException"
    assert missing["error"]["code"] == ResponseCode.TOPIC_NOT_EXIST
    assert missing["error"]["message"].startswith(
        f"No topic route info in name server for the topic: {MISSING}"
    )


@needs_ali_ons
def test_ali_ons_producer_sends_where_metaledger_routes(
    routed: tuple[Cluster, StandInBroker], tmp_path: Path
) -> None:
    c, broker = routed
    (sent,) = run_ali_ons(remoting(c, 1), f"send:{TOPIC}", home=tmp_path)
    # the stand-in broker refuses the send, which proves the route led there
    assert not sent["ok"] and sent["error"]["code"] == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    sends = [r for r in broker.requests if r.code == RequestCode.SEND_MESSAGE_V2]
    assert sends and all(r.ext_fields["b"] == TOPIC for r in sends)


def test_rocketmq_cpp_producer_fetches_the_route_from_metaledger(
    routed: tuple[Cluster, StandInBroker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = rocketmq_client()
    from rocketmq.exceptions import ProducerSendSyncFailed

    c, broker = routed
    monkeypatch.setenv("HOME", str(tmp_path))
    producer = client.Producer("PID_METALEDGER_ROUTES", timeout=3000)
    producer.set_namesrv_addr(remoting(c, 2))
    producer.start()
    errors = {}
    try:
        for topic in (MISSING, TOPIC):
            message = client.Message(topic)
            message.set_body("hello")
            with pytest.raises(ProducerSendSyncFailed) as err:
                producer.send_sync(message)
            errors[topic] = str(err.value)
    finally:
        producer.shutdown()
    assert errors[MISSING].startswith(f"No route info of this topic: {MISSING}")
    sends = [r for r in broker.requests if r.code == RequestCode.SEND_MESSAGE]
    assert {s.ext_fields["topic"] for s in sends} == {TOPIC}
    assert all(0 <= s.ext_int("queueId") < 4 for s in sends)
