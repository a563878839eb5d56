"""Commit log and consume queues: appends across segment boundaries, reads, units, offsets."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from broker.store import MessageStore
from broker.store.consume_queue import UNIT_SIZE, tags_code
from rmq.message import BLANK_MAGIC, decode

from .conftest import SEG, msg, open_store


def test_append_and_read_across_segments(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    results = [store.put(msg(i)) for i in range(30)]
    assert [r.status for r in results] == ["PUT_OK"] * 30
    assert [r.queue_offset for r in results] == list(range(30))
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(names) > 3
    assert all(len(n) == 20 and int(n) % SEG == 0 for n in names)
    for name in names[:-1]:  # closed files have their fixed size and end in a blank record
        assert os.path.getsize(tmp_path / "commitlog" / name) == SEG
    for r in results:  # no record straddles a boundary
        assert r.physical_offset // SEG == (r.physical_offset + r.size - 1) // SEG
    got = store.get("T", 0, 0, 100)
    assert got.status == "FOUND" and got.next_offset == 30
    for i, raw in enumerate(got.messages):
        m = decode(raw)
        assert m.body == bytes([i]) * 100 and m.queue_offset == i
        assert m.physical_offset == results[i].physical_offset
        assert raw == store.log.read_record(
            results[i].physical_offset
        )  # bytes straight from the log
    store.close()


def test_blank_record_at_end_of_file(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    r = [store.put(msg(i)) for i in range(12)]
    first_in_second = next(x for x in r if x.physical_offset >= SEG)
    prev = r[r.index(first_in_second) - 1]
    blank_at = prev.physical_offset + prev.size
    raw = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    remaining, magic = struct.unpack_from(">ii", raw, blank_at)
    assert magic == BLANK_MAGIC and remaining == SEG - blank_at
    store.close()


def test_consume_queue_units_and_files(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), units=4)
    res = [store.put(msg(i, queue_id=1, tags="a" if i % 2 else "b")) for i in range(10)]
    qdir = tmp_path / "consumequeue" / "T" / "1"
    files = sorted(os.listdir(qdir))
    assert files == [f"{0:020d}", f"{80:020d}", f"{160:020d}"]
    raw = b"".join((qdir / f).read_bytes() for f in files)
    assert len(raw) == 10 * UNIT_SIZE
    for i, r in enumerate(res):
        off, size, code = struct.unpack_from(">qiq", raw, i * UNIT_SIZE)
        assert (off, size, code) == (r.physical_offset, r.size, tags_code("a" if i % 2 else "b"))
    assert store.max_offset("T", 1) == 10 and store.min_offset("T", 1) == 0
    assert store.max_offset("T", 0) == 0
    only_a = store.get("T", 1, 0, 32, tags={"a"})
    assert [decode(m).queue_offset for m in only_a.messages] == [1, 3, 5, 7, 9]
    page = store.get("T", 1, 3, 4)
    assert [decode(m).queue_offset for m in page.messages] == [3, 4, 5, 6] and page.next_offset == 7
    assert store.get("T", 1, 10, 4).status == "OFFSET_OVERFLOW_ONE"
    assert store.get("T", 1, 11, 4).status == "OFFSET_OVERFLOW_BADLY"
    assert store.get("X", 0, 0, 4).status == "NO_MATCHED_LOGIC_QUEUE"
    store.close()


def test_reopen_keeps_offsets_and_search_by_time(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    for i in range(5):
        store.put(msg(i)._replace(store_timestamp=1000 + 10 * i))
    store.close()
    store = MessageStore(str(tmp_path), store.config)
    assert store.max_offset("T", 0) == 5
    assert store.put(msg(5)).queue_offset == 5
    assert store.search_offset_by_timestamp("T", 0, 1015) == 2
    assert store.search_offset_by_timestamp("T", 0, 0) == 0
    store.close()


def test_tags_code_is_javas_string_hashcode() -> None:
    """Java clients send their subscriptions' tags as String.hashCode values (codeSet)."""
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("polygenelubricants") == -(2**31)  # Java's Integer.MIN_VALUE
    assert tags_code("é") == 233  # one UTF-16 code unit
