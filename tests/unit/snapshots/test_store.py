"""Snapshot stores: file and in-memory, one contract (STYLE 8)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import snapshots
from snapshots import (
    FileSnapshotStore,
    InMemorySnapshotStore,
    SnapshotCorruptError,
    SnapshotMeta,
    SnapshotStore,
    encode_snapshot,
    snapshot_name,
)


def meta(offset: int) -> SnapshotMeta:
    return SnapshotMeta(cluster_id="c1", last_offset=offset, last_term=1, created_ms=offset)


def records(offset: int) -> list[tuple[str, bytes, bytes]]:
    return [("kv", b"k%d" % i, b"at %d" % offset) for i in range(5)]


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SnapshotStore:
    if request.param == "file":
        return FileSnapshotStore(tmp_path / "snaps", keep=3)
    return InMemorySnapshotStore(keep=3)


def flip(store: SnapshotStore, path: Path, position: int) -> None:
    if isinstance(store, FileSnapshotStore):
        data = bytearray(path.read_bytes())
        data[position] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        assert isinstance(store, InMemorySnapshotStore)
        data = bytearray(store.raw(path))
        data[position] ^= 0x01
        store.put_raw(path, bytes(data))


def test_empty_store(store: SnapshotStore) -> None:
    assert store.list() == [] and store.latest() is None
    assert store.delete_older_than(10) == 0


def test_save_list_latest_open(store: SnapshotStore) -> None:
    for offset in (10, 30, 20):
        info = store.save(meta(offset), records(offset))
        assert info.path is not None and info.path.name == snapshot_name(offset)
    assert [i.last_offset for i in store.list()] == [30, 20, 10]
    latest = store.latest()
    assert latest is not None and latest.name == "00000000000000000030.snap"
    with store.open(latest) as reader:
        assert list(reader.iter_records()) == records(30)


def test_save_prunes_to_keep(store: SnapshotStore) -> None:
    for offset in range(1, 7):
        store.save(meta(offset), records(offset))
    assert [i.last_offset for i in store.list()] == [6, 5, 4]


def test_delete_older_than(store: SnapshotStore) -> None:
    for offset in (10, 20, 30):
        store.save(meta(offset), records(offset))
    assert store.delete_older_than(30) == 2
    assert [i.last_offset for i in store.list()] == [30]


def test_latest_falls_back_past_a_corrupt_snapshot(
    store: SnapshotStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.save(meta(10), records(10))
    newest = store.save(meta(20), records(20))
    assert newest.path is not None
    flip(store, newest.path, newest.size_bytes - 30)  # inside a record: the header is intact
    with caplog.at_level(logging.WARNING, logger="snapshots"):
        latest = store.latest()
    assert latest is not None and latest.name == snapshot_name(10)
    assert any(snapshot_name(20) in r.getMessage() for r in caplog.records)
    assert [i.last_offset for i in store.list()] == [20, 10]  # list reads headers only
    with pytest.raises(SnapshotCorruptError), store.open(newest.path) as reader:
        reader.verify()


def test_list_skips_a_damaged_header(store: SnapshotStore) -> None:
    store.save(meta(10), records(10))
    newest = store.save(meta(20), records(20))
    assert newest.path is not None
    flip(store, newest.path, 40)  # inside the header frame
    assert [i.last_offset for i in store.list()] == [10]
    with pytest.raises(SnapshotCorruptError):
        store.open(newest.path)


def test_all_corrupt_means_none(store: SnapshotStore) -> None:
    info = store.save(meta(10), records(10))
    assert info.path is not None
    flip(store, info.path, 50)
    assert store.latest() is None


def test_a_failed_save_changes_nothing(store: SnapshotStore) -> None:
    store.save(meta(10), records(10))

    def failing() -> Iterator[tuple[str, bytes, bytes]]:
        yield ("kv", b"a", b"b")
        raise OSError("disk on fire")

    with pytest.raises(OSError):
        store.save(meta(20), lambda: failing())
    assert [i.last_offset for i in store.list()] == [10]


def test_bad_keep() -> None:
    with pytest.raises(ValueError):
        InMemorySnapshotStore(keep=0)
    with pytest.raises(ValueError):
        FileSnapshotStore("/nonexistent-never-created", keep=0)


def test_file_store_removes_leftover_temp_files_and_ignores_strangers(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path, keep=2)
    store.save(meta(10), records(10))
    data, _ = encode_snapshot(meta(20), records(20))
    leftover = tmp_path / f".{snapshot_name(20)}.abc123.tmp"
    leftover.write_bytes(data[: len(data) // 2])
    (tmp_path / "notes.txt").write_text("hello")
    assert [i.last_offset for i in store.list()] == [10]
    assert store.latest() == tmp_path / snapshot_name(10)
    FileSnapshotStore(tmp_path, keep=2)
    assert not leftover.exists() and (tmp_path / "notes.txt").exists()


def test_file_store_a_renamed_snapshot_is_corrupt(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path, keep=5)
    store.save(meta(10), records(10))
    store.save(meta(20), records(20))
    (tmp_path / snapshot_name(20)).rename(tmp_path / snapshot_name(30))
    assert [i.last_offset for i in store.list()] == [10]
    assert store.latest() == tmp_path / snapshot_name(10)


def test_file_store_is_a_snapshot_store(tmp_path: Path) -> None:
    stores: list[SnapshotStore] = [FileSnapshotStore(tmp_path), InMemorySnapshotStore()]
    assert len(stores) == 2


def test_exported_members() -> None:
    assert snapshots.__all__ == sorted(snapshots.__all__, key=lambda n: (not n.isupper(), n))
    for name in snapshots.__all__:
        assert hasattr(snapshots, name), name
