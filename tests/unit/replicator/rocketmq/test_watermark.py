"""QueueWatermark: the committable offset is the contiguous low watermark of acked and
dismissed messages (issue 19 item 1)."""

from __future__ import annotations

import pytest

from replicator.rocketmq.watermark import QueueWatermark


def pulled(start: int, *offsets: int) -> QueueWatermark:
    w = QueueWatermark(start)
    for o in offsets:
        w.pulled(o)
    return w


def test_nothing_pulled_commits_the_start() -> None:
    w = QueueWatermark(7)
    assert (w.committable, w.in_flight, w.next_offset) == (7, 0, 7)


def test_acks_in_order_move_it_one_by_one() -> None:
    w = pulled(10, 10, 11, 12)
    assert (w.committable, w.in_flight) == (10, 3)
    w.acked(10)
    assert w.committable == 11
    w.acked(11)
    w.acked(12)
    assert (w.committable, w.in_flight, w.acked_count) == (13, 0, 3)


def test_acks_out_of_order_wait_for_the_lowest() -> None:
    w = pulled(0, 0, 1, 2, 3)
    w.acked(3)
    w.acked(1)
    assert (w.committable, w.in_flight) == (0, 2)
    w.acked(0)
    assert w.committable == 2
    w.acked(2)
    assert w.committable == 4


def test_a_failed_message_holds_the_watermark_until_acked_or_dismissed() -> None:
    w = pulled(5, 5, 6, 7)
    w.failed(6)
    w.acked(5)
    w.acked(7)
    assert (w.committable, w.failed_offsets) == (6, [6])
    w.failed(6)  # failed again: still held
    assert w.committable == 6
    w.acked(6)  # a resend succeeded
    assert (w.committable, w.failed_offsets, w.dismissed_count) == (8, [], 0)

    w = pulled(5, 5, 6, 7)
    w.failed(5)
    w.acked(6)
    w.acked(7)
    assert w.committable == 5
    w.dismissed(5)
    assert (w.committable, w.dismissed_count, w.acked_count, w.failed_offsets) == (8, 1, 2, [])


def test_advance_passes_filtered_offsets() -> None:
    w = pulled(0, 0)
    w.advance(5)  # 1..4 filtered out by the source
    assert w.committable == 0
    w.acked(0)
    assert w.committable == 5
    w.pulled(5)
    w.pulled(9)  # a gap inside one pull answer
    w.acked(9)
    assert w.committable == 5
    assert w.is_in_flight(5) and not w.is_in_flight(7) and not w.is_in_flight(9)
    w.acked(5)
    assert (w.committable, w.next_offset) == (10, 10)


def test_moved_restarts_where_the_source_says() -> None:
    w = pulled(100, 100)
    with pytest.raises(ValueError, match="in flight"):
        w.moved(500)
    w.acked(100)
    w.moved(500)  # retention deleted below 500
    assert (w.committable, w.next_offset) == (500, 500)
    w.moved(3)  # the source queue was reset
    assert w.committable == 3
    w.pulled(3)
    assert w.committable == 3


@pytest.mark.parametrize(
    ("action", "offset", "match"),
    [
        ("pulled", 1, "below the next expected offset 3"),
        ("pulled", -1, "non-negative"),
        ("acked", 0, "not in flight"),
        ("acked", 9, "not in flight"),
        ("dismissed", 3, "not in flight"),
        ("failed", 0, "not in flight"),
        ("advance", 2, "were pulled"),
    ],
)
def test_misuse_raises_and_changes_nothing(action: str, offset: int, match: str) -> None:
    w = pulled(0, 0, 1, 2)
    w.acked(0)
    before = (w.committable, w.in_flight, w.next_offset, w.acked_count, w.dismissed_count)
    with pytest.raises(ValueError, match=match):
        getattr(w, action)(offset)
    assert (w.committable, w.in_flight, w.next_offset, w.acked_count, w.dismissed_count) == before


def test_an_offset_is_done_only_once() -> None:
    w = pulled(0, 0, 1)
    w.acked(1)
    with pytest.raises(ValueError, match="not in flight"):
        w.acked(1)
    with pytest.raises(ValueError, match="not in flight"):
        w.dismissed(1)
    assert (w.committable, w.acked_count) == (0, 1)


def test_a_bool_is_not_an_offset() -> None:
    with pytest.raises(ValueError, match="start"):
        QueueWatermark(True)
