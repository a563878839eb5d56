"""The store feeds its index (puts, replicated bytes, recovery) and lookups read what the
index points at: only whole records of the asked topic holding the key."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from broker.lookup.query import query_messages, record_at
from broker.store import DecodeError, FlushMode, MessageStore, RetentionPolicy
from broker.store.recovery import Checkpoint
from rmq.message import StoredMessage, decode
from tests.unit.broker.store.conftest import open_store

ALL = (0, 2**62)


def keyed(i: int, keys: str, topic: str = "T", size: int = 60) -> StoredMessage:
    props = {"KEYS": keys, "UNIQ_KEY": f"U{i:04d}"}
    return StoredMessage(topic=topic, body=bytes([i % 256]) * size, properties=props)


def _bodies(store: MessageStore, topic: str, key: str, unique: bool = False) -> list[int]:
    records, _hits = query_messages(store, topic, key, 64, *ALL, unique=unique)
    return [decode(r).body[0] for r in records]


def test_put_then_query_by_key_and_by_uniq_key(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), segment_size=4096)
    for i in range(12):
        assert store.put(keyed(i, f"k{i % 3} all", topic=f"T{i % 2}")).status == "PUT_OK"
    assert _bodies(store, "T0", "k0") == [0, 6]
    assert _bodies(store, "T0", "all") == [0, 2, 4, 6, 8, 10]
    assert _bodies(store, "T1", "U0005", unique=True) == [5]
    assert _bodies(store, "T0", "U0005", unique=True) == []  # another topic's
    assert _bodies(store, "T1", "k0", unique=True) == []  # a key is not a unique key
    records, hits = query_messages(store, "T0", "nope", 64, *ALL)
    assert records == [] and hits.last_phy_offset > 0 and hits.last_timestamp > 0
    store.close()


def test_record_at_serves_only_a_whole_record_starting_there(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), segment_size=4096)
    r = store.put(keyed(1, "k"))
    found = record_at(store, r.physical_offset)
    assert found is not None and decode(found[0]).properties["KEYS"] == "k"
    for bad in (r.physical_offset + 1, r.physical_offset + 4, -5, 10**12, store.log.end_offset):
        assert record_at(store, bad) is None
    assert record_at(store, r.physical_offset, limit=r.physical_offset + 10) is None
    store.close()


def test_restart_rebuilds_what_the_checkpoint_did_not_cover(tmp_path: Path) -> None:
    root = str(tmp_path)
    store = open_store(root, segment_size=4096)
    for i in range(5):
        store.put(keyed(i, "k"))
    store.close()  # a clean stop: the checkpoint covers everything
    again = open_store(root, segment_size=4096)
    assert _bodies(again, "T", "k") == [0, 1, 2, 3, 4]
    again.close()
    # a store from before the index: no index files, a checkpoint without the index offset
    for name in os.listdir(os.path.join(root, "index")):
        os.unlink(os.path.join(root, "index", name))
    cp = Checkpoint.load(os.path.join(root, "checkpoint"))
    Checkpoint(cp.physic, cp.logics, 0).save(os.path.join(root, "checkpoint"))
    rebuilt = open_store(root, segment_size=4096)
    assert _bodies(rebuilt, "T", "k") == [0, 1, 2, 3, 4]
    assert _bodies(rebuilt, "T", "U0003", unique=True) == [3]
    rebuilt.close()


def test_a_slave_indexes_replicated_bytes_split_anywhere(tmp_path: Path) -> None:
    master = open_store(str(tmp_path / "m"), FlushMode.ASYNC_FLUSH, segment_size=1024)
    slave = open_store(str(tmp_path / "s"), FlushMode.ASYNC_FLUSH, segment_size=1024)
    for i in range(20):
        master.put(keyed(i, f"k{i % 2}", size=40 + i))
    while (end := slave.log.end_offset) < master.log.end_offset:
        slave.append_replicated(end, master.read_log(end, 97))
    assert _bodies(slave, "T", "k1") == list(range(1, 20, 2))
    assert _bodies(slave, "T", "U0007", unique=True) == [7]
    master.close()
    slave.close()


def test_a_truncated_record_is_not_served_and_its_offset_is_indexed_again(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), segment_size=4096)
    store.put(keyed(0, "a"))
    cut = store.put(keyed(1, "b")).physical_offset
    store.truncate(cut)
    assert _bodies(store, "T", "b") == []
    assert store.put(keyed(2, "c")).physical_offset == cut
    assert _bodies(store, "T", "c") == [2]
    assert _bodies(store, "T", "a") == [0]
    store.close()


def test_retention_trims_index_files_below_the_log(tmp_path: Path) -> None:
    from broker.store import StoreConfig
    from broker.store.index import IndexConfig

    cfg = StoreConfig(
        segment_size=1024,
        flush_mode=FlushMode.SYNC_FLUSH,
        flush_interval_ms=60_000,
        index=IndexConfig(hash_slots=5, entries_per_file=5),
    )
    store = MessageStore(str(tmp_path), cfg)
    for i in range(30):
        store.put(keyed(i, "k", size=100))
    files = lambda: sorted(n for n in os.listdir(tmp_path / "index") if n.isdigit())  # noqa: E731
    before = files()
    assert store.delete_expired(RetentionPolicy(max_total_bytes=2048)) > 0
    assert len(files()) < len(before)
    left = _bodies(store, "T", "k")
    assert left and left == sorted(left) and left[-1] == 29
    store.close()


def test_no_index_configured_answers_nothing(tmp_path: Path) -> None:
    from broker.store import StoreConfig

    store = MessageStore(str(tmp_path), StoreConfig(segment_size=4096, index=None))
    store.put(keyed(0, "k"))
    assert query_messages(store, "T", "k", 64, *ALL)[0] == []
    assert not os.path.exists(tmp_path / "index")
    store.close()


def test_a_replicated_frame_cut_at_a_bad_record_indexes_the_good_ones(tmp_path: Path) -> None:
    master = open_store(str(tmp_path / "m"), FlushMode.ASYNC_FLUSH, segment_size=4096)
    slave = open_store(str(tmp_path / "s"), FlushMode.ASYNC_FLUSH, segment_size=4096)
    for i in range(3):
        master.put(keyed(i, "k"))
    data = bytearray(master.read_log(0, 4096))
    third = record_offsets(master)[2]
    data[third + 4 : third + 8] = b"\x00\x00\x00\x00"  # the third record's magic
    with pytest.raises(DecodeError):
        slave.append_replicated(0, bytes(data))
    assert _bodies(slave, "T", "k") == [0, 1]
    master.close()
    slave.close()


def record_offsets(store: MessageStore) -> list[int]:
    records, _ = query_messages(store, "T", "k", 64, *ALL)
    return [decode(r).physical_offset for r in records]


def test_an_index_file_the_disk_cannot_hold_never_fails_a_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mp = monkeypatch
    real = os.posix_fallocate

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    store = open_store(str(tmp_path), segment_size=4096)
    mp.setattr(os, "posix_fallocate", full)
    assert store.put(keyed(0, "k")).status == "PUT_OK"  # no index file: left out, logged
    assert store.index is not None and store.index.failing
    mp.setattr(os, "posix_fallocate", real)
    assert store.put(keyed(1, "k")).status == "PUT_OK"  # the disk has room again
    assert not store.index.failing
    assert _bodies(store, "T", "k") == [1]
    store.close()
