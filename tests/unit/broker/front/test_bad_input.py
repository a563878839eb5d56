"""Bad input never kills the broker: a clear response code, or that one connection closed, and
everyone else keeps being served (issue 17 "Bad input"; the server's contract in
rmq/server.py)."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.codec import RemotingCommand, encode
from rmq.codes import RequestCode
from rmq.message import decode
from tests.unit.broker.front.conftest import Ctx, run_broker

#: The codes the broker serves (the broker's own table before rmq.codes held every code).
SERVED = [
    RequestCode[name]
    for name in (
        "SEND_MESSAGE PULL_MESSAGE QUERY_CONSUMER_OFFSET UPDATE_CONSUMER_OFFSET "
        "UPDATE_AND_CREATE_TOPIC GET_ALL_TOPIC_CONFIG GET_BROKER_RUNTIME_INFO "
        "SEARCH_OFFSET_BY_TIMESTAMP GET_MAX_OFFSET GET_MIN_OFFSET HEART_BEAT UNREGISTER_CLIENT "
        "CONSUMER_SEND_MSG_BACK GET_CONSUMER_LIST_BY_GROUP LOCK_BATCH_MQ UNLOCK_BATCH_MQ "
        "DELETE_TOPIC_IN_BROKER SEND_MESSAGE_V2 SEND_BATCH_MESSAGE"
    ).split()
]


async def still_serving(ctx: Ctx) -> None:
    c = await ctx.connect()
    r = await c.request(RequestCode.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": 0})
    assert r.code == 0
    await c.close()


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1 << 16), 5) == b""


def test_unknown_codes_and_oneways(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await ctx.client.request(9999)
        assert r.code == 3 and r.remark == " request type 9999 not supported"
        r = await ctx.client.request(103)  # a nameserver code
        assert r.code == 3
        await ctx.client.oneway(9999)  # never answered: the next answer is the next request's
        r = await ctx.client.request(RequestCode.GET_MIN_OFFSET, {"topic": "TopicA", "queueId": 0})
        assert r.code == 0

    run_broker(tmp_path, scenario)


def test_broken_frames_close_only_their_connection(tmp_path: Path) -> None:
    frames = [
        struct.pack(">i", 2) + b"\x00\x00",  # length below 4
        struct.pack(">i", 1 << 30),  # oversized
        struct.pack(">ii", 8, 100) + b"abcd",  # header longer than the frame
        struct.pack(">ii", 8, 4) + b"{{{{",  # header is not JSON
        struct.pack(">ii", 8, (7 << 24) | 4) + b"{}{}",  # unknown serialize type
    ]

    async def scenario(ctx: Ctx) -> None:
        for frame in frames:
            reader, writer = await asyncio.open_connection("127.0.0.1", ctx.port)
            writer.write(frame)
            await writer.drain()
            assert await closed(reader), frame
            writer.close()
        # a truncated frame then EOF: the connection ends, nothing else
        reader, writer = await asyncio.open_connection("127.0.0.1", ctx.port)
        whole = encode(RemotingCommand.request(30, {"topic": "TopicA", "queueId": 0}, opaque=1))
        writer.write(whole[: len(whole) // 2])
        writer.write_eof()
        assert await closed(reader)
        writer.close()
        await still_serving(ctx)
        assert ctx.replica.server.protocol_errors >= len(frames)

    run_broker(tmp_path, scenario)


def test_wrong_header_types_to_every_handler(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        junk = {
            name: "not-a-number"
            for name in "topic queueId queueOffset maxMsgNums sysFlag commitOffset subVersion "
            "suspendTimeoutMillis consumerGroup producerGroup bornTimestamp flag offset group "
            "delayLevel timestamp clientID batch a b e f g h".split()
        }
        for code in SERVED:
            r = await ctx.client.request(code, junk, b"\xff\xfe")
            assert r.code in (0, 1, 17, 24), (code, r.code, r.remark)
            if r.code == 1:
                assert r.remark and "internal error" not in r.remark, (code, r.remark)
            r = await ctx.client.request(code)  # no fields at all
            assert r.code in (0, 1), (code, r.code, r.remark)
            if r.code == 1:
                assert r.remark and "internal error" not in r.remark, (code, r.remark)
        assert ctx.replica.server.handler_errors == 0
        await still_serving(ctx)

    run_broker(tmp_path, scenario)


ext_values = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "1", "-1", "true", "TopicA", "*", "", "%RETRY%CG"]),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    requests=st.lists(
        st.tuples(
            st.sampled_from(SERVED),
            st.dictionaries(
                st.sampled_from(
                    "topic queueId queueOffset maxMsgNums sysFlag commitOffset subVersion "
                    "suspendTimeoutMillis consumerGroup producerGroup bornTimestamp flag offset "
                    "group delayLevel timestamp clientID batch subscription properties "
                    "reconsumeTimes maxReconsumeTimes".split()
                ),
                ext_values,
            ),
            st.one_of(
                st.binary(max_size=64),
                st.sampled_from([b"{}", json.dumps({"clientID": "c"}).encode()]),
            ),
        ),
        min_size=1,
        max_size=6,
    ),
    garbage=st.binary(max_size=64),
)
def test_property_any_requests_and_garbage_leave_the_broker_serving(
    tmp_path: Path, requests: list[tuple[int, dict[str, str], bytes]], garbage: bytes
) -> None:
    async def scenario(ctx: Ctx) -> None:
        for code, ext, body in requests:
            ext = {**ext, "suspendTimeoutMillis": "0"}
            r = await ctx.client.request(code, ext, body)
            assert r.code in (0, 1, 13, 14, 16, 17, 19, 20, 21, 22, 24), (
                code,
                ext,
                r.code,
                r.remark,
            )
            assert "internal error" not in (r.remark or ""), (code, ext, r.remark)
        reader, writer = await asyncio.open_connection("127.0.0.1", ctx.port)
        writer.write(garbage)
        writer.write_eof()
        await asyncio.wait_for(reader.read(), 5)  # answered or closed, never hung
        writer.close()
        await still_serving(ctx)
        assert ctx.replica.server.handler_errors == 0
        await store_consistent(ctx)

    run_broker(tmp_path / "p", scenario)


async def store_consistent(ctx: Ctx) -> None:
    """Every queue's records decode (CRC checked) with dense queue offsets in log order."""
    store = ctx.replica.store
    for (topic, qid), cq in list(store._cqs.items()):
        got = await ctx.replica.core.run(store.get, topic, qid, cq.min_offset, 10_000)
        msgs = [decode(raw) for raw in got.messages]
        assert [m.queue_offset for m in msgs] == list(range(cq.min_offset, cq.max_offset))
        assert all(m.topic == topic and m.queue_id == qid for m in msgs)
        physical = [m.physical_offset for m in msgs]
        assert physical == sorted(physical)
