"""A group with a million messages received and not acked costs bounded memory: the book
keeps a few numbers, the slots live on disk (12 bytes each)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from broker.pop.state import SLOT
from broker.pop.table import SEGMENT_SLOTS, PopTable

N = 1_000_000
ACKED = 100_000  # every other one of the first


@pytest.mark.slow
def test_a_million_in_flight_costs_bounded_memory(tmp_path: Path) -> None:
    table = PopTable(str(tmp_path))
    book = table.open(("G", "T", 0), lambda: 0)
    started = time.monotonic()
    tracemalloc.start()
    for off in range(1000):  # warm up: files open, caches filled
        book.deliver_new(off, 10_000 + off)
    base, _ = tracemalloc.get_traced_memory()
    for off in range(1000, N):
        book.deliver_new(off, 10_000 + off)
    book.save()
    grown, peak = tracemalloc.get_traced_memory()
    assert book.inflight == N and book.next == N
    assert book.expired(9_999, 32) == []  # before the earliest: no scan
    assert book.expired(10_005, 32) == [(off, 1) for off in range(6)]
    scanned = time.monotonic()
    assert len(book.expired(N + 10_000, 32)) == 32
    for off in range(0, ACKED, 2):
        book.ack(off, 10_000 + off)
    after_acks, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    disk = book.slots.disk_bytes()  # type: ignore[attr-defined]
    elapsed = time.monotonic() - started
    print(
        f"\n{N} in flight: {disk / N:.1f} bytes per message on disk ({SLOT.size}-byte slots, "
        f"{SEGMENT_SLOTS}-slot segments); Python memory grew {grown - base} bytes "
        f"(peak {peak - base}), {after_acks - base} after {ACKED // 2} acks; {elapsed:.1f} s "
        f"(last scan {time.monotonic() - scanned:.2f} s)"
    )
    assert grown - base < 64 * 1024  # not per message: a million would be megabytes
    assert after_acks - base < 256 * 1024  # the acked offsets kept are bounded (1000)
    assert SLOT.size * N <= disk <= SLOT.size * N + 2 * SEGMENT_SLOTS * SLOT.size
    table.close()
