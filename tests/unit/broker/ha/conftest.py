"""Helpers for the HA tests: small-segment stores, puts that wake the master, waits with deadlines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from broker.ha.epochs import EpochFile
from broker.ha.master import HAMaster
from broker.ha.slave import HAClient
from broker.store import FlushMode, MessageStore, StoreConfig
from rmq.message import StoredMessage

SEG = 4096
HB, IDLE = 0.1, 2.0  # heartbeats every 100 ms, a silent peer dropped after 2 s


def store_at(root: Path) -> MessageStore:
    cfg = StoreConfig(
        segment_size=SEG,
        cq_units_per_file=16,
        flush_mode=FlushMode.ASYNC_FLUSH,
        flush_interval_ms=60_000,
    )
    return MessageStore(str(root), cfg)


def slave_of(store: MessageStore, epochs: Path, broker_id: int, master: HAMaster) -> HAClient:
    """An HA client of ``master`` with the tests' heartbeat and idle timeout."""
    address = ("127.0.0.1", master.port)
    return HAClient(
        store, EpochFile(str(epochs)), broker_id, address, heartbeat_interval=HB, idle_timeout=IDLE
    )


def put(store: MessageStore, n: int, tag: str = "a", master: HAMaster | None = None) -> None:
    for i in range(n):
        m = StoredMessage(
            topic=f"T{i % 2}",
            body=f"{tag}{i}".encode() * (5 + i % 40),
            queue_id=i % 3,
            properties={"TAGS": tag},
        )
        assert store.put(m).status == "PUT_OK"
        if master is not None:
            master.notify_appended(store.log.end_offset)


def files(root: Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


async def until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.01)


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def same(master_root: Path, slave_root: Path) -> None:
    assert files(slave_root, "commitlog") == files(master_root, "commitlog")
    assert files(slave_root, "consumequeue") == files(master_root, "consumequeue")
