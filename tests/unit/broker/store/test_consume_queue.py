"""ConsumeQueue.append_many: consecutive units in one write per file, as one append each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.store.consume_queue import UNIT_SIZE, ConsumeQueue, Unit
from broker.store.errors import ConsumeQueueBehindError


def units(first: int, n: int) -> list[tuple[int, int, int]]:
    return [(100 * i, 100, i) for i in range(first, first + n)]


def test_append_many_crosses_files_and_reads_back_as_single_appends(tmp_path: Path) -> None:
    cq = ConsumeQueue(str(tmp_path / "q"), units_per_file=4)
    cq.append_many(0, units(0, 3))
    cq.append_many(3, units(3, 7))  # fills file 0, all of file 1, half of file 2
    assert cq.max_offset == 10
    assert [u.offset for u in cq.get_range(0, 100)] == [0, 100, 200, 300]
    assert cq.get(9) == Unit(900, 100, 9)
    assert sorted(os.listdir(tmp_path / "q")) == [
        f"{0:020d}",
        f"{4 * UNIT_SIZE:020d}",
        f"{8 * UNIT_SIZE:020d}",
    ]
    cq.close()
    again = ConsumeQueue(str(tmp_path / "q"), units_per_file=4)  # reopened: same end
    assert again.max_offset == 10 and again.get(5) == Unit(500, 100, 5)
    again.close()


def test_append_many_skips_units_already_there_and_refuses_a_gap(tmp_path: Path) -> None:
    cq = ConsumeQueue(str(tmp_path / "q"), units_per_file=8)
    cq.append_many(0, units(0, 3))
    cq.append_many(1, units(1, 4))  # a re-dispatch overlapping the end: 1, 2 skipped
    assert cq.max_offset == 5 and cq.get(4) == Unit(400, 100, 4)
    with pytest.raises(ConsumeQueueBehindError):
        cq.append_many(7, units(7, 1))
    assert cq.max_offset == 5
    cq.close()


def test_append_many_may_start_an_empty_queue_later(tmp_path: Path) -> None:
    cq = ConsumeQueue(str(tmp_path / "q"), units_per_file=8)
    cq.append_many(20, units(20, 2), may_start_later=True)
    assert (cq.min_offset, cq.max_offset) == (20, 22)
    assert cq.get(21) == Unit(2100, 100, 21)
    cq.close()
