"""POP over the remoting front of an in-process replica: 200050, 200051, 200053, 200151."""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import time
from pathlib import Path
from typing import Any

import pytest

from broker.replication import Standalone
from rmq.codec import RemotingCommand
from rmq.message import StoredMessage, decode_records
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker

POP, ACK, CHANGE, BATCH_ACK = 200050, 200051, 200053, 200151


async def pop(
    ctx: Ctx, group: str = "PG", queue_id: int = 0, n: int = 32, invisible_ms: int = 60_000,
    poll_ms: int = 0, **extra: Any,
) -> RemotingCommand:  # fmt: skip
    ext = {
        "consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "maxMsgNums": n,
        "invisibleTime": invisible_ms, "pollTime": poll_ms, "bornTime": int(time.time() * 1000),
        "initMode": 0, **extra,
    }  # fmt: skip
    return await ctx.client.request(POP, ext)


def handles(r: RemotingCommand) -> list[tuple[StoredMessage, str]]:
    """Each message and its handle, built as the Java client does (processPopResponse)."""
    e = r.ext_fields
    starts = {}
    for one in e["startOffsetInfo"].split(";"):
        _retry, q, start = one.split(" ")
        starts[int(q)] = start
    out = []
    for m in decode_records(r.body):
        extra = [
            starts[m.queue_id], e["popTime"], e["invisibleTime"], e["reviveQid"], "0",
            "broker-a", str(m.queue_id), str(m.queue_offset),
        ]  # fmt: skip
        out.append((m, " ".join(extra)))
    return out


async def ack(ctx: Ctx, m: StoredMessage, handle: str, group: str = "PG") -> RemotingCommand:
    ext = {
        "consumerGroup": group, "topic": TOPIC, "queueId": m.queue_id, "extraInfo": handle,
        "offset": m.queue_offset,
    }  # fmt: skip
    return await ctx.client.request(ACK, ext)


async def send_n(ctx: Ctx, n: int, queue_id: int = 0, **tags: str) -> None:
    for i in range(n):
        r = await ctx.send(f"m{i}".encode(), queue_id=queue_id, properties=props(**tags))
        assert r.code == 0, r.remark


def test_pop_ack_and_the_consumer_offset_is_low(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 4)
        r = await pop(ctx, n=3)
        assert r.code == 0, r.remark
        e = r.ext_fields
        assert e["reviveQid"] == "0" and e["invisibleTime"] == "60000" and e["restNum"] == "1"
        assert e["startOffsetInfo"] == "0 0 0" and e["msgOffsetInfo"] == "0 0 0,1,2"
        got = handles(r)
        assert [m.body for m, _ in got] == [b"m0", b"m1", b"m2"]
        assert all(m.reconsume_times == 0 for m, _ in got)
        assert (await ack(ctx, *got[1])).code == 0
        q = {"consumerGroup": "PG", "topic": TOPIC, "queueId": 0}
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "0"
        assert (await ack(ctx, *got[0])).code == 0
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "2"  # low: lag is right
        again = await ack(ctx, *got[0])
        assert again.code == 208 and "expired or used" in (again.remark or "")
        r = await pop(ctx)
        assert [m.body for m, _ in handles(r)] == [b"m3"]  # m2 is still invisible
        r = await pop(ctx)
        assert r.code == 210 and r.ext_fields["restNum"] == "0"  # POLLING_TIMEOUT

    run_broker(tmp_path, scenario)


def test_redelivery_after_the_invisible_time_refuses_the_old_handle(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 1)
        (m, first), = handles(await pop(ctx, invisible_ms=200))  # fmt: skip
        assert (await pop(ctx)).code == 210
        await asyncio.sleep(0.25)
        (m2, second), = handles(await pop(ctx, invisible_ms=5000))  # fmt: skip
        assert m2.queue_offset == m.queue_offset and m2.reconsume_times == 1
        assert (await ack(ctx, m, first)).code == 208
        assert (await ack(ctx, m2, second)).code == 0

    run_broker(tmp_path, scenario)


def test_change_invisible_time_gives_a_new_handle(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 1)
        (m, h), = handles(await pop(ctx, invisible_ms=60_000))  # fmt: skip
        ext = {
            "consumerGroup": "PG", "topic": TOPIC, "queueId": 0, "extraInfo": h,
            "offset": m.queue_offset, "invisibleTime": 150,
        }  # fmt: skip
        r = await ctx.client.request(CHANGE, ext)
        assert r.code == 0, r.remark
        assert r.ext_fields["invisibleTime"] == "150" and r.ext_fields["reviveQid"] == "0"
        new = h.split(" ")
        new[1], new[2] = r.ext_fields["popTime"], "150"
        assert (await ctx.client.request(CHANGE, ext)).code == 208  # the old handle is stale
        await asyncio.sleep(0.2)
        (m2, h2), = handles(await pop(ctx))  # fmt: skip
        assert m2.reconsume_times == 1
        assert (await ack(ctx, m, " ".join(new))).code == 208  # redelivered since
        assert (await ack(ctx, m2, h2)).code == 0

    run_broker(tmp_path, scenario)


def test_batch_ack_with_a_bitset(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 5)
        r = await pop(ctx)
        e = r.ext_fields
        bits = base64.b64encode(bytes([0b10101])).decode()  # offsets 0, 2, 4
        ack = {
            "c": "PG", "t": TOPIC, "r": "0", "so": 0, "q": 0, "rq": 0,
            "pt": int(e["popTime"]), "it": int(e["invisibleTime"]), "b": bits,
        }  # fmt: skip
        body = json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()
        assert (await ctx.client.request(BATCH_ACK, {}, body)).code == 0
        book = ctx.replica.pop.table.books[("PG", TOPIC, 0)]
        assert book.progress() == (1, 5, [2, 4])
        bad = await ctx.client.request(BATCH_ACK, {}, b"{")
        assert bad.code == 1 and "JSON" in (bad.remark or "")

    run_broker(tmp_path, scenario)


def test_max_attempts_then_the_dead_letter_queue(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        ctx.replica.pop.set_max_attempts("PG", 2)
        await send_n(ctx, 1, UNIQ_KEY="U1")
        for attempt in (1, 2):
            got = handles(await pop(ctx, invisible_ms=100))
            assert [m.reconsume_times for m, _ in got] == [attempt - 1]
            await asyncio.sleep(0.15)
        assert (await pop(ctx)).code == 210  # the third attempt went to the DLQ instead
        r = await ctx.pull(0, topic="%DLQ%PG", queue_id=0)
        (dead,) = decode_records(r.body)
        assert dead.body == b"m0" and dead.reconsume_times == 2
        assert dead.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
        assert dead.properties["DLQ_ORIGIN_MESSAGE_ID"] == "U1"
        q = {"consumerGroup": "PG", "topic": TOPIC, "queueId": 0}
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "1"

    run_broker(tmp_path, scenario)


def test_fifo_hands_out_the_next_only_after_the_previous_is_acked(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 3)
        r = await pop(ctx, n=1, order="true")
        assert r.ext_fields["reviveQid"] == "999"
        assert r.ext_fields["orderCountInfo"] == "0 qo0%0 0"
        (m, h), = handles(r)  # fmt: skip
        assert (await pop(ctx, n=1, order="true")).code == 210  # m0 in flight: nothing new
        assert (await ack(ctx, m, h)).code == 0
        (m1, _h1), = handles(await pop(ctx, n=1, order="true"))  # fmt: skip
        assert m1.body == b"m1"

    run_broker(tmp_path, scenario)


def test_tags_filter_and_a_pull_group_beside_a_pop_group(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        for i, tag in enumerate("abab"):
            await ctx.send(f"m{i}".encode(), properties=props(TAGS=tag))
        r = await pop(ctx, exp="a", expType="TAG")
        assert [m.body for m, _ in handles(r)] == [b"m0", b"m2"]
        for m, h in handles(r):
            assert (await ack(ctx, m, h)).code == 0
        q = {"consumerGroup": "PG", "topic": TOPIC, "queueId": 0}
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "4"  # b's done too
        pulled = decode_records((await ctx.pull(0, group="PULLG")).body)
        assert [m.body for m in pulled] == [b"m0", b"m1", b"m2", b"m3"]
        other = handles(await pop(ctx, group="PG2"))
        assert [m.body for m, _ in other] == [b"m0", b"m1", b"m2", b"m3"]

    run_broker(tmp_path, scenario)


def test_long_polling_answers_when_a_message_arrives(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        other = await ctx.connect()
        try:
            started = time.monotonic()
            waiting = asyncio.create_task(pop(ctx, queue_id=-1, poll_ms=5000))
            await asyncio.sleep(0.2)
            await ctx.send(b"late", queue_id=2, client=other)
            r = await waiting
            assert r.code == 0 and [m.body for m, _ in handles(r)] == [b"late"]
            assert time.monotonic() - started < 3
        finally:
            await other.close()

    run_broker(tmp_path, scenario)


def test_long_polling_answers_when_an_invisible_time_ends(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 1)
        assert (await pop(ctx, invisible_ms=300)).code == 0
        started = time.monotonic()
        (m, _h), = handles(await pop(ctx, poll_ms=5000))  # fmt: skip
        assert m.reconsume_times == 1 and 0.1 < time.monotonic() - started < 2

    run_broker(tmp_path, scenario)


def test_restart_keeps_every_handles_fate(tmp_path: Path) -> None:
    kept: dict[str, Any] = {}

    async def before(ctx: Ctx) -> None:
        await send_n(ctx, 3)
        got = handles(await pop(ctx, invisible_ms=60_000))
        assert (await ack(ctx, *got[0])).code == 0
        kept["got"] = got

    async def after(ctx: Ctx) -> None:
        got = kept["got"]
        assert (await ack(ctx, *got[0])).code == 208  # acked stays acked
        assert (await pop(ctx)).code == 210  # in flight stays invisible
        assert (await ack(ctx, *got[1])).code == 0  # and its handle still works
        q = {"consumerGroup": "PG", "topic": TOPIC, "queueId": 0}
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "2"

    run_broker(tmp_path, before)
    run_broker(tmp_path, after)


def test_bad_requests_and_a_slave(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await pop(ctx, invisible_ms=0)
        assert r.code == 29 and "invisible time" in (r.remark or "")
        assert (await pop(ctx, n=33)).code == 29
        assert (await pop(ctx, queue_id=9)).code == 29
        r = await ctx.client.request(POP, {"consumerGroup": "PG", "topic": TOPIC})
        assert r.code == 1 and "queueId" in (r.remark or "")
        m = StoredMessage(TOPIC, b"", queue_id=0, queue_offset=0)
        assert (await ack(ctx, m, "garbage")).code == 208
        assert (await ack(ctx, m, "0 1 2 0 0 broker-b 0 0")).code == 208  # another broker's

    run_broker(tmp_path, scenario)

    class Slave(Standalone):
        def writable(self) -> str | None:
            return "the broker is a slave"

    async def slave(ctx: Ctx) -> None:
        r = await pop(ctx)
        assert r.code == 14 and "slave" in (r.remark or "")

    run_broker(tmp_path / "slave", slave, replication=Slave())


def test_a_slot_write_that_fails_leaves_the_book_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker.pop.table import FileSlots

    real = FileSlots.write
    failures = iter([OSError(errno.ENOSPC, "No space left on device")])

    def write(self: FileSlots, offset: int, visible_at_ms: int, attempt: int) -> None:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        real(self, offset, visible_at_ms, attempt)

    async def scenario(ctx: Ctx) -> None:
        await send_n(ctx, 2)
        monkeypatch.setattr(FileSlots, "write", write)
        r = await pop(ctx)
        assert r.code == 1  # the disk refused: an error answer, nothing handed out
        got = handles(await pop(ctx))
        assert [(m.body, m.reconsume_times) for m, _ in got] == [(b"m0", 0), (b"m1", 0)]
        for m, h in got:
            assert (await ack(ctx, m, h)).code == 0
        book = ctx.replica.pop.table.books[("PG", TOPIC, 0)]
        assert book.progress() == (2, 2, [])

    run_broker(tmp_path, scenario)
