"""The spool between the socket reader and the pipeline: order kept across memory and disk,
memory bounded, the reader never waits, the consumer waits for data and sees the end."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.redis.protocol import (
    Continue,
    Event,
    FullSync,
    GetAck,
    RdbBegin,
    RdbChunk,
    RdbEnd,
    StreamCommand,
)
from replicator.redis.spool import EventSpool, Spool, decode_event, encode_event


def drain(s: Spool, step: int) -> bytes:
    out = bytearray()
    while chunk := s.get_nowait(step):
        out += chunk
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(min_size=0, max_size=300), st.integers(0, 3)), min_size=1, max_size=40
    ),
    st.integers(1, 200),
    st.integers(1, 500),
)
def test_bytes_come_out_in_order_whatever_the_interleaving(
    steps: list[tuple[bytes, int]], step: int, limit: int
) -> None:
    s = Spool(memory_limit=limit)
    want, got = bytearray(), bytearray()
    for data, takes in steps:
        s.put(data)
        want += data
        assert s._mem_bytes <= limit
        for _ in range(takes):
            got += s.get_nowait(step)
    got += drain(s, step)
    assert bytes(got) == bytes(want)
    assert s.buffered == 0 and s.on_disk == 0


def test_past_the_memory_limit_data_goes_to_disk_and_memory_is_used_again_after(
    tmp_path: Path,
) -> None:
    s = Spool(tmp_path, memory_limit=1000)
    for i in range(10):
        s.put(bytes([i]) * 400)
    assert s._mem_bytes <= 1000 and s.on_disk == 4000 - s._mem_bytes
    assert s.spilled_bytes == s.on_disk
    assert os.listdir(tmp_path) == []  # the spill file is unlinked at once
    assert drain(s, 333) == b"".join(bytes([i]) * 400 for i in range(10))
    s.put(b"x")
    assert s.on_disk == 0 and s.buffered == 1


def test_get_waits_for_data_and_sees_the_end() -> None:
    async def main() -> list[bytes]:
        s = Spool(memory_limit=10)
        got: list[bytes] = []

        async def consume() -> None:
            while chunk := await s.get(4):
                got.append(chunk)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0)
        s.put(b"abcdef")
        s.put(b"0123456789")  # spills
        await asyncio.sleep(0)
        s.close()
        await asyncio.wait_for(task, 5)
        return got

    got = asyncio.run(main())
    assert b"".join(got) == b"abcdef0123456789"
    assert all(len(c) <= 4 for c in got)


EVENTS = [
    FullSync("a" * 40, 1000),
    RdbBegin(None),
    RdbBegin(12),
    RdbChunk(b"REDIS0010" + bytes(range(256))),
    RdbEnd(),
    Continue(None),
    Continue("b" * 40),
    StreamCommand([b"SET", b"k\r\n", b""], 1000, 1031),
    StreamCommand([], 5, 5),
    GetAck(),
]


def test_every_event_survives_the_spill_file() -> None:
    for e in EVENTS:
        frame = encode_event(e)
        assert decode_event(memoryview(frame)[4:]) == e


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(EVENTS), max_size=60), st.integers(64, 2000), st.integers(0, 5))
def test_events_come_out_in_order_across_memory_and_disk(
    events: list[Event], limit: int, every: int
) -> None:
    q = EventSpool(memory_limit=limit)
    got: list[Event] = []
    for i, e in enumerate(events):
        q.put(e)
        assert q.memory_bytes <= limit
        if every and i % every == 0:
            got.append(q.get_nowait())  # type: ignore[arg-type]
    while (e := q.get_nowait()) is not None:
        got.append(e)
    assert got == events and len(q) == 0 and q.disk_bytes == 0


def test_event_spool_get_waits_and_ends_after_close() -> None:
    async def main() -> list[Event | None]:
        q = EventSpool(memory_limit=100)
        out: list[Event | None] = []

        async def consume() -> None:
            while True:
                e = await q.get()
                out.append(e)
                if e is None:
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0)
        for e in EVENTS:
            q.put(e)
        q.close()
        await asyncio.wait_for(task, 5)
        return out

    assert asyncio.run(main()) == [*EVENTS, None]
