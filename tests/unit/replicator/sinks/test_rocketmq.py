"""The codec RocketMQ sink against an in-process fake broker: header fields, in-order
confirmation with out-of-order answers, rewind-and-resend on retriable codes and lost
connections, failing for good, the in-flight bound, rejected messages, close."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from replicator.sinks.base import OutMessage, Sink
from replicator.sinks.errors import (
    MessageRejected,
    QueueFailed,
    SendFailed,
    SinkClosed,
    SinkUnavailable,
)
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig
from rmq.codec import RemotingCommand
from tests.unit.replicator.sinks.fake_broker import (
    Decision,
    FakeBroker,
    FakeRoutes,
    Received,
    decode_batch,
)

TOPIC = "T"


def msg(i: int, queue: int = 0, **props: str) -> OutMessage:
    return OutMessage(TOPIC, queue, f"body-{i}".encode(), "SET", f"k{i}", dict(props), i)


def run(
    test: Callable[[FakeBroker, RocketMQSink], Awaitable[None]],
    decide: Callable[[Received], Decision] = lambda r: 0,
    queues: int = 2,
    **settings: Any,
) -> None:
    async def main() -> None:
        broker = FakeBroker(decide)
        addr = await broker.start()
        # pipelined, one message a request, unless a test says otherwise: the rewind machinery
        defaults: dict[str, Any] = {"max_in_flight_per_queue": 64, "max_batch_messages": 1}
        config = RocketMQSinkConfig(topics=(TOPIC,), retry_backoff_ms=1, **(defaults | settings))
        sink = RocketMQSink(config, FakeRoutes(addr, queues))
        await sink.start()
        try:
            await asyncio.wait_for(test(broker, sink), 20)
        finally:
            await sink.close()
            await broker.close()

    asyncio.run(main())


def bodies(broker: FakeBroker, queue: int = 0) -> list[bytes]:
    return [r.body for r in broker.received if r.queue_id == queue]


def test_send_message_v2_fields_and_properties() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        m = OutMessage(TOPIC, 1, bytes(range(256)), "SET", "a b", {"REDIS_DB": "3"}, 42)
        await (await sink.submit(m))
        (r,) = broker.received
        assert r.body == bytes(range(256))
        assert {k: r.ext[k] for k in "abcdefhjkmn"} == {
            "a": "metaledger-replicator", "b": TOPIC, "c": "TBW102", "d": "2", "e": "1",
            "f": "0", "h": "0", "j": "0", "k": "false", "m": "false", "n": "broker-a",
        }  # fmt: skip
        assert int(r.ext["g"]) > 1_700_000_000_000
        assert r.props["KEYS"] == "a b" and r.props["TAGS"] == "SET"
        assert r.props["REDIS_DB"] == "3" and r.props["WAIT"] == "true"
        assert len(r.uniq) == 32
        assert sink.confirmed(TOPIC, 1) == 1 and sink.confirmed_offset(TOPIC, 1) == 42
        assert sink.confirmed(TOPIC, 0) == 0 and sink.confirmed_offset(TOPIC, 0) is None
        assert sink.queue_count(TOPIC) == 2

    run(t)


def test_answers_out_of_order_confirm_in_order() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        done: list[int] = []
        futures = []
        for i in range(20):
            f = await sink.submit(msg(i))
            f.add_done_callback(functools.partial(lambda i, _f: done.append(i), i))
            futures.append(f)
        await broker.wait_received(20)
        assert sink.confirmed(TOPIC, 0) == 0
        broker.release(reverse=True)  # the last one is answered first
        await asyncio.gather(*futures)
        assert done == list(range(20))
        assert sink.confirmed(TOPIC, 0) == 20 and sink.confirmed_offset(TOPIC, 0) == 19
        assert bodies(broker) == [f"body-{i}".encode() for i in range(20)]

    run(t, decide=lambda r: None)


def test_a_retriable_failure_resends_the_tail_in_order() -> None:
    failed: set[str] = set()

    def decide(r: Received) -> Decision:
        if r.body == b"body-3" and not failed:
            failed.add(r.uniq)
            return 12  # FLUSH_SLAVE_TIMEOUT: stored on the master only, not a confirmation
        return 0

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i)) for i in range(10)]
        await asyncio.gather(*futures)
        got = bodies(broker)
        first = got.index(b"body-3")
        again = got.index(b"body-3", first + 1)
        # the run from the resend on is complete and in order
        assert got[again:] == [f"body-{i}".encode() for i in range(3, 10)]
        uniq = [r.uniq for r in broker.received]
        assert uniq[first] == uniq[again]  # a resend keeps its UNIQ_KEY
        assert sink.confirmed(TOPIC, 0) == 10 and sink.resends >= 1

    run(t, decide=decide)


def test_a_later_message_is_not_confirmed_before_a_failed_earlier_one() -> None:
    state = {"n": 0}

    def decide(r: Received) -> Decision:
        if r.body == b"body-0":
            state["n"] += 1
            return None if state["n"] == 1 else 0  # first attempt held, then answered later
        return 0

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        f0, f1 = await sink.submit(msg(0)), await sink.submit(msg(1))
        await broker.wait_received(2)
        await asyncio.sleep(0.05)  # body-1's PUT_OK is in; body-0 is still unanswered
        assert not f1.done() and sink.confirmed(TOPIC, 0) == 0
        broker.release(code=2)  # SYSTEM_BUSY for body-0's first attempt
        await asyncio.gather(f0, f1)
        assert bodies(broker)[-2:] == [b"body-0", b"body-1"]

    run(t, decide=decide)


def test_non_retriable_answer_fails_the_queue() -> None:
    def decide(r: Received) -> Decision:
        return 13 if r.body == b"body-2" else 0  # MESSAGE_ILLEGAL

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i)) for i in range(5)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert results[:2] == [0, 1]  # the queue offsets the broker stored them at
        assert isinstance(results[2], SendFailed) and results[2].code == 13
        assert not results[2].retriable
        assert all(isinstance(r, QueueFailed) for r in results[3:])
        assert sink.confirmed(TOPIC, 0) == 2
        with pytest.raises(QueueFailed):
            await sink.submit(msg(9))
        await (await sink.submit(msg(9, queue=1)))  # the other queues go on

    run(t, decide=decide)


def test_a_refused_batch_is_sent_again_one_by_one_to_name_the_refused_message() -> None:
    """The broker refuses a whole batch for one message in it (MESSAGE_ILLEGAL): the sink
    sends the batch's messages one at a time, so the others are stored and the refused one
    alone fails (a dismiss policy must name the right message)."""

    def decide(r: Received) -> Decision:
        return 13 if r.body == b"body-3" else 0

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        broker_hold = [await sink.submit(msg(i)) for i in range(6)]
        results = await asyncio.gather(*broker_hold, return_exceptions=True)
        assert results[:3] == [0, 1, 2]
        assert isinstance(results[3], SendFailed) and results[3].code == 13
        assert all(isinstance(r, QueueFailed) for r in results[4:])
        assert any(len(decode_batch(c.body)) > 1 for c in broker.requests if c.code == 320)

    run(t, decide=decide, max_batch_messages=16, max_in_flight_per_queue=1)


def test_attempts_are_bounded() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        f = await sink.submit(msg(0))
        with pytest.raises(SendFailed) as info:
            await f
        assert info.value.code == 11 and info.value.retriable
        assert len(broker.received) == 3
        assert sink.confirmed(TOPIC, 0) == 0

    run(t, decide=lambda r: 11, max_attempts=3)  # SLAVE_NOT_AVAILABLE, every time


def test_lost_connection_reconnects_and_resends_in_order() -> None:
    def decide(r: Received) -> Decision:
        return "drop" if r.conn == 1 and r.body == b"body-5" else 0

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i)) for i in range(10)]
        await asyncio.gather(*futures)
        second = [r.body for r in broker.received if r.conn > 1]
        start = int(second[0].removeprefix(b"body-"))
        assert start <= 5  # body-5 was never answered: it and all after it came again, in order
        assert second == [f"body-{i}".encode() for i in range(start, 10)]
        assert sink.confirmed(TOPIC, 0) == 10

    run(t, decide=decide, queues=1, connections_per_broker=1)


def test_timeouts_are_retried_then_fail() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        f = await sink.submit(msg(0))
        with pytest.raises(SinkUnavailable):
            await f
        assert len(broker.received) == 2

    run(t, decide=lambda r: None, send_timeout_ms=100, max_attempts=2)


def test_a_timed_out_send_goes_again_on_a_new_connection() -> None:
    """A stream stuck behind a partition is not used again: the resend would queue behind
    what TCP retransmits ever more slowly (tests/faults/net/test_replicator_partitions.py)."""

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        assert await (await sink.submit(msg(0))) == 0
        assert [r.conn for r in broker.received] == [1, 2]  # held on 1, answered on 2
        assert broker.connections == 2

    run(
        t,
        decide=lambda r: None if r.conn == 1 else 0,
        queues=1,
        connections_per_broker=1,
        send_timeout_ms=100,
    )


def test_in_flight_is_bounded() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i, queue=i % 2)) for i in range(4)]
        await broker.wait_received(4)
        blocked = asyncio.ensure_future(sink.submit(msg(4)))
        done, _ = await asyncio.wait([blocked], timeout=0.2)
        assert not done  # a fifth waits for capacity
        broker.release()
        await asyncio.gather(*futures)
        fifth = await blocked
        await broker.wait_received(5)
        broker.release()
        await fifth

    run(t, decide=lambda r: None, max_in_flight=4)


def test_per_queue_in_flight_is_bounded() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i)) for i in range(5)]
        await broker.wait_received(2)
        await asyncio.sleep(0.05)
        assert len(broker.received) == 2
        while len(broker.received) < 5:
            broker.release()
            await asyncio.sleep(0.01)
        broker.release()
        await asyncio.gather(*futures)

    run(t, decide=lambda r: None, max_in_flight_per_queue=2)


def test_bad_messages_are_rejected_at_submit() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        with pytest.raises(MessageRejected, match="separator"):
            await sink.submit(msg(0, p="a\x01b"))
        with pytest.raises(MessageRejected, match="set by the sink"):
            await sink.submit(msg(0, UNIQ_KEY="x"))
        with pytest.raises(MessageRejected, match="no queue 7"):
            await sink.submit(msg(0, queue=7))
        with pytest.raises(MessageRejected, match="not a topic"):
            await sink.submit(OutMessage("other", 0, b"", "", "", {}, 0))
        assert broker.received == []

    run(t)


def test_close_fails_what_is_not_confirmed() -> None:
    async def main() -> None:
        broker = FakeBroker(lambda r: None)
        addr = await broker.start()
        sink = RocketMQSink(RocketMQSinkConfig(topics=(TOPIC,)), FakeRoutes(addr))
        await sink.start()
        f = await sink.submit(msg(0))
        await broker.wait_received(1)
        await sink.close()
        with pytest.raises(SinkClosed):
            await f
        with pytest.raises(SinkClosed):
            await sink.submit(msg(1))
        await broker.close()

    asyncio.run(main())


def test_no_route_and_no_broker() -> None:
    async def main() -> None:
        sink = RocketMQSink(RocketMQSinkConfig(topics=(TOPIC,)), FakeRoutes(None))
        with pytest.raises(SinkUnavailable, match="no route"):
            await sink.start()
        # a route to a port nobody listens on: connect failures are retried, then fail
        broker = FakeBroker()
        addr = await broker.start()
        await broker.close()
        config = RocketMQSinkConfig(topics=(TOPIC,), max_attempts=2, retry_backoff_ms=1)
        sink = RocketMQSink(config, FakeRoutes(addr))
        await sink.start()
        with pytest.raises(SinkUnavailable, match="cannot connect"):
            await (await sink.submit(msg(0)))
        await sink.close()

    asyncio.run(main())


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        RocketMQSinkConfig(topics=("T",), max_in_flight=0).validate()
    RocketMQSinkConfig(topics=()).validate()  # topics may all come with add_topic


def test_default_one_request_per_queue_and_batches_behind_it() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(0))]
        await broker.wait_received(1)
        futures += [await sink.submit(msg(i)) for i in range(1, 50)]
        await asyncio.sleep(0.05)
        assert [r.code for r in broker.requests] == [310]  # one outstanding per queue
        broker.release()
        await broker.wait_received(50)
        assert [r.code for r in broker.requests] == [310, 320]  # the rest as one batch
        assert sink.confirmed(TOPIC, 0) == 1
        broker.release()
        await asyncio.gather(*futures)
        assert bodies(broker) == [f"body-{i}".encode() for i in range(50)]
        assert broker.received[7].props["KEYS"] == "k7" and len(broker.received[7].uniq) == 32
        assert sink.confirmed(TOPIC, 0) == 50 and sink.confirmed_offset(TOPIC, 0) == 49

    run(t, decide=lambda r: None, max_in_flight_per_queue=1, max_batch_messages=256)


def test_batches_respect_their_limits_and_a_failed_batch_is_resent() -> None:
    failed: set[str] = set()

    def decide(r: Received) -> Decision:
        if r.body == b"body-12" and not failed:
            failed.add(r.uniq)
            return 12
        return 0

    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        futures = [await sink.submit(msg(i)) for i in range(30)]
        await asyncio.gather(*futures)
        assert all(len(decode_sizes(r)) <= 5 for r in broker.requests)
        got = bodies(broker)
        again = got.index(b"body-12", got.index(b"body-12") + 1)
        # the batch holding body-12 came again whole, then the rest in order
        assert got[again - 2 : again] == [b"body-10", b"body-11"]
        assert got[again:] == [f"body-{i}".encode() for i in range(12, 30)]
        assert sink.confirmed(TOPIC, 0) == 30

    run(t, decide=decide, max_in_flight_per_queue=1, max_batch_messages=5)


def decode_sizes(cmd: RemotingCommand) -> list[bytes]:
    if cmd.code == 310:
        return [cmd.body]
    return [body for body, _ in decode_batch(cmd.body)]


def test_a_moved_master_is_found_in_a_fresh_route() -> None:
    async def main() -> None:
        old = FakeBroker(lambda r: 16)  # NO_PERMISSION: not the master (any more)
        new = FakeBroker()
        old_addr, new_addr = await old.start(), await new.start()
        routes = FakeRoutes(old_addr, queues=1)
        config = RocketMQSinkConfig(topics=(TOPIC,), retry_backoff_ms=1)
        sink = RocketMQSink(config, routes)
        await sink.start()
        routes.addr = new_addr  # metaledger now names another master
        await (await sink.submit(msg(0)))
        assert [r.body for r in old.received] == [b"body-0"]
        assert [r.body for r in new.received] == [b"body-0"]
        assert routes.calls == 2
        await sink.close()
        await old.close()
        await new.close()

    asyncio.run(main())


def test_a_body_over_the_limit_is_rejected() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        big = OutMessage(TOPIC, 0, b"x" * 1025, "SET", "k", {}, 1)
        with pytest.raises(MessageRejected, match="1025 bytes"):
            await sink.submit(big)

    run(t, max_message_bytes=1024)


def test_every_sink_is_a_sink() -> None:
    """The three implementations satisfy the Protocol (mypy checks this module's hints)."""
    from replicator.sinks.file import FileSink
    from replicator.sinks.wheel import WheelSink, WheelSinkConfig

    sinks: list[Sink] = [
        RocketMQSink(RocketMQSinkConfig(topics=(TOPIC,)), FakeRoutes(None)),
        WheelSink(WheelSinkConfig("127.0.0.1:1", (TOPIC,)), FakeRoutes(None)),
        FileSink(None, {TOPIC: 1}),
    ]
    for sink in sinks:
        for name in ("start", "queue_count", "submit", "confirmed", "confirmed_offset", "close"):
            assert callable(getattr(sink, name))


def test_big_bodies_batch_and_long_properties_go_alone() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        first = await sink.submit(msg(0))
        await broker.wait_received(1)
        big = [
            OutMessage(TOPIC, 0, bytes([i]) * 40_000, "SET", f"k{i}", {}, i) for i in range(1, 4)
        ]
        long_props = OutMessage(TOPIC, 0, b"p", "SET", "k", {"p": "v" * 40_000}, 4)
        futures = [first] + [await sink.submit(m) for m in [*big, long_props]]
        broker.release()  # the rest are answered at once
        await asyncio.gather(*futures)
        sizes = [len(decode_sizes(r)) for r in broker.requests]
        assert [r.code for r in broker.requests] == [310, 320, 310]
        assert sizes == [1, 3, 1]  # 40 KB bodies batch; 40 KB of properties go alone
        assert bodies(broker)[-1] == b"p"

    run(
        t,
        decide=lambda r: None if r.body == b"body-0" else 0,
        max_in_flight_per_queue=1,
        max_batch_messages=256,
    )


def test_capacity_hands_units_in_order_and_survives_cancelled_waiters() -> None:
    from replicator.sinks.capacity import Capacity

    async def main() -> None:
        cap = Capacity(1)
        assert cap.try_take() and not cap.try_take()
        first = asyncio.create_task(cap.take())
        cancelled = asyncio.create_task(cap.take())
        last = asyncio.create_task(cap.take())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        cap.give(1)  # to the first waiter
        await asyncio.sleep(0)
        assert first.done() and not last.done()
        cap.give(1)  # skips the cancelled one
        await asyncio.wait_for(last, 1)
        assert cancelled.cancelled() and cap.free == 0
        cap.give(2)
        assert cap.free == 2 and cap.try_take()

    asyncio.run(main())
