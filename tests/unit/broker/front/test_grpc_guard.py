"""Undecodable requests on the broker's gRPC port (broker/grpc/guard.py): the method's answer
with BAD_REQUEST naming the message, on unary, server-streaming and Telemetry calls; a
request that decodes is served as before."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from broker.grpc.front import grpc_front
from broker.grpc.service import MessagingService
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from tests.unit.broker.front.test_grpc_service import FakeBackend

SERVICE = "/apache.rocketmq.v2.MessagingService/"
GARBAGE = b"\xff\xff\xff\xff"


async def _calls() -> None:
    backend = FakeBackend()
    server, port = await grpc_front(MessagingService(backend), "127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            for method, response in (("SendMessage", svc.SendMessageResponse),
                                     ("AckMessage", svc.AckMessageResponse),
                                     ("QueryRoute", svc.QueryRouteResponse)):  # fmt: skip
                call = ch.unary_unary(SERVICE + method, response_deserializer=response.FromString)
                out = await call(GARBAGE, timeout=10)
                assert out.status.code == v2.BAD_REQUEST, out
                assert f"cannot decode apache.rocketmq.v2.{method}Request" in out.status.message
            assert backend.sent == []

            stream = ch.unary_stream(
                SERVICE + "ReceiveMessage",
                response_deserializer=svc.ReceiveMessageResponse.FromString,
            )
            got = [r async for r in stream(b"\x0a\xff", timeout=10)]
            assert len(got) == 1 and got[0].status.code == v2.BAD_REQUEST, got
            assert "ReceiveMessageRequest" in got[0].status.message

            telemetry = ch.stream_stream(
                SERVICE + "Telemetry",
                request_serializer=lambda b: b,
                response_deserializer=svc.TelemetryCommand.FromString,
            )

            async def commands() -> Any:
                yield GARBAGE

            md = (("x-mq-client-id", "guard-test"),)
            got = [r async for r in telemetry(commands(), metadata=md, timeout=10)]
            assert [r.status.code for r in got] == [v2.BAD_REQUEST], got
            assert "TelemetryCommand" in got[-1].status.message

            # a request that decodes is served
            route = svc.QueryRouteRequest()
            route.topic.name = "T"
            call = ch.unary_unary(
                SERVICE + "QueryRoute",
                request_serializer=svc.QueryRouteRequest.SerializeToString,
                response_deserializer=svc.QueryRouteResponse.FromString,
            )
            out = await call(route, timeout=10)
            assert out.status.code == v2.OK and len(out.message_queues) == 2
    finally:
        await server.stop(0)


def test_undecodable_requests_get_bad_request_naming_the_message() -> None:
    asyncio.run(_calls())
