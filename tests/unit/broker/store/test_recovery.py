"""Crash recovery: torn tails are cut, corruption in the middle stops with file and byte."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from broker.store import MessageStore, PutResult, StoreCorruptionError
from rmq.message import decode

from .conftest import msg, open_store


def _crash(store: MessageStore) -> None:
    """Drop the store as a kill -9 would: no checkpoint, no flush of consume queues."""
    store._flusher._stop.set()
    for cq in store._cqs.values():
        cq.close()
    store.log.close()


def _filled(root: Path, n: int) -> list[PutResult]:
    store = open_store(str(root))
    res = [store.put(msg(i, size=60 + i)) for i in range(n)]
    _crash(store)
    return res


def _file_of(root: Path, phys: int, seg: int = 1024) -> tuple[Path, int]:
    start = phys - phys % seg
    return root / "commitlog" / f"{start:020d}", phys - start


def test_torn_tail_cut_at_every_byte_of_last_message(tmp_path: Path) -> None:
    base = tmp_path / "base"
    res = _filled(base, 14)
    last = res[-1]
    path_rel, pos = _file_of(base, last.physical_offset)
    for cut in range(last.size):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(base, root)
        with open(root / path_rel.relative_to(base), "r+b") as f:
            f.truncate(pos + cut)
        store = open_store(str(root))
        assert store.log.end_offset == last.physical_offset
        assert store.max_offset("T", 0) == 13  # the unit of the cut record is dropped
        got = store.get("T", 0, 0, 100)
        assert [decode(m).body for m in got.messages] == [bytes([i]) * (60 + i) for i in range(13)]
        again = store.put(msg(99))
        assert (again.physical_offset, again.queue_offset) == (last.physical_offset, 13)
        store.close()
        shutil.rmtree(root)


def test_flipped_byte_in_middle_message_is_corruption(tmp_path: Path) -> None:
    res = _filled(tmp_path, 14)
    victim = res[3]
    path, pos = _file_of(tmp_path, victim.physical_offset)
    data = bytearray(path.read_bytes())
    data[pos + 90] ^= 0xFF  # inside the body: the CRC no longer matches
    path.write_bytes(bytes(data))
    size_before = os.path.getsize(path)
    with pytest.raises(StoreCorruptionError) as err:
        open_store(str(tmp_path))
    assert err.value.path == str(path) and err.value.position == pos
    assert str(path) in str(err.value) and f"byte {pos}" in str(err.value)
    assert os.path.getsize(path) == size_before  # nothing cut


def test_corruption_before_a_later_segment_is_not_a_tail(tmp_path: Path) -> None:
    res = _filled(tmp_path, 14)
    last_in_first = max(
        (r for r in res if r.physical_offset < 1024), key=lambda r: r.physical_offset
    )
    path, pos = _file_of(tmp_path, last_in_first.physical_offset)
    data = bytearray(path.read_bytes())
    data[pos + 4] ^= 0x01  # magic of the last record of the first file
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptionError, match=f"byte {pos}"):
        open_store(str(tmp_path))


def test_consume_queues_rebuilt_from_commitlog(tmp_path: Path) -> None:
    res = _filled(tmp_path, 10)
    shutil.rmtree(tmp_path / "consumequeue")
    os.makedirs(tmp_path / "consumequeue")
    store = open_store(str(tmp_path))
    assert store.max_offset("T", 0) == 10
    assert [decode(m).physical_offset for m in store.get("T", 0, 0, 20).messages] == [
        r.physical_offset for r in res
    ]
    store.close()


def test_cut_below_acknowledged_checkpoint_is_corruption(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    res = [store.put(msg(i)) for i in range(5)]
    store.close()  # checkpoint: everything durable
    path, pos = _file_of(tmp_path, res[-1].physical_offset)
    with open(path, "r+b") as f:
        f.truncate(pos + 10)
    with pytest.raises(StoreCorruptionError, match="durable"):
        open_store(str(tmp_path))


def test_clean_reopen_scans_from_checkpoint(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    for i in range(20):
        store.put(msg(i))
    store.close()
    seen: list[int] = []
    from broker.store.recovery import Checkpoint, recover

    store2 = open_store(str(tmp_path))
    cp = Checkpoint.load(str(tmp_path / "checkpoint"))
    assert cp.physic == store2.log.end_offset
    recover(store2.log, cp, lambda phys, m: seen.append(phys))
    assert seen and min(seen) >= cp.physic - cp.physic % 1024  # only the last segment is rescanned
    store2.close()


def test_consume_queues_rebuilt_after_clean_stop(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    res = [store.put(msg(i, queue_id=i % 2)) for i in range(12)]
    store.close()  # the checkpoint says the queues were dispatched up to the end
    shutil.rmtree(tmp_path / "consumequeue" / "T" / "1")
    store = open_store(str(tmp_path))
    assert store.max_offset("T", 1) == 6
    assert [decode(m).physical_offset for m in store.get("T", 1, 0, 20).messages] == [
        r.physical_offset for r in res[1::2]
    ]
    store.close()


def test_consume_queue_missing_its_tail_units_is_redispatched(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), units=100)
    for i in range(6):
        store.put(msg(i))
    store.put(msg(9, topic="U"))
    store.close()
    qfile = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    with open(qfile, "r+b") as f:
        f.truncate(2 * 20)  # lost 4 units the checkpoint counted as dispatched
    store = open_store(str(tmp_path), units=100)
    assert store.max_offset("T", 0) == 6 and store.max_offset("U", 0) == 1
    store.close()
