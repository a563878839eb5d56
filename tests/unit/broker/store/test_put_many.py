"""MessageStore.put_many: several requests' messages under one lock hold and one write."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from broker.store import DiskFullError, FlushMode
from rmq.message import MAX_BODY, StoredMessage, decode
from tests.unit.broker.store.conftest import msg, open_store


def test_batch_across_a_segment_roll_keeps_offsets_dense_and_records_exact(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    requests = [[msg(i, queue_id=i % 2)] for i in range(12)]  # ~170-byte records, 1 KiB files
    results = store.put_many(requests)
    assert [len(r) for r in results] == [1] * 12
    flat = [r[0] for r in results]
    assert all(r.status == "PUT_OK" for r in flat)
    assert [r.queue_offset for r in flat] == [i // 2 for i in range(12)]
    offsets = [r.physical_offset for r in flat]
    assert offsets == sorted(offsets) and len(store.log.segments()) > 1
    for q in (0, 1):
        got = [decode(m) for m in store.get("T", q, 0, 100).messages]
        want = [r for i, r in enumerate(flat) if i % 2 == q]
        assert [m.physical_offset for m in got] == [r.physical_offset for r in want]
        assert [m.queue_offset for m in got] == [r.queue_offset for r in want]
    store.close()
    store = open_store(str(tmp_path))  # recovery agrees
    assert store.max_offset("T", 0) == store.max_offset("T", 1) == 6
    store.close()


def test_a_refused_message_ends_its_request_only(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    big = StoredMessage(topic="T", body=b"x" * (MAX_BODY + 1))
    first, second = store.put_many([[msg(1), big, msg(2)], [msg(3)]])
    assert [r.status for r in first] == ["PUT_OK", "MESSAGE_ILLEGAL"]
    assert [(r.status, r.queue_offset) for r in second] == [("PUT_OK", 1)]
    bodies = [decode(m).body for m in store.get("T", 0, 0, 10).messages]
    assert bodies == [msg(1).body, msg(3).body]  # msg(2) was not stored
    store.close()


def test_disk_full_refuses_the_whole_write_and_keeps_earlier_records(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), segment_size=1 << 20)
    kept = store.put(msg(0))

    def full_disk(fd: int, data: bytes, pos: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    store.log.pwrite = full_disk
    results = store.put_many([[msg(1)], [msg(2), msg(3)]])
    assert results == [[results[0][0]], [results[1][0]]]
    assert {r[0].status for r in results} == {DiskFullError.send_status}
    assert store.log.end_offset == kept.physical_offset + kept.size
    store.log.pwrite = os.pwrite
    ((r,),) = store.put_many([[msg(4)]])
    assert r.status == "PUT_OK" and r.queue_offset == 1
    store.close()


def test_sync_flush_durability_is_left_to_the_caller_when_asked(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), mode=FlushMode.SYNC_FLUSH, segment_size=1 << 20)
    syncs: list[int] = []
    store.log.fdatasync = lambda fd: syncs.append(fd)
    ((r,),) = store.put_many([[msg(1)]], wait_durable=False)
    assert syncs == [] and store.log.durable_offset < r.physical_offset + r.size
    store.wait_durable(r.physical_offset + r.size)
    assert len(syncs) == 1 and store.log.durable_offset == r.physical_offset + r.size
    store.put(msg(2))  # the default waits
    assert len(syncs) == 2
    store.close()


def test_a_failed_queue_write_cuts_the_batch_back_to_its_first_record_without_a_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(str(tmp_path), segment_size=1 << 20)
    store.put_many([[msg(0, queue_id=0)], [msg(0, queue_id=1)]])  # both queues exist
    full = store._cq("T", 1)

    def no_space(*args: object, **kw: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(full, "append_many", no_space)
    first, second, third = store.put_many(
        [[msg(1, queue_id=0)], [msg(2, queue_id=1)], [msg(3, queue_id=0)]]
    )
    assert first[0].status == "PUT_OK"
    assert second[0].status == third[0].status == DiskFullError.send_status
    assert store.log.end_offset == first[0].physical_offset + first[0].size
    assert store.max_offset("T", 0) == 2 and store.max_offset("T", 1) == 1  # msg 3's unit cut
    monkeypatch.undo()
    ((again,),) = store.put_many([[msg(4, queue_id=0)]])
    assert (again.status, again.queue_offset) == ("PUT_OK", 2)
    assert again.physical_offset == store.log.end_offset - again.size
    assert [decode(m).body for m in store.get("T", 0, 0, 10).messages] == [
        msg(0).body,
        msg(1).body,
        msg(4).body,
    ]
    store.close()


def test_queue_offsets_stay_dense_per_queue_when_requests_switch_between_queues(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    big = StoredMessage(topic="U", body=b"x" * (MAX_BODY + 1), queue_id=1)

    def m(i: int, topic: str, q: int) -> StoredMessage:
        return msg(i, topic, q)

    requests = [
        [m(0, "T", 0), m(1, "T", 0), m(2, "U", 1), m(3, "T", 0)],
        [m(4, "U", 1), big, m(5, "T", 0)],  # refused at ``big``: m(5) is not stored
        [m(6, "T", 1), m(7, "U", 1), m(8, "T", 0)],
    ]
    results = store.put_many(requests)
    got = [[(r.status, r.queue_offset) for r in rs] for rs in results]
    assert got == [
        [("PUT_OK", 0), ("PUT_OK", 1), ("PUT_OK", 0), ("PUT_OK", 2)],
        [("PUT_OK", 1), ("MESSAGE_ILLEGAL", -1)],
        [("PUT_OK", 0), ("PUT_OK", 2), ("PUT_OK", 3)],
    ]
    for topic, q, want in (("T", 0, [0, 1, 3, 8]), ("U", 1, [2, 4, 7]), ("T", 1, [6])):
        bodies = [decode(x).body for x in store.get(topic, q, 0, 10).messages]
        assert bodies == [msg(i).body for i in want], (topic, q)
    store.close()
