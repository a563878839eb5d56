"""The codec sink's results against the fake broker: each future resolves with the queue offset
the broker stored that message at (single sends, batches, resends after a rewind), a given
``uniq_key`` and ``flag`` go out as they are, and topics added at run time get lanes."""

from __future__ import annotations

import asyncio
import dataclasses
import struct

import pytest

from replicator.sinks.errors import MessageRejected, SendFailed, SinkUnavailable
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig
from tests.unit.replicator.sinks.fake_broker import Decision, FakeBroker, FakeRoutes, Received
from tests.unit.replicator.sinks.test_rocketmq import msg, run


def uniq_at(broker: FakeBroker, queue: int) -> list[str]:
    """The UNIQ_KEYs stored in ``queue``, in offset order."""
    return [broker.stored[(queue, o)] for o in range(broker.next_offset.get(queue, 0))]


def test_single_sends_resolve_with_their_queue_offsets() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i, queue=i % 2)) for i in range(6)]
        assert await asyncio.gather(*futures) == [0, 0, 1, 1, 2, 2]
        sent = {r.body: r.uniq for r in broker.received}
        assert uniq_at(broker, 0) == [sent[f"body-{i}".encode()] for i in (0, 2, 4)]

    run(t)


def test_a_batch_takes_consecutive_offsets_from_its_answer() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        broker.next_offset[0] = 100  # a queue with history
        futures = [await sink.submit(msg(i)) for i in range(10)]
        offsets = await asyncio.gather(*futures)
        assert offsets == list(range(100, 110))
        assert any(r.code == 320 for r in broker.requests)  # some went as batches
        for i, offset in enumerate(offsets):
            uniq = next(r.uniq for r in broker.received if r.body == f"body-{i}".encode())
            assert broker.stored[(0, offset)] == uniq

    run(t, max_in_flight_per_queue=1, max_batch_messages=4)


def test_a_resent_message_resolves_with_its_last_copy() -> None:
    failed_once: set[str] = set()

    def decide(r: Received) -> Decision:
        if r.body == b"body-2" and r.uniq not in failed_once:
            failed_once.add(r.uniq)
            return 14  # SERVICE_NOT_AVAILABLE: retriable, the lane rewinds
        return 0

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i)) for i in range(5)]
        offsets = await asyncio.gather(*futures)
        # copies stored before the rewind (body-3, body-4 of the first run) are duplicates:
        # each future names the copy of its confirmed attempt, the last one
        uniqs = uniq_at(broker, 0)
        sent = {r.body: r.uniq for r in broker.received}
        for i, offset in enumerate(offsets):
            assert uniqs[offset] == sent[f"body-{i}".encode()]
        assert sink.resends > 0 and len(broker.stored) > 5
        assert offsets == sorted(offsets) and len(set(offsets)) == 5
        assert offsets[2:] == [offsets[2], offsets[2] + 1, offsets[2] + 2]

    run(t, decide=decide)


def test_uniq_key_and_flag_are_sent_as_given() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        kept = dataclasses.replace(msg(0), uniq_key="7F000001ABCD", flag=5)
        await (await sink.submit(kept))
        (r,) = broker.received
        assert r.uniq == "7F000001ABCD" and r.ext["h"] == "5"
        # in a batch the flag is the item's own
        futures = [
            await sink.submit(dataclasses.replace(msg(i), uniq_key=f"U{i}", flag=i))
            for i in range(1, 5)
        ]
        await asyncio.gather(*futures)
        batch = next(c for c in broker.requests if c.code == 320)
        flags, pos = [], 0
        while pos < len(batch.body):
            total, _magic, _crc, flag, _len = struct.unpack_from(">iiiii", batch.body, pos)
            flags.append(flag)
            pos += total
        assert flags and all(f > 0 for f in flags)
        assert [r.uniq for r in broker.received[1:]] == ["U1", "U2", "U3", "U4"]

    run(t, max_in_flight_per_queue=1, max_batch_messages=4)


def test_put_ok_without_a_queue_offset_fails_the_lane() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        original = broker.answer
        broker.answer = lambda cmd, items, code: cmd.response(code)  # type: ignore[method-assign]
        with pytest.raises(SendFailed, match="queueOffset"):
            await (await sink.submit(msg(0)))
        broker.answer = original  # type: ignore[method-assign]
        assert await (await sink.submit(msg(1, queue=1))) == 0  # other lanes go on

    run(t)


def test_add_topic_at_run_time() -> None:
    async def main() -> None:
        broker = FakeBroker()
        addr = await broker.start()
        routes = FakeRoutes(addr, queues=2)
        sink = RocketMQSink(RocketMQSinkConfig(topics=(), retry_backoff_ms=1), routes)
        await sink.start()
        try:
            other = dataclasses.replace(msg(0), topic="Later")
            with pytest.raises(MessageRejected, match="not a topic of this sink"):
                await sink.submit(other)
            await sink.add_topic("Later")
            await sink.add_topic("Later")  # idempotent
            assert sink.queue_count("Later") == 2
            assert await (await sink.submit(other)) == 0
            routes.queues = 4  # queues added at the destination: a second call adds lanes
            await sink.add_topic("Later")
            assert sink.queue_count("Later") == 4
            last = dataclasses.replace(other, queue_id=3)
            assert await (await sink.submit(last)) == 0
            routes.addr = None
            with pytest.raises(SinkUnavailable, match="no route"):
                await sink.add_topic("Missing")
        finally:
            await sink.close()
            await broker.close()

    asyncio.run(main())
