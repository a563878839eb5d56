"""broker.pop.table: slots on disk, bounds, segments deleted below low, restart."""

from __future__ import annotations

import os
from pathlib import Path

from broker.pop.state import SLOT
from broker.pop.table import SEGMENT_SLOTS, PopTable

KEY = ("G", "%RETRY%x|y", 3)


def test_restart_keeps_every_slot_and_the_bounds(tmp_path: Path) -> None:
    t = PopTable(str(tmp_path))
    b = t.open(KEY, lambda: 10)
    for off in range(10, 15):
        b.deliver_new(off, 1000 + off)
    b.ack(10, 1010)
    b.ack(12, 1012)
    b.redeliver(11, 1, 2000)
    t.flush()
    t.close()
    again = PopTable(str(tmp_path))
    assert again.keys_on_disk() == [KEY]
    b2 = again.get(KEY)
    assert b2 is not None
    assert (b2.low, b2.next, b2.inflight, b2.earliest) == (11, 15, 3, 1013)
    assert b2.state(11) == (2000, 2) and b2.state(12) == (0, 0) and b2.state(14) == (1014, 1)
    again.close()


def test_segments_below_low_are_deleted_and_files_are_sparse(tmp_path: Path) -> None:
    t = PopTable(str(tmp_path))
    b = t.open(("G", "T", 0), lambda: 0)
    n = SEGMENT_SLOTS + 10
    b.pass_over(SEGMENT_SLOTS - 5)
    for off in range(SEGMENT_SLOTS - 5, n):
        b.deliver_new(off, 7)
    d = tmp_path / "G" / "T" / "0"
    assert len([f for f in os.listdir(d) if f.endswith(".slots")]) == 2
    for off in range(SEGMENT_SLOTS - 5, SEGMENT_SLOTS + 1):
        b.ack(off, 7)
    assert b.low == SEGMENT_SLOTS + 1
    assert len([f for f in os.listdir(d) if f.endswith(".slots")]) == 1
    slots = b.slots
    assert slots.disk_bytes() <= 4 * 4096 + 9 * SLOT.size  # type: ignore[attr-defined]
    t.close()


def test_a_torn_bounds_file_is_rebuilt_from_the_slots(tmp_path: Path) -> None:
    t = PopTable(str(tmp_path))
    b = t.open(KEY, lambda: 0)
    for off in range(4):
        b.deliver_new(off, 50)
    b.ack(0, 50)
    t.close()
    bounds = tmp_path / "G" / "%25RETRY%25x%7Cy" / "3" / "bounds"
    bounds.write_bytes(bounds.read_bytes()[:10])
    again = PopTable(str(tmp_path))
    b2 = again.open(KEY, lambda: 1)  # the group's consumer offset
    assert (b2.low, b2.next, b2.inflight) == (1, 4, 3)
    again.close()


def test_many_queues_share_a_bounded_number_of_open_files(tmp_path: Path) -> None:
    t = PopTable(str(tmp_path))
    t.files.limit = 8
    for q in range(40):
        t.open(("G", "T", q), lambda: 0).deliver_new(0, 1)
    assert len(t.files._fds) <= 8
    assert all(t.books[("G", "T", q)].state(0) == (1, 1) for q in range(40))
    t.close()
