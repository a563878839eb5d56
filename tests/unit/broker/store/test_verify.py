"""Records leaving the store are checked (broker.store.verify): a byte flipped or a unit
gone wrong while the broker runs is refused, named (file and byte), and marks the store
damaged; nothing after that is served."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.store import DamagedRecordError, MessageStore, StoreError
from broker.store.consume_queue import Unit

from .conftest import SEG, msg, open_store


def _flip(store: MessageStore, physical: int) -> tuple[str, int]:
    """Flip one byte at commit-log ``physical``; (file, byte in it)."""
    path, at = store.log.locate(physical)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    return path, at


def _stored(tmp_path: Path, n: int = 6) -> tuple[MessageStore, list[int]]:
    store = open_store(str(tmp_path))
    offsets = [store.put(msg(i, size=60)).physical_offset for i in range(n)]
    return store, offsets


def test_a_flipped_body_byte_is_refused_named_and_marks_the_store_damaged(
    tmp_path: Path,
) -> None:
    store, offsets = _stored(tmp_path)
    seen: list[DamagedRecordError] = []
    store.guard.on_damage = seen.append
    assert len(store.get("T", 0, 0, 10).messages) == 6
    path, _ = _flip(store, offsets[3] + 100)  # inside the body
    with pytest.raises(DamagedRecordError, match="body CRC") as info:
        store.get("T", 0, 0, 10)
    assert info.value.path == path and info.value.position == offsets[3] % SEG
    assert seen == [info.value]
    # damaged: no read is served any more, even of good records, and the callback ran once
    with pytest.raises(DamagedRecordError):
        store.get("T", 0, 0, 1)
    with pytest.raises(DamagedRecordError):
        store.read_log(0, 100)
    assert len(seen) == 1
    store.close()


def test_a_unit_whose_size_disagrees_with_the_record_is_damage(tmp_path: Path) -> None:
    store, offsets = _stored(tmp_path, 2)
    store._cq("T", 0).append(2, Unit(offsets[0], 50, 0))  # size 50: not the record's
    with pytest.raises(DamagedRecordError, match="TOTALSIZE"):
        store.get("T", 0, 2, 1)
    store.close()


def test_a_unit_pointing_outside_the_commit_log_is_damage(tmp_path: Path) -> None:
    store, _ = _stored(tmp_path, 2)
    store._cq("T", 0).append(2, Unit(store.log.end_offset + 500, 80, 0))
    with pytest.raises(DamagedRecordError, match="run past"):
        store.get("T", 0, 2, 1)
    store.close()


def test_a_unit_pointing_inside_a_record_is_damage(tmp_path: Path) -> None:
    store, offsets = _stored(tmp_path, 2)
    size = offsets[1] - offsets[0]
    store._cq("T", 0).append(2, Unit(offsets[0] + 4, size, 0))
    with pytest.raises(DamagedRecordError):
        store.get("T", 0, 2, 1)
    store.close()


def test_the_ha_stream_does_not_carry_a_damaged_record(tmp_path: Path) -> None:
    store, offsets = _stored(tmp_path)
    end = store.log.end_offset
    assert store.read_log(offsets[2], 10_000)  # good: served
    _flip(store, offsets[4] + 90)
    with pytest.raises(DamagedRecordError, match="body CRC"):
        store.read_log(offsets[2], 10_000)
    assert store.guard.damaged is not None and end == store.log.end_offset
    store.close()


@pytest.mark.parametrize("chunk", [7, 33, 100, 150])
def test_a_damaged_record_cut_by_a_frame_is_found_in_any_frame_that_carries_it(
    tmp_path: Path, chunk: int
) -> None:
    store, offsets = _stored(tmp_path)
    _flip(store, offsets[3] + 95)
    at = 0
    with pytest.raises(DamagedRecordError):
        while at < store.log.end_offset:  # the frames a slave would ask for from 0
            data = store.read_log(at, chunk)
            at += len(data)
            assert at <= offsets[3], "a frame carried bytes of the damaged record"
    store.close()


def test_a_lookup_by_offset_refuses_damage_but_a_wrong_offset_is_not_damage(
    tmp_path: Path,
) -> None:
    store, offsets = _stored(tmp_path, 3)
    assert store.read_record(offsets[1])
    with pytest.raises(StoreError) as info:
        store.read_record(offsets[1] + 3)  # a request's offset that is no record start
    assert not isinstance(info.value, DamagedRecordError) and store.guard.damaged is None
    _flip(store, offsets[1] + 100)
    with pytest.raises(DamagedRecordError):
        store.read_record(offsets[1])
    store.close()


def test_a_read_raced_by_a_truncate_is_not_damage(tmp_path: Path) -> None:
    store, offsets = _stored(tmp_path, 3)
    guard = store.guard
    read_checked = store.log.read_checked

    def cut_then_read(offset: int, size: int) -> bytes:
        store.truncate(offsets[1])  # a slave cutting back to its master meanwhile
        return read_checked(offset, size)

    store.log.read_checked = cut_then_read  # type: ignore[method-assign]
    with pytest.raises(StoreError) as info:
        guard.record(offsets[2], 80)
    assert not isinstance(info.value, DamagedRecordError) and guard.damaged is None
    store.close()


def test_the_checks_leave_a_good_log_alone_across_segments(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    for i in range(40):  # several 1 KiB segments, closing blanks included
        store.put(msg(i, queue_id=i % 2, size=30 + 11 * i % 200))
    for q in (0, 1):
        assert len(store.get("T", q, 0, 100).messages) == 20
    at = store.log.min_offset
    while at < store.log.end_offset:
        at += len(store.read_log(at, 77)) or SEG - at % SEG
    assert store.guard.damaged is None
    assert os.path.isdir(tmp_path / "commitlog")
    store.close()
