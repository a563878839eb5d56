"""``Sink.submit_many``: the same messages on the wire as ``submit`` one by one (byte for byte,
on a full sync's sample), one confirmation for the run once every message is confirmed, a
failure failing it, a bad message refusing the run before any is queued, and a run larger than
the in-flight bound."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator.redis.events import EventBuilder
from replicator.sinks import rocketmq as rocketmq_sink
from replicator.sinks.base import OutMessage, encode_properties, wire_properties
from replicator.sinks.errors import MessageRejected, QueueFailed, SendFailed
from replicator.sinks.file import FileSink
from replicator.sinks.rocketmq import RocketMQSink
from tests.unit.replicator.sinks.fake_broker import FakeBroker
from tests.unit.replicator.sinks.test_rocketmq import run

TOPIC = "T"


def sample() -> list[OutMessage]:
    """A full sync's messages: markers, strings in two dbs, a split-free multi-field hash, a
    binary key (no KEYS), a fragmented value, and one with a given UNIQ_KEY and a flag."""
    b = EventBuilder(TOPIC, 3, "r" * 40, max_body_bytes=64, fragment_bytes=32)
    out = list(b.begin_snapshot("r" * 40, 1234, "1.abcdef").messages)
    for i in range(40):
        out += b.snapshot_messages(i % 2, [b"SET", b"key:%d" % i, b"v%d" % i])
    out += b.snapshot_messages(0, [b"HSET", b"h", b"f1", b"1", b"f2", b"2"])
    out += b.snapshot_messages(0, [b"SET", b"\xff\x00bin", b"x"])
    out += b.snapshot_messages(1, [b"RPUSH", b"big", b"y" * 100])
    out += b.end_snapshot().messages
    out.append(OutMessage(TOPIC, 1, b"given", "", "", {"A": "1"}, 7, uniq_key="U" * 32, flag=3))
    return out


def wire(broker: FakeBroker) -> dict[str, list[tuple[int, bytes, dict[str, str]]]]:
    """Every request as sent, by queue (the queues' requests interleave on the connections as
    their lanes run): code, body and header fields but the born timestamp."""
    out: dict[str, list[tuple[int, bytes, dict[str, str]]]] = {}
    for r in broker.requests:
        ext = {k: v for k, v in r.ext_fields.items() if k != "g"}
        out.setdefault(ext["e"], []).append((r.code, r.body, ext))
    return out


@pytest.mark.parametrize("batch", [1, 1024])
def test_the_same_bytes_as_one_submit_a_message(
    monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    seen: dict[str, dict[str, list[tuple[int, bytes, dict[str, str]]]]] = {}
    for how in ("submit", "submit_many"):
        counter = itertools.count()
        monkeypatch.setattr(rocketmq_sink, "uniq_key", lambda c=counter: f"{next(c):032X}")

        async def t(broker: FakeBroker, sink: RocketMQSink, how: str = how) -> None:
            msgs = sample()
            if how == "submit":
                futures = [await sink.submit(m) for m in msgs]
                await broker.wait_received(len(msgs))
                broker.release()
                assert len(await asyncio.gather(*futures)) == len(msgs)
            else:
                future = await sink.submit_many(msgs)
                await broker.wait_received(len(msgs))
                broker.release()
                assert await future == len(msgs)
            seen[how] = wire(broker)
            for q in range(3):
                n = sum(m.queue_id == q for m in msgs)
                assert sink.confirmed(TOPIC, q) == n

        run(t, decide=lambda r: None, queues=3, max_batch_messages=batch)
    assert seen["submit"] == seen["submit_many"]
    # and each message's properties as the old encoding (the merged dict) gives them
    for m in sample():
        u = m.uniq_key or "0" * 32
        old = encode_properties(replace(m, properties_text=""), {"UNIQ_KEY": u, "WAIT": "true"})
        assert wire_properties(m, u) == old.encode()
    assert any(m.properties_text for m in sample())
    codes = {code for sent in seen["submit"].values() for code, _b, _e in sent}
    assert (320 in codes) == (batch > 1) and len(seen["submit"]) == 3


names = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "REDIS_DB", "", "A\x01", "B\x02", "x"])
texts = st.text(alphabet=st.sampled_from("ab \x01\x02é"), max_size=4)


@given(
    keys=texts,
    tags=texts,
    props=st.dictionaries(names, texts, max_size=4),
    uniq=st.sampled_from(["0" * 32, "F" * 32]),
)
def test_wire_properties_is_encode_properties(
    keys: str, tags: str, props: dict[str, str], uniq: str
) -> None:
    m = OutMessage(TOPIC, 0, b"", tags, keys, props, 0)
    try:
        old: bytes | str = encode_properties(m, {"UNIQ_KEY": uniq, "WAIT": "true"}).encode()
    except MessageRejected as exc:
        old = str(exc)
    try:
        new: bytes | str = wire_properties(m, uniq)
    except MessageRejected as exc:
        new = str(exc)
    assert new == old


def msg(i: int, queue: int = 0) -> OutMessage:
    return OutMessage(TOPIC, queue, f"body-{i}".encode(), "SET", f"k{i}", {}, i)


def test_one_confirmation_after_every_message_of_the_run() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        future = await sink.submit_many([msg(i, i % 3) for i in range(30)])
        await broker.wait_received(30)
        assert not future.done()
        broker.release()
        assert await future == 30
        assert [sink.confirmed(TOPIC, q) for q in range(3)] == [10, 10, 10]
        assert sink.confirmed_offset(TOPIC, 0) == 27 and sink.unconfirmed() == 0
        assert await (await sink.submit_many([])) == 0

    run(t, decide=lambda r: None, queues=3)


def test_a_run_over_the_in_flight_bound_goes_in_pieces() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        assert await (await sink.submit_many([msg(i, i % 2) for i in range(50)])) == 50
        assert [r.body for r in broker.received if r.queue_id == 0] == [
            f"body-{i}".encode() for i in range(0, 50, 2)
        ]

    run(t, max_in_flight=3)


def test_a_failed_queue_fails_the_run_and_later_runs() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        future = await sink.submit_many([msg(i, i % 2) for i in range(10)])
        with pytest.raises(SendFailed):
            await future
        with pytest.raises(QueueFailed):
            await sink.submit_many([msg(11, 0), msg(12, 1)])

    run(t, decide=lambda r: 13 if r.queue_id == 1 else 0)  # 13: MESSAGE_ILLEGAL, for good


def test_a_bad_message_refuses_the_run_before_any_is_queued() -> None:
    async def t(broker: FakeBroker, sink: RocketMQSink) -> None:
        bad = OutMessage(TOPIC, 1, b"x", "SET", "", {"UNIQ_KEY": "mine"}, 1)
        with pytest.raises(MessageRejected):
            await sink.submit_many([msg(0), bad])
        with pytest.raises(MessageRejected):
            await sink.submit_many([msg(0), msg(1, queue=9)])
        assert sink.unconfirmed() == 0
        assert await (await sink.submit_many([msg(2)])) == 1
        assert [r.body for r in broker.received] == [b"body-2"]

    run(t)


def test_the_file_sink_confirms_a_run(tmp_path: Any) -> None:
    async def main() -> None:
        sink = FileSink(str(tmp_path / "out.jsonl"), {TOPIC: 2})
        await sink.start()
        assert await (await sink.submit_many([msg(i, i % 2) for i in range(5)])) == 5
        assert sink.confirmed(TOPIC, 0) == 3 and sink.confirmed(TOPIC, 1) == 2
        await sink.close()

    asyncio.run(main())
