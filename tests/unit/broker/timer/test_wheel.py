"""The on-disk timer wheel: insert, fire, roll over, restart from its files, crash repair."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.timer.wheel import ENTRY_SIZE, Entry, TimerWheel, TimerWheelError

T0 = 1_700_000_000  # a second


def entry(at_s: float, n: int) -> Entry:
    return Entry(int(at_s * 1000), 1000 + n * 100, 100, n)


def wheel(path: Path, slots: int = 60, window: int = 20) -> TimerWheel:
    return TimerWheel(str(path), T0, slots, window)


def fire_through(w: TimerWheel, until_s: int) -> list[Entry]:
    """Fire every second up to ``until_s``, re-linking rolled entries as the service does."""
    out = []
    while w.read_s <= until_s:
        s = w.read_s
        for e in w.due(s):
            if e.deliver_ms // 1000 > s:
                w.add(e)
            else:
                out.append(e)
        w.advance(s + 1)
    return out


def test_entries_fire_in_their_second_oldest_first(tmp_path: Path) -> None:
    w = wheel(tmp_path)
    assert w.read_s == T0 and w.enqueue_next == 0
    a, b, c = entry(T0 + 3.2, 0), entry(T0 + 3.9, 1), entry(T0 + 5, 2)
    for e in (a, b, c):
        w.add(e)
    assert w.waiting == 3
    assert fire_through(w, T0 + 2) == []
    assert fire_through(w, T0 + 3) == [a, b]
    assert fire_through(w, T0 + 10) == [c]
    assert w.waiting == 0
    assert os.path.getsize(w.log_path) == 0  # drained: the log is emptied


def test_a_time_already_past_fires_next(tmp_path: Path) -> None:
    w = wheel(tmp_path)
    fire_through(w, T0 + 4)
    late = entry(T0 - 100, 7)
    assert w.add(late) == T0 + 5
    assert fire_through(w, T0 + 5) == [late]


def test_beyond_the_window_rolls_until_due(tmp_path: Path) -> None:
    w = wheel(tmp_path, slots=60, window=20)
    far = entry(T0 + 130.5, 1)  # more than two whole turns of the wheel ahead
    near = entry(T0 + 50, 2)  # same slot index as T0 + 110 and T0 + 170
    assert w.add(far) == T0 + 20
    w.add(near)
    fired: list[tuple[int, Entry]] = []
    while w.read_s <= T0 + 200:
        s = w.read_s
        for e in w.due(s):
            if e.deliver_ms // 1000 > s:
                w.add(e)
            else:
                fired.append((s, e))
        w.advance(s + 1)
    assert fired == [(T0 + 50, near), (T0 + 130, far)]


def test_reopened_files_keep_what_waits(tmp_path: Path) -> None:
    w = wheel(tmp_path)
    es = [entry(T0 + 1 + i % 5, i) for i in range(20)]
    for e in es:
        w.add(e)
    w.set_enqueued(20)
    in_order = sorted(es, key=lambda e: (e.deliver_ms, e.queue_offset))
    assert fire_through(w, T0 + 2) == [e for e in in_order if e.deliver_ms // 1000 <= T0 + 2]
    w.close()
    w = wheel(tmp_path)
    assert (w.read_s, w.enqueue_next, w.waiting) == (T0 + 3, 20, 12)
    assert fire_through(w, T0 + 9) == [e for e in in_order if e.deliver_ms // 1000 > T0 + 2]
    w.close()


def test_an_insert_cut_before_its_slot_was_linked_is_finished_on_open(tmp_path: Path) -> None:
    w = wheel(tmp_path)
    a, b = entry(T0 + 2, 0), entry(T0 + 2.5, 1)
    w.add(a)
    w.add(b)
    # the state after b's entry was written but before its slot pointed at it
    w._link(T0 + 2, 0, 1)
    w.close()
    w = wheel(tmp_path)
    assert fire_through(w, T0 + 2) == [a, b]


def test_a_torn_last_entry_is_cut_and_a_repeated_one_fires_once(tmp_path: Path) -> None:
    w = wheel(tmp_path)
    a = entry(T0 + 1, 0)
    w.add(a)
    w.add(a)  # dispatched again after a crash: same commit-log offset, handed out once
    w.close()
    with open(tmp_path / "timerlog", "ab") as f:
        f.write(b"\x00" * (ENTRY_SIZE - 3))  # a write cut short
    w = wheel(tmp_path)
    assert os.path.getsize(tmp_path / "timerlog") == 2 * ENTRY_SIZE
    assert fire_through(w, T0 + 1) == [a]


def test_reset_empties_it(tmp_path: Path) -> None:
    w = wheel(tmp_path)
    w.add(entry(T0 + 1, 0))
    w.reset(T0 + 100, 42)
    assert (w.read_s, w.enqueue_next, w.waiting) == (T0 + 100, 42, 0)
    assert fire_through(w, T0 + 200) == []


def test_files_of_another_shape_are_refused(tmp_path: Path) -> None:
    wheel(tmp_path, slots=60).close()
    with pytest.raises(TimerWheelError, match="not a wheel of 90 slots"):
        wheel(tmp_path, slots=90)
    with pytest.raises(ValueError, match="roll_window_slots"):
        TimerWheel(str(tmp_path / "x"), T0, 10, 10)
