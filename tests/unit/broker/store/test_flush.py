"""SYNC_FLUSH answers only after fdatasync (group commit); ASYNC_FLUSH syncs on a timer."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from broker.store import FlushMode, MessageStore, StoreConfig

from .conftest import msg, open_store


def test_sync_flush_acknowledges_after_fdatasync(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), segment_size=1 << 20)
    covered: list[int] = []

    def fake_fdatasync(fd: int) -> None:
        end = store.log.end_offset
        os.fdatasync(fd)
        covered.append(end)

    store.log.fdatasync = fake_fdatasync
    for i in range(5):
        r = store.put(msg(i))
        assert len(covered) == i + 1  # one sync per lone put, done before the answer
        assert covered[-1] >= r.physical_offset + r.size
        assert store.log.durable_offset >= r.physical_offset + r.size
    store.close()


def test_sync_flush_group_commit_shares_fdatasync(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), segment_size=1 << 20)
    covered: list[int] = []
    lock = threading.Lock()

    def slow_fdatasync(fd: int) -> None:
        end = store.log.end_offset
        time.sleep(0.05)
        with lock:
            covered.append(end)

    store.log.fdatasync = slow_fdatasync
    errors: list[str] = []

    def worker(i: int) -> None:
        r = store.put(msg(i))
        with lock:
            if not any(c >= r.physical_offset + r.size for c in covered):
                errors.append(f"put {i} answered before its bytes were synced")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert 1 <= len(covered) < 16  # appends arriving during a sync share the next one
    store.close()


def test_async_flush_syncs_in_background_and_checkpoints(tmp_path: Path) -> None:
    store = MessageStore(
        str(tmp_path),
        StoreConfig(segment_size=4096, flush_mode=FlushMode.ASYNC_FLUSH, flush_interval_ms=20),
    )
    calls: list[int] = []
    release = threading.Event()

    def held_fdatasync(fd: int) -> None:  # no sync completes until released
        calls.append(fd)
        release.wait(10)

    store.log.fdatasync = held_fdatasync
    r = store.put(msg(1))
    # answered after the write, not after a sync: none could have completed yet
    assert store.log.durable_offset < r.physical_offset + r.size
    release.set()
    deadline = time.monotonic() + 5

    def done() -> bool:  # the checkpoint is written just after the sync it records
        synced = store.log.durable_offset >= r.physical_offset + r.size
        return synced and os.path.exists(tmp_path / "checkpoint")

    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.log.durable_offset >= r.physical_offset + r.size and calls
    assert os.path.exists(tmp_path / "checkpoint")
    store.close()
