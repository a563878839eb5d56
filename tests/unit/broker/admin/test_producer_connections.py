"""GET_PRODUCER_CONNECTION_LIST (204): a producer group's remoting producers (their
heartbeats' producerDataSet) and 5.x gRPC producers (their Telemetry settings: the group of a
gRPC producer is the topic it publishes to) side by side; SYSTEM_ERROR for a group nobody is
in (broker/admin/connections.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from rmq.codes import version_name
from rmq.headers import GetProducerConnectionListHeader
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker
from tests.unit.broker.front.test_grpc_service import Context
from tests.unit.broker.front.test_grpc_transactions import service_of


def test_remoting_and_grpc_producers_of_a_group(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        ask = GetProducerConnectionListHeader("PG").request()
        r = await ctx.client.call(ask)
        assert (r.code, r.remark) == (1, "the producer group[PG] not exist")
        heartbeat = {"clientID": "java-1", "producerDataSet": [{"groupName": "PG"}],
                     "consumerDataSet": []}  # fmt: skip
        beat = await ctx.client.request(34, {}, json.dumps(heartbeat).encode())
        assert beat.code == 0
        r = await ctx.client.call(ask)
        assert r.code == 0, r.remark
        doc = json.loads(r.body)
        (java,) = doc["connectionSet"]
        assert java["clientId"] == "java-1" and java["clientAddr"].startswith("127.0.0.1:")
        assert (java["language"], java["version"]) == ("JAVA", 479)  # the test client's headers
        assert doc["clientProtocols"] == {
            "java-1": {"protocol": "remoting", "version": version_name(java["version"])}
        }
        # a gRPC producer publishing to TOPIC: in the group named TOPIC while its stream lives
        service = service_of(ctx)
        stop = asyncio.Event()

        async def commands() -> AsyncIterator[svc.TelemetryCommand]:
            settings = v2.Settings(client_type=v2.PRODUCER)
            settings.publishing.topics.add(name=TOPIC)
            settings.user_agent.language = v2.PYTHON
            settings.user_agent.version = "5.1.2"
            yield svc.TelemetryCommand(settings=settings)
            await stop.wait()

        stream = service.Telemetry(commands(), Context("py-1"))
        assert (await anext(stream)).status.code == v2.OK
        assert (
            await service.Heartbeat(svc.HeartbeatRequest(), Context("py-1"))
        ).status.code == v2.OK
        r = await ctx.client.call(GetProducerConnectionListHeader(TOPIC).request())
        assert r.code == 0, r.remark
        doc = json.loads(r.body)
        assert doc == {
            "clientProtocols": {"py-1": {"protocol": "grpc", "version": "5.1.2"}},
            "connectionSet": [
                {"clientAddr": "10.1.2.3:5555", "clientId": "py-1", "language": "PYTHON",
                 "version": 479}
            ],
        }  # fmt: skip
        # the stream's end forgets it; UNREGISTER_CLIENT forgets the remoting one
        stop.set()
        assert [c async for c in stream] == []
        r = await ctx.client.call(GetProducerConnectionListHeader(TOPIC).request())
        assert r.code == 1
        gone = await ctx.client.request(35, {"clientID": "java-1", "producerGroup": "PG"}, b"")
        assert gone.code == 0
        assert (await ctx.client.call(ask)).code == 1

    run_broker(tmp_path, scenario)
