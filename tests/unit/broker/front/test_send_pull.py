"""SEND_MESSAGE 10/310/320 and PULL_MESSAGE 11 through the front (research/broker.md §2, §3.1)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from broker.store import FlushMode
from rmq.batch import BatchItem, encode_batch
from rmq.message import decode
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker


def records(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        (total,) = struct.unpack_from(">i", body, pos)
        out.append(body[pos : pos + total])
        pos += total
    return out


@pytest.mark.parametrize("flush", [FlushMode.ASYNC_FLUSH, FlushMode.SYNC_FLUSH])
def test_send_then_pull_is_byte_exact_with_string_ext_fields(
    tmp_path: Path, flush: FlushMode
) -> None:
    payload = bytes(range(256)) * 3

    async def scenario(ctx: Ctx) -> None:
        r = await ctx.send(
            payload, properties=props(TAGS="t1", KEYS="k1", UNIQ_KEY="U1", color="red")
        )
        assert r.code == 0, r.remark
        assert r.ext_fields["queueId"] == "0" and r.ext_fields["queueOffset"] == "0"
        msg_id = r.ext_fields["msgId"]
        assert len(msg_id) == 32 and msg_id == msg_id.upper()
        assert msg_id.startswith("7F000001" + f"{ctx.port:08X}")
        p = await ctx.pull(0)
        assert p.code == 0
        assert p.ext_fields == {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": "1",
            "minOffset": "0",
            "maxOffset": "1",
        }
        (rec,) = records(p.body)
        m = decode(rec)
        assert m.body == payload and m.topic == TOPIC
        assert m.properties["TAGS"] == "t1" and m.properties["color"] == "red"
        assert m.store_host.port == ctx.port and m.born_host.ip == "127.0.0.1"
        assert m.born_timestamp == 1700000000000

    run_broker(tmp_path, scenario, flush_mode=flush)


def test_v2_short_names_and_lenient_values(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        ext = {
            "a": "PG", "b": TOPIC, "c": "TBW102", "d": 4, "e": 2, "f": 0,
            "g": 1795296830433, "h": 0, "i": props(TAGS="x"), "j": 0, "k": "0", "m": "0",
        }  # fmt: skip
        r = await ctx.client.request(310, ext, b"v2")
        assert r.code == 0, r.remark
        assert r.ext_fields["queueId"] == "2"
        p = await ctx.pull(0, queue_id=2)
        assert decode(records(p.body)[0]).body == b"v2"

    run_broker(tmp_path, scenario)


def test_batches_as_320_and_as_code_10_with_batch_1(tmp_path: Path) -> None:
    items = [BatchItem(0, bytes([i]) * i, {"UNIQ_KEY": f"u{i}"}) for i in range(1, 4)]

    async def scenario(ctx: Ctx) -> None:
        r = await ctx.send(encode_batch(items), code=320, batch=True)
        assert r.code == 0, r.remark
        assert len(r.ext_fields["msgId"].split(",")) == 3
        r = await ctx.send(encode_batch(items), code=10, batch="1")
        assert r.code == 0 and r.ext_fields["queueOffset"] == "3"
        p = await ctx.pull(0)
        bodies = [decode(x).body for x in records(p.body)]
        assert bodies == [it.body for it in items] * 2
        r = await ctx.send(encode_batch(items), topic="%RETRY%CG", code=320, batch=True)
        assert r.code == 1 and "retry group" in (r.remark or "")
        bad = await ctx.send(b"\x00\x00\x00\x30garbage", code=320, batch=True)
        assert bad.code == 1 and "batch body" in (bad.remark or "")

    run_broker(tmp_path, scenario)


def test_send_refusals_name_the_problem(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await ctx.send(b"x", topic="Nope")
        assert r.code == 17 and "Nope" in (r.remark or "")
        r = await ctx.send(b"x", queue_id=9)
        assert r.code == 1 and "queueId" in (r.remark or "")
        r = await ctx.client.request(10, {"topic": TOPIC}, b"x")
        assert r.code == 1 and "producerGroup" in (r.remark or "")
        r = await ctx.send(b"x", sysFlag="yes")
        assert r.code == 1 and "sysFlag" in (r.remark or "")
        r = await ctx.send(b"x" * (4 * 1024 * 1024 + 1))
        assert r.code == 13
        r = await ctx.send(b"ok", queue_id=-1)
        assert r.code == 0 and 0 <= int(r.ext_fields["queueId"]) < 4

    run_broker(tmp_path, scenario, auto_create_topic=False)


def test_pull_statuses_follow_the_table(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        empty = await ctx.pull(0)
        assert empty.code == 19 and empty.ext_fields["nextBeginOffset"] == "0"
        moved = await ctx.pull(5)
        assert moved.code == 21 and moved.ext_fields["nextBeginOffset"] == "0"
        for i in range(3):
            await ctx.send(bytes([i]), properties=props(TAGS="a" if i != 1 else "b"))
        caught_up = await ctx.pull(3)
        assert caught_up.code == 19 and caught_up.ext_fields["nextBeginOffset"] == "3"
        beyond = await ctx.pull(7)
        assert beyond.code == 21 and beyond.ext_fields["nextBeginOffset"] == "3"
        only_b = await ctx.pull(0, subscription="b")
        assert only_b.code == 0 and [decode(x).body for x in records(only_b.body)] == [b"\x01"]
        none = await ctx.pull(2, subscription="zz || yy")
        assert none.code == 20 and none.ext_fields["nextBeginOffset"] == "3"
        a_or_b = await ctx.pull(0, subscription=" a || b ")
        assert len(records(a_or_b.body)) == 3
        two = await ctx.pull(0, max_msgs=2)
        assert two.ext_fields["nextBeginOffset"] == "2"
        sql = await ctx.client.request(
            11,
            {"consumerGroup": "g", "topic": TOPIC, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1,
             "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0,
             "subscription": "a > 1", "expressionType": "SQL92"},
        )  # fmt: skip
        assert sql.code == 1 and "SQL92" in (sql.remark or "")
        no_sub = await ctx.pull(0, sys_flag=0, group="unknown-group")
        assert no_sub.code == 24

    run_broker(tmp_path, scenario)


def test_long_poll_wakes_on_a_send_and_times_out_otherwise(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        timed_out = await ctx.pull(0, sys_flag=0x4 | 0x2, suspend_ms=400)
        assert timed_out.code == 19 and loop.time() - t0 >= 0.35
        parked = asyncio.create_task(ctx.pull(0, sys_flag=0x4 | 0x2, suspend_ms=15000))
        await asyncio.sleep(0.2)
        assert not parked.done()
        other = await ctx.connect()
        t1 = loop.time()
        assert (await ctx.send(b"wake", client=other)).code == 0
        woken = await parked
        assert woken.code == 0 and loop.time() - t1 < 5
        assert decode(records(woken.body)[0]).body == b"wake"
        await other.close()

    run_broker(tmp_path, scenario)


def test_pull_batch_is_capped_by_bytes(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        big = b"z" * (200 * 1024)
        for _ in range(3):
            assert (await ctx.send(big)).code == 0
        p = await ctx.pull(0)
        assert len(records(p.body)) == 1 and p.ext_fields["nextBeginOffset"] == "1"
        big4 = bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB
        assert (await ctx.send(big4, queue_id=1)).code == 0
        p = await ctx.pull(0, queue_id=1)
        assert decode(records(p.body)[0]).body == big4

    run_broker(tmp_path, scenario)


def test_pull_batch_is_capped_by_the_configured_count(tmp_path: Path) -> None:
    """``max_transfer_count``: RocketMQ's 32 by default; a consumer asking for more (the
    replicator asks for 256) gets at most the configured count."""

    async def scenario(ctx: Ctx) -> None:
        for i in range(40):
            assert (await ctx.send(f"m{i}".encode())).code == 0
        p = await ctx.pull(0, max_msgs=256)
        assert len(records(p.body)) == 32 and p.ext_fields["nextBeginOffset"] == "32"

    async def wider(ctx: Ctx) -> None:
        for i in range(40):
            assert (await ctx.send(f"m{i}".encode())).code == 0
        p = await ctx.pull(0, max_msgs=256)
        assert len(records(p.body)) == 40

    run_broker(tmp_path / "default", scenario)
    run_broker(tmp_path / "wider", wider, max_transfer_count=256)
