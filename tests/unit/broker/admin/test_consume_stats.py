"""GET_CONSUME_STATS (208) and the lag gauges: a pull group, a POP group (the gRPC front's
consumption too) and the pure row computation (broker/admin/consume_stats.py)."""

from __future__ import annotations

from pathlib import Path

from broker.admin.consume_stats import consumer_queues, queue_offsets
from broker.pop.state import InMemorySlots, QueueBook
from rmq.consume_stats import QueueOffsets, decode_consume_stats
from rmq.headers import GetConsumeStatsHeader
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker


def book(low: int, popped: list[int], acked: list[int]) -> QueueBook:
    b = QueueBook(InMemorySlots(), low, low)
    for off in popped:
        b.deliver_new(off, 10**12)
    for off in acked:
        b.ack(off, None)
    return b


def test_a_pull_group_row_is_its_committed_offset() -> None:
    row = queue_offsets("b", "T", 1, 10, 7, None)
    assert row == QueueOffsets("T", "b", 1, 10, 7, 7)
    assert row.lag == 3 and row.inflight == 0
    assert queue_offsets("b", "T", 1, -1, None, None) == QueueOffsets("T", "b", 1, 0, 0, 0)


def test_a_pop_group_row_is_its_book() -> None:
    # 10 sent, 6 popped, 4 acked (not the first ones only): 2 in flight, lag 6
    b = book(0, [0, 1, 2, 3, 4, 5], [0, 1, 3, 4])
    row = queue_offsets("b", "T", 0, 10, 2, b)
    assert (row.consumer_offset, row.pull_offset, row.inflight, row.lag) == (2, 6, 2, 6)


async def stats(ctx: Ctx, group: str, topic: str | None = None) -> list[QueueOffsets]:
    r = await ctx.client.call(GetConsumeStatsHeader(group, topic).request())
    assert r.code == 0, r.remark
    rows, tps = decode_consume_stats(r.body)
    assert tps == 0.0
    return rows


def test_get_consume_stats_for_pull_and_pop_groups(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        for i in range(10):
            assert (await ctx.send(f"m{i}".encode())).code == 0
        # a pull group committed 3 of queue 0
        r = await ctx.client.request(
            15, {"consumerGroup": "PULL", "topic": TOPIC, "queueId": 0, "commitOffset": 3}
        )
        assert r.code == 0
        # a POP group: 6 popped, 4 acked, 2 in flight
        pop = ctx.replica.pop
        popped = await pop.pop("POP", TOPIC, 0, 6, 60_000, init_mode=0)
        assert len(popped) == 6
        for p in (popped[0], popped[1], popped[3], popped[4]):
            await pop.ack("POP", TOPIC, p.handle)
        (q0, *others) = await stats(ctx, "PULL")
        assert (q0.queue_id, q0.broker_offset, q0.consumer_offset, q0.lag) == (0, 10, 3, 7)
        assert q0.last_timestamp > 0 and q0.broker_name == "broker-a"
        assert [q.queue_id for q in others] == [1, 2, 3]  # every read queue of the topic
        (p0, *_) = await stats(ctx, "POP", TOPIC)
        assert (p0.consumer_offset, p0.pull_offset, p0.inflight, p0.lag) == (2, 6, 2, 6)
        assert await stats(ctx, "NOBODY") == []  # no offsets here: no topic
        assert [r.topic for r in await stats(ctx, "NOBODY", "NoSuchTopic")] == []
        # the metrics' view: every read queue of a topic a group committed offsets of
        rows = {
            (g, r.topic, r.queue_id): r
            for g, r in consumer_queues(ctx.replica.core, pop.table.books)
        }
        assert set(rows) == {(g, TOPIC, q) for g in ("PULL", "POP") for q in range(4)}
        assert (rows["POP", TOPIC, 0].lag, rows["POP", TOPIC, 0].inflight) == (6, 2)
        view = ctx.replica._view()
        assert {(g, r.queue_id, r.lag) for g, r in view.consumer_queues if r.queue_id == 0} == {
            ("PULL", 0, 7),
            ("POP", 0, 6),
        }

    run_broker(tmp_path, scenario)


def test_lag_in_time_is_the_first_not_consumed_against_the_newest(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        from rmq.message import decode

        for i in range(5):
            assert (await ctx.send(f"m{i}".encode())).code == 0
        stored = ctx.replica.core.store.get(TOPIC, 0, 0, 5).messages
        times = [decode(m, check_crc=False).store_timestamp for m in stored]
        r = await ctx.client.request(
            15, {"consumerGroup": "PULL", "topic": TOPIC, "queueId": 0, "commitOffset": 2}
        )
        assert r.code == 0
        # pull: the first not consumed is offset 2
        (q0, *others) = await stats(ctx, "PULL", TOPIC)
        assert (q0.next_timestamp, q0.newest_timestamp) == (times[2], times[4])
        assert q0.lag_ms == times[4] - times[2] and q0.last_timestamp == times[1]
        assert all(q.lag_ms == q.next_timestamp == q.newest_timestamp == 0 for q in others)
        # POP: its first not acked (the book's low), in flight or not
        pop = ctx.replica.pop
        popped = await pop.pop("POP", TOPIC, 0, 3, 60_000, init_mode=0)
        await pop.ack("POP", TOPIC, popped[0].handle)
        (p0, *_) = await stats(ctx, "POP", TOPIC)
        assert (p0.consumer_offset, p0.next_timestamp, p0.newest_timestamp) == (
            1,
            times[1],
            times[4],
        )
        # caught up: no lag in time, and the row is the bytes it was
        r = await ctx.client.request(
            15, {"consumerGroup": "PULL", "topic": TOPIC, "queueId": 0, "commitOffset": 5}
        )
        (q0, *_) = await stats(ctx, "PULL", TOPIC)
        assert (q0.lag, q0.lag_ms, q0.next_timestamp, q0.newest_timestamp) == (0, 0, 0, 0)
        body = (await ctx.client.call(GetConsumeStatsHeader("PULL", TOPIC).request())).body
        assert b"nextTimestamp" not in body

    run_broker(tmp_path, scenario)
