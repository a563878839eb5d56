"""The gRPC Routing service builds its answers from the same domain values the remoting
front renders as RocketMQ JSON (``pick_route`` returns a Route, not JSON)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import pytest

from nameserver.routing.service import RoutingService
from protos import records_pb2
from protos.metaledger.v1 import routing_pb2
from rmq.headers import GetRouteInfoHeader
from tests.unit.nameserver.routing.test_remoting import A, Front


class _Aborted(Exception):
    pass


class _Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise _Aborted(code, message)


def get_route(front: Front, topic: str) -> Any:
    service = RoutingService(front.routes)
    request = routing_pb2.GetRouteRequest(topic=topic)
    return asyncio.run(service.GetRoute(request, _Context()))


def test_get_route_answers_the_route_the_remoting_front_renders() -> None:
    front = Front()
    assert front.register("broker-a", A, ["T1", "T2"]).code == 0
    assert front.register("broker-a", "127.0.0.2:10911", ["T1", "T2"], broker_id=1).code == 0
    kv = records_pb2.KvConfigRecord(namespace="ORDER_TOPIC_CONFIG", key="T1", value="broker-a:4")
    asyncio.run(front.routes.propose(records_pb2.RoutingOperation(put_kv_config=kv)))
    resp = get_route(front, "T1")
    body = json.loads(front(GetRouteInfoHeader(topic="T1").request().replace(version=401)).body)
    assert [(q.broker_name, q.perm, q.read_queue_nums) for q in resp.queues] == [
        (q["brokerName"], q["perm"], q["readQueueNums"]) for q in body["queueDatas"]
    ]
    (group,) = resp.brokers
    (data,) = body["brokerDatas"]
    assert (group.cluster, group.broker_name, group.enable_acting_master) == (
        data["cluster"],
        data["brokerName"],
        data["enableActingMaster"],
    )
    assert {str(k): v for k, v in group.addrs.items()} == data["brokerAddrs"]
    assert dict(group.addrs) == {0: A, 1: "127.0.0.2:10911"}
    assert resp.order_topic_conf == body["orderTopicConf"] == "broker-a:4"


def test_get_route_of_a_missing_topic_is_not_found_without_the_faq() -> None:
    with pytest.raises(_Aborted) as info:
        get_route(Front(), "Nope")
    code, message = info.value.args
    assert code == grpc.StatusCode.NOT_FOUND
    assert message == "No topic route info in name server for the topic: Nope"
