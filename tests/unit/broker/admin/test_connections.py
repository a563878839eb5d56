"""GET_CONSUMER_CONNECTION_LIST (203): a group's remoting consumers (from their heartbeats)
and gRPC consumers (from theirs) side by side; CONSUMER_NOT_ONLINE for a group nobody is in
(broker/admin/connections.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

from broker.grpc.service import MessagingService
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from rmq.headers import GetConsumerConnectionListHeader
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker
from tests.unit.broker.front.test_grpc_service import Context, FakeBackend


async def _grpc_consumer(service: MessagingService, group: str) -> None:
    async def commands() -> AsyncIterator[svc.TelemetryCommand]:
        c = svc.TelemetryCommand()
        c.settings.client_type = v2.SIMPLE_CONSUMER
        c.settings.subscription.group.name = group
        c.settings.user_agent.language = v2.PYTHON
        c.settings.user_agent.version = "5.1.2"
        yield c

    assert [a.status.code async for a in service.Telemetry(commands(), Context("py-1"))] == [v2.OK]
    beat = svc.HeartbeatRequest(client_type=v2.SIMPLE_CONSUMER)
    beat.group.name = group
    assert (await service.Heartbeat(beat, Context("py-1"))).status.code == v2.OK


def test_remoting_and_grpc_consumers_of_a_group(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        ask = GetConsumerConnectionListHeader("CG").request()
        r = await ctx.client.call(ask)
        assert (r.code, r.remark) == (206, "the consumer group[CG] not online")
        heartbeat = {"clientID": "java-1", "consumerDataSet": [{
            "groupName": "CG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "a || b"}]}]}  # fmt: skip
        assert (await ctx.client.request(34, {}, json.dumps(heartbeat).encode())).code == 0
        service = MessagingService(FakeBackend(), agents=ctx.replica.clients.grpc)
        await _grpc_consumer(service, "CG")
        await _grpc_consumer(service, "OTHER")  # the same client id moves to another group
        r = await ctx.client.call(ask)
        assert r.code == 0, r.remark
        doc = json.loads(r.body)
        (java,) = doc["connectionSet"]
        assert java["clientId"] == "java-1" and java["clientAddr"].startswith("127.0.0.1:")
        assert (doc["consumeType"], doc["consumeFromWhere"]) == (
            "CONSUME_PASSIVELY",
            "CONSUME_FROM_FIRST_OFFSET",
        )
        sub = doc["subscriptionTable"][TOPIC]
        assert (sub["subString"], sub["tagsSet"], sub["expressionType"]) == (
            "a || b",
            ["a", "b"],
            "TAG",
        )
        r = await ctx.client.call(GetConsumerConnectionListHeader("OTHER").request())
        doc = json.loads(r.body)
        assert doc["connectionSet"] == [
            {
                "clientAddr": "10.1.2.3:5555",
                "clientId": "py-1",
                "language": "PYTHON",
                "version": 479,
            }
        ]
        assert (doc["consumeType"], doc["messageModel"], doc["subscriptionTable"]) == (
            "CONSUME_POP",
            "CLUSTERING",
            {},
        )
        # a gRPC consumer that terminates is gone from its group
        await service.NotifyClientTermination(svc.NotifyClientTerminationRequest(), Context("py-1"))
        assert (
            await ctx.client.call(GetConsumerConnectionListHeader("OTHER").request())
        ).code == 206

    run_broker(tmp_path, scenario)
