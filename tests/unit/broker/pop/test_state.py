"""broker.pop.state: one queue's book over in-memory slots (no clock, no files)."""

from __future__ import annotations

import pytest

from broker.pop.state import MAX_ACKED_KEPT, NEVER, InMemorySlots, QueueBook, Stale


def book(low: int = 0, nxt: int = 0) -> QueueBook:
    return QueueBook(InMemorySlots(), low, nxt)


def test_new_deliveries_move_next_and_acks_move_low_over_done_slots() -> None:
    b = book()
    for off in range(3):
        b.deliver_new(off, 1000)
    assert (b.low, b.next, b.inflight, b.earliest) == (0, 3, 3, 1000)
    assert not b.ack(1, 1000)  # low waits for 0
    assert b.progress() == (0, 3, [1])
    assert b.ack(0, 1000)
    assert (b.low, b.acked) == (2, set())
    assert b.ack(2, 1000)
    assert (b.low, b.inflight, b.earliest) == (3, 0, NEVER)
    assert b.slots.bounds == (3, 3)  # type: ignore[attr-defined]


def test_pass_over_marks_filtered_offsets_done() -> None:
    b = book(5, 5)
    b.deliver_new(7, 100)  # 5 and 6 filtered out
    assert (b.low, b.next) == (7, 8)
    b.pass_over(10)
    assert b.next == 10 and b.low == 7
    b.ack(7, 100)
    assert b.low == 10


def test_expired_in_offset_order_and_the_earliest_bound() -> None:
    b = book()
    for off, vis in ((0, 300), (1, 100), (2, 200)):
        b.deliver_new(off, vis)
    assert b.expired(99, 10) == []  # before the bound: no scan
    assert b.expired(250, 10) == [(1, 1), (2, 1)]
    assert b.earliest == 300  # what is left in flight and not handed out
    assert b.redeliver(1, 1, 400) == 2
    assert b.redeliver(2, 2, 400) is None  # not attempt 2
    assert b.expired(250, 1) == []
    assert b.state(1) == (400, 2)


def test_limit_keeps_the_bound_low() -> None:
    b = book()
    for off in range(4):
        b.deliver_new(off, 10 + off)
    assert b.expired(100, 2) == [(0, 1), (1, 1)]
    assert b.earliest <= 12  # not scanned to the end: still a lower bound


def test_fifo_never_redelivers_past_an_invisible_earlier_offset() -> None:
    b = book()
    b.deliver_new(0, 500)
    b.deliver_new(1, 100)
    assert b.expired(200, 10, fifo=True) == []
    assert b.expired(200, 10) == [(1, 1)]


def test_stale_handles_are_refused() -> None:
    b = book()
    b.deliver_new(0, 100)
    with pytest.raises(Stale):
        b.ack(0, 99)  # another instant: an older (or another group's) handle
    with pytest.raises(Stale):
        b.ack(1, 100)  # never popped
    b.redeliver(0, 1, 200)
    with pytest.raises(Stale):
        b.ack(0, 100)
    new = b.change(0, 200, 200)  # the same instant again: bumped, so the old handle is stale
    assert new == 201
    with pytest.raises(Stale):
        b.check(0, 200)
    assert b.check(0, 201) == 2
    b.ack(0, 201)
    with pytest.raises(Stale):
        b.ack(0, 201)  # twice


def test_redeliver_bumps_an_equal_instant() -> None:
    b = book()
    b.deliver_new(0, 100)
    assert b.redeliver(0, 1, 100) == 2
    assert b.state(0) == (101, 2)


def test_done_and_retry_later() -> None:
    b = book()
    b.deliver_new(0, 100)
    b.expired(200, 5)
    assert b.earliest == NEVER  # handed to the caller
    b.retry_later(200)
    assert b.expired(200, 5) == [(0, 1)]
    assert b.done(0)
    assert not b.done(0)


def test_acked_offsets_kept_are_bounded() -> None:
    b = book()
    for off in range(MAX_ACKED_KEPT + 10):
        b.deliver_new(off, 100)
    for off in range(1, MAX_ACKED_KEPT + 10):
        b.ack(off, 100)
    assert len(b.acked) == MAX_ACKED_KEPT
    b.ack(0, 100)
    assert b.low == MAX_ACKED_KEPT + 10 and not b.acked


def test_merge_takes_the_higher_low_next_and_acks_and_restores_in_flight() -> None:
    b = book()
    for off in range(4):
        b.deliver_new(off, 1000)
    b.merge(2, 8, [3, 5])
    assert (b.low, b.next) == (2, 8)
    assert b.state(3) == (0, 0)  # acked there
    assert b.state(2) == (1000, 1)  # kept (its handle still counts)
    assert b.state(4) == (0, 1) and b.state(5) == (0, 0)  # restored: visible now
    assert b.inflight == 4  # 2 (kept), 4, 6 and 7 (restored)
    assert b.expired(1, 10) == [(4, 1), (6, 1), (7, 1)]
    b.ack(6, 12345)  # a restored slot takes any handle of its offset
    b.merge(0, 0, [])  # lower progress changes nothing
    assert (b.low, b.next) == (2, 8)


def test_reopen_recounts_in_flight_from_the_slots() -> None:
    slots = InMemorySlots()
    b = QueueBook(slots, 0, 0)
    b.deliver_new(0, 50)
    b.deliver_new(1, 70)
    b.ack(0, 50)
    again = QueueBook(slots, *slots.bounds)
    assert (again.low, again.next, again.inflight, again.earliest) == (1, 2, 1, 70)
    again.deliver_new(2, 90)
    again.save()  # as a pop does once it handed out its messages
    again.ack(2, 90)
    third = QueueBook(slots, *slots.bounds)
    assert third.progress() == (1, 3, [2])  # acks above low are read back from the slots
