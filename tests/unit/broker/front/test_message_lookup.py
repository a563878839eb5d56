"""QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33) and the gRPC Admin QueryMessage on an
in-process replica: by key, by UNIQ_KEY, by offset message id, and bad input."""

from __future__ import annotations

from pathlib import Path

import grpc

from protos.apache.rocketmq.v2 import admin_pb2 as adm
from protos.apache.rocketmq.v2 import admin_pb2_grpc as adm_grpc
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.codes import ResponseCode
from rmq.headers import QueryMessageHeader, ViewMessageHeader
from rmq.message import decode, decode_records
from rmq.msgid import offset_msg_id, parse_offset_msg_id
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker

FOREVER = 2**62


def _query(key: str, topic: str = TOPIC, max_num: int = 32) -> QueryMessageHeader:
    return QueryMessageHeader(topic, key, max_num, 0, FOREVER)


def test_query_by_key_and_unique_key_and_view_by_offset_id(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        ids = []
        for i in range(4):
            r = await ctx.send(
                f"m{i}".encode(),
                queue_id=i % 2,
                properties=props(KEYS=f"order{i % 2} all", UNIQ_KEY=f"UQ{i}"),
            )
            assert r.code == ResponseCode.SUCCESS
            ids.append(r.ext_fields["msgId"])
        r = await ctx.client.call(_query("order1").request())
        assert r.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(r.body)] == [b"m1", b"m3"]
        assert int(r.ext_fields["indexLastUpdatePhyoffset"]) > 0
        assert int(r.ext_fields["indexLastUpdateTimestamp"]) > 0
        r = await ctx.client.call(_query("all", max_num=2).request())
        assert [m.body for m in decode_records(r.body)] == [b"m2", b"m3"]  # the newest two
        unique = _query("UQ2").request()
        unique.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
        r = await ctx.client.call(unique)
        assert [m.body for m in decode_records(r.body)] == [b"m2"]
        r = await ctx.client.call(_query("order1", topic="Other").request())
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        assert r.remark == "can not find message, maybe time range not correct"
        # an offset message id: the record at its commit-log offset
        where = parse_offset_msg_id(ids[3])
        assert (where.ip, where.port) == ("127.0.0.1", ctx.port)
        r = await ctx.client.call(ViewMessageHeader(where.offset).request())
        assert r.code == ResponseCode.SUCCESS
        m = decode(r.body)
        assert (
            m.body == b"m3"
            and offset_msg_id(m.store_host.ip, m.store_host.port, m.physical_offset) == ids[3]
        )
        r = await ctx.client.call(ViewMessageHeader(where.offset + 1).request())
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert r.remark == f"can not find message by the offset, {where.offset + 1}"

    run_broker(tmp_path, scenario)


def test_bad_requests_name_the_field(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await ctx.client.request(
            12, {"key": "k", "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 1}
        )
        assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in (r.remark or "")
        r = await ctx.client.request(33, {"topic": TOPIC})
        assert r.code == ResponseCode.SYSTEM_ERROR and "offset" in (r.remark or "")
        r = await ctx.client.request(33, {"offset": "x"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "offset" in (r.remark or "")

    run_broker(tmp_path, scenario)


def test_grpc_admin_query_message(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        sent = await ctx.send(
            b"hello", properties=props(KEYS="k1 k2", UNIQ_KEY="UQ-A", TAGS="t", color="red")
        )
        offset_id = sent.ext_fields["msgId"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ctx.replica.grpc_port}") as channel:
            stub = adm_grpc.AdminStub(channel)

            async def ask(**kw: object) -> adm.ListMessageResponse:
                req = adm.ListMessageRequest(**kw)  # type: ignore[arg-type]
                return await stub.QueryMessage(req)

            topic = v2.Resource(name=TOPIC)
            r = await ask(topic=topic, message_key="k2")
            assert r.status.code == v2.OK, r.status.message
            (m,) = r.messages
            assert m.body == b"hello" and m.topic.name == TOPIC
            assert m.system_properties.message_id == "UQ-A"
            assert list(m.system_properties.keys) == ["k1", "k2"]
            assert m.system_properties.tag == "t"
            assert dict(m.user_properties) == {"color": "red"}
            assert m.system_properties.store_host == f"127.0.0.1:{ctx.port}"
            r = await ask(topic=topic, message_id="UQ-A")
            assert [x.body for x in r.messages] == [b"hello"]
            r = await ask(topic=topic, message_id=offset_id)
            assert [x.body for x in r.messages] == [b"hello"]
            r = await ask(topic=v2.Resource(name="Other"), message_id=offset_id)
            assert r.status.code == v2.MESSAGE_NOT_FOUND and not r.messages
            r = await ask(topic=topic, message_key="none")
            assert r.status.code == v2.MESSAGE_NOT_FOUND
            r = await ask(message_key="k1")
            assert r.status.code == v2.ILLEGAL_TOPIC and "topic" in r.status.message
            r = await ask(topic=topic)
            assert r.status.code == v2.BAD_REQUEST and "search_key" in r.status.message
            r = await ask(topic=topic, subscription="*")
            assert r.status.code == v2.UNSUPPORTED and "subscription" in r.status.message
            other = await stub.ListSubscription(adm.ListSubscriptionRequest())
            assert other.status.code == v2.NOT_IMPLEMENTED

    run_broker(tmp_path, scenario, grpc_listen="127.0.0.1:0")
