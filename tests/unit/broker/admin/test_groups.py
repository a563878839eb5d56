"""GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): every group the broker holds anything of, a pull
group's committed offsets, a POP book, a remoting consumer's heartbeat, a gRPC consumer's
(broker/admin/groups.py); and GET_CONSUMER_CONNECTION_LIST's protocols."""

from __future__ import annotations

import json
from pathlib import Path

from broker.grpc.service import MessagingService
from rmq.codes import RequestCode
from rmq.headers import GetConsumerConnectionListHeader
from tests.unit.broker.admin.test_connections import _grpc_consumer
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker
from tests.unit.broker.front.test_grpc_service import FakeBackend


async def _groups(ctx: Ctx) -> dict[str, object]:
    r = await ctx.client.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
    assert r.code == 0, r.remark
    doc = json.loads(r.body)
    assert set(doc) == {"dataVersion", "forbiddenTable", "subscriptionGroupTable"}
    assert doc["dataVersion"]["counter"] == len(doc["subscriptionGroupTable"])
    table: dict[str, object] = doc["subscriptionGroupTable"]
    return table


def test_every_group_with_offsets_a_pop_book_or_a_live_consumer(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        assert await _groups(ctx) == {}
        for i in range(3):
            assert (await ctx.send(f"m{i}".encode())).code == 0
        ext = {"consumerGroup": "PULL", "topic": TOPIC, "queueId": 0, "commitOffset": 1}
        assert (await ctx.client.request(15, ext)).code == 0
        assert len(await ctx.replica.pop.pop("POP", TOPIC, 0, 1, 60_000, init_mode=0)) == 1
        heartbeat = {"clientID": "java-1", "consumerDataSet": [{
            "groupName": "REMOTING", "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}  # fmt: skip
        r = await ctx.client.request(34, {"version": 401}, json.dumps(heartbeat).encode())
        assert r.code == 0
        service = MessagingService(FakeBackend(), agents=ctx.replica.clients.grpc)
        await _grpc_consumer(service, "GRPC")
        table = await _groups(ctx)
        assert sorted(table) == ["GRPC", "POP", "PULL", "REMOTING"]
        pull = table["PULL"]
        assert isinstance(pull, dict)
        assert (pull["groupName"], pull["consumeEnable"], pull["retryMaxTimes"]) == (
            "PULL",
            True,
            16,
        )
        # the connections name each client's protocol and version
        r = await ctx.client.call(GetConsumerConnectionListHeader("GRPC").request())
        assert json.loads(r.body)["clientProtocols"] == {
            "py-1": {"protocol": "grpc", "version": "5.1.2"}
        }
        r = await ctx.client.call(GetConsumerConnectionListHeader("REMOTING").request())
        protocols = json.loads(r.body)["clientProtocols"]
        assert protocols["java-1"]["protocol"] == "remoting"
        assert protocols["java-1"]["version"].startswith("V")

    run_broker(tmp_path, scenario)
