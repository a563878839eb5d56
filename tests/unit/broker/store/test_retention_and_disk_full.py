"""Retention deletes whole old segments (never the active one); ENOSPC refuses a put, loses nothing."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from broker.store import DiskFullError, RetentionPolicy
from rmq.message import decode

from .conftest import SEG, msg, open_store


def test_retention_by_size_and_age_never_the_active_file(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    for i in range(40):
        store.put(msg(i))
    segs = store.log.segments()
    assert len(segs) >= 5
    assert store.delete_expired(RetentionPolicy(max_total_bytes=3 * SEG)) == len(segs) - 3
    assert [s.start for s in store.log.segments()] == [s.start for s in segs[-3:]]
    lo = store.min_offset("T", 0)
    assert lo > 0
    first = decode(store.get("T", 0, lo, 1).messages[0])
    assert first.physical_offset >= store.log.min_offset
    assert store.get("T", 0, 0, 1).status == "OFFSET_TOO_SMALL"
    old = time.time() - 3600
    for s in store.log.segments():
        os.utime(s.path, (old, old))
    assert store.delete_expired(RetentionPolicy(max_age_s=60)) == 2
    assert len(store.log.segments()) == 1  # the active file stays however old
    assert store.put(msg(99)).status == "PUT_OK"
    store.close()
    reopened = open_store(str(tmp_path))
    assert reopened.min_offset("T", 0) > lo and reopened.max_offset("T", 0) == 41
    reopened.close()


@pytest.mark.parametrize("fail_at", [0, 3, 9, 11])
def test_enospc_refuses_put_and_keeps_acknowledged(tmp_path: Path, fail_at: int) -> None:
    store = open_store(str(tmp_path))
    ok = [store.put(msg(i)) for i in range(fail_at)]
    calls = {"n": 0}

    def full_disk(fd: int, data: bytes, pos: int) -> int:
        calls["n"] += 1
        os.pwrite(fd, data[: len(data) // 2], pos)  # a partial write, then the error
        raise OSError(errno.ENOSPC, "No space left on device")

    store.log.pwrite = full_disk
    for _ in range(3):
        r = store.put(msg(200))
        assert r.status == DiskFullError.send_status == "SERVICE_NOT_AVAILABLE"
    assert calls["n"] == 3
    got = store.get("T", 0, 0, 100)  # reads keep working
    assert [decode(m).physical_offset for m in got.messages] == [r.physical_offset for r in ok]
    store.log.pwrite = os.pwrite  # space returns
    r = store.put(msg(7))
    assert r.status == "PUT_OK" and r.queue_offset == fail_at
    store.log.close()  # crash: every acknowledged message survives recovery
    store = open_store(str(tmp_path))
    assert store.max_offset("T", 0) == fail_at + 1
    assert decode(store.get("T", 0, fail_at, 1).messages[0]).body == msg(7).body
    store.close()


def test_enospc_in_consume_queue_rolls_back_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(str(tmp_path))
    first = store.put(msg(1))

    def full(*a: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    assert store.put(msg(2)).status == "SERVICE_NOT_AVAILABLE"
    monkeypatch.undo()
    assert store.log.end_offset == first.physical_offset + first.size
    assert store.put(msg(3)).queue_offset == 1
    store.close()


def test_enospc_creating_next_segment_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(str(tmp_path))
    res = [store.put(msg(i)) for i in range(8)]
    real_open = os.open

    def no_new_files(path: str, flags: int, *a: int) -> int:
        if flags & os.O_CREAT and "commitlog" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", no_new_files)
    statuses = [store.put(msg(50)).status for _ in range(20)]
    n_ok = statuses.index("SERVICE_NOT_AVAILABLE")
    assert set(statuses[n_ok:]) == {"SERVICE_NOT_AVAILABLE"}  # the file filled up, no next one
    assert set(statuses[:n_ok]) <= {"PUT_OK"}
    monkeypatch.undo()
    assert os.path.getsize(store.log.segments()[-1].path) == SEG  # closed by its blank record
    r = store.put(msg(51))
    assert r.status == "PUT_OK" and r.queue_offset == 8 + n_ok
    store.close()
    store = open_store(str(tmp_path))
    got = store.get("T", 0, 0, 100)
    assert [decode(m).physical_offset for m in got.messages][: len(res)] == [
        x.physical_offset for x in res
    ]
    store.close()


def test_too_large_message_is_refused_with_a_status(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    assert store.put(msg(1, size=2 * SEG)).status == "UNKNOWN_ERROR"
    assert store.put(msg(2)).queue_offset == 0
    store.close()
