"""The replicator checker fails on a lost, reordered, doubled, invented or taken-back write,
and passes a destination that holds every acknowledged write (unacknowledged ones or not)."""

from __future__ import annotations

from tests.faults.replicator_checker import History, Kind


def written(kind: Kind, name: str, n: int, acked: int) -> History:
    """``n`` writes to ``name``, the first ``acked`` of them acknowledged."""
    h = History()
    for i in range(n):
        number = h.next_number(name, kind)
        if i < acked:
            h.ack(name, number)
    return h


def test_everything_acknowledged_and_some_unacknowledged_passes() -> None:
    h = written(Kind.LIST, "l", 5, 4)
    for _ in range(3):
        h.ack("r", h.next_number("r", Kind.REGISTER))
        h.ack("c", h.next_number("c", Kind.COUNTER))
    h.next_number("r", Kind.REGISTER)  # its answer never came
    h.observe({"l": [1, 2], "r": 1, "c": 2})
    assert h.check({"l": [1, 2, 3, 4], "r": 3, "c": 3}) == []
    assert h.check({"l": [1, 2, 3, 4, 5], "r": 4, "c": 3}) == []
    assert h.acknowledged() == 10


def test_a_lost_write_fails() -> None:
    h = written(Kind.LIST, "l", 4, 4)
    assert h.check({"l": [1, 2, 4]}) == ["l: acknowledged [3] missing (1)"]
    assert h.check({}) == ["l: acknowledged [1, 2, 3, 4] missing (4)"]
    r = written(Kind.REGISTER, "r", 4, 4)
    assert r.check({"r": 3}) == ["r: holds 3, the source acknowledged 4"]
    c = written(Kind.COUNTER, "c", 2, 2)
    c.keys["c"].acked = [1, 2]
    assert c.check({"c": 1}) == ["c: holds 1, the source acknowledged 2"]


def test_a_reordered_or_doubled_list_fails() -> None:
    h = written(Kind.LIST, "l", 4, 4)
    assert h.check({"l": [1, 3, 2, 4]}) == ["l: out of order or twice: [1, 3, 2, 4]"]
    assert h.check({"l": [1, 2, 2, 3, 4]}) == ["l: out of order or twice: [1, 2, 2, 3, 4]"]


def test_a_value_nobody_sent_fails() -> None:
    h = written(Kind.LIST, "l", 2, 2)
    assert h.check({"l": [1, 2, 3]}) == ["l: never sent: [3]"]
    r = written(Kind.REGISTER, "r", 2, 1)
    assert r.check({"r": 5}) == ["r: holds 5, only 2 sent"]


def test_a_value_seen_then_taken_back_fails() -> None:
    r = written(Kind.REGISTER, "r", 3, 3)
    r.observe({"r": 3})
    r.observe({"r": 2})
    assert r.check({"r": 3}) == ["r: went back from 3 to 2"]
    h = written(Kind.LIST, "l", 3, 2)
    h.observe({"l": [1, 2, 3]})
    assert h.check({"l": [1, 2]}) == [
        "l: a seen list changed before its end: [1, 2, 3] then [1, 2]"
    ]
