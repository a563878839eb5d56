"""tests/faults/net/checker.py: the per-key linearizability check and the availability
measures of a history, on hand-made histories (including the ones it must reject)."""

from __future__ import annotations

import math

from tests.faults.net.checker import Op, check, check_key, longest_gap, recovery


def w(proc: int, value: str, start: float, end: float, status: str = "ok") -> Op:
    return Op(proc, "w", "k", value, start, end, status)


def r(proc: int, value: str | None, start: float, end: float, status: str = "ok") -> Op:
    return Op(proc, "r", "k", value, start, end, status)


def test_sequential_history_is_linearizable() -> None:
    assert check_key([r(0, None, 0, 1), w(0, "a", 2, 3), r(1, "a", 4, 5), w(1, "b", 6, 7)]) is None


def test_a_stale_read_after_a_completed_write_is_not() -> None:
    why = check_key([w(0, "a", 0, 1), w(0, "b", 2, 3), r(1, "a", 4, 5)])
    assert why is not None and "no linearization" in why


def test_concurrent_writes_may_land_in_either_order() -> None:
    ops = [w(0, "a", 0, 10), w(1, "b", 1, 9), r(2, "a", 11, 12)]
    assert check_key(ops) is None
    ops = [w(0, "a", 0, 10), w(1, "b", 1, 9), r(2, "b", 11, 12)]
    assert check_key(ops) is None


def test_a_read_may_not_flip_back_to_an_older_value() -> None:
    ops = [w(0, "a", 0, 10), w(1, "b", 1, 9), r(2, "b", 11, 12), r(2, "a", 13, 14)]
    assert check_key(ops) is not None


def test_a_timed_out_write_may_land_late_but_only_once_seen_it_happened() -> None:
    late = [w(0, "a", 0, 1), w(1, "b", 2, 3, "info"), r(2, "a", 4, 5), r(2, "b", 30, 31)]
    assert check_key(late) is None  # landed between the two reads
    back = [*late, r(2, "a", 40, 41)]
    assert check_key(back) is not None  # and cannot be undone after it was seen


def test_an_unseen_timed_out_write_is_left_out() -> None:
    assert check_key([w(0, "a", 0, 1), w(1, "b", 2, 3, "info"), r(2, "a", 4, 5)]) is None


def test_a_read_of_a_value_nobody_wrote_is_an_anomaly() -> None:
    why = check_key([w(0, "a", 0, 1), r(1, "zz", 2, 3)])
    assert why is not None and "nobody wrote" in why


def test_failed_reads_are_ignored_and_keys_are_independent() -> None:
    ops = [
        Op(0, "w", "x", "1", 0, 1, "ok"),
        Op(1, "r", "x", None, 2, 3, "fail"),
        Op(1, "r", "y", None, 2, 3, "ok"),
        Op(1, "r", "x", "0", 4, 5, "ok"),  # never written: the only anomaly
    ]
    assert [a.key for a in check(ops)] == ["x"]


def test_many_concurrent_clients_stay_cheap() -> None:
    ops = []
    for step in range(60):  # 4 overlapping writers and readers a step
        t = float(step)
        for p in range(4):
            ops.append(w(p, f"{p}-{step}", t, t + 1.5))
        ops.append(r(9, f"{step % 4}-{step - 1}" if step else None, t + 0.9, t + 1.0))
    assert check_key(ops) is None


def test_longest_gap_and_recovery() -> None:
    ops = [w(0, "a", 0, 1), w(1, "b", 1, 2), w(0, "c", 6, 8), w(1, "d", 9, 9.5, "info")]
    assert longest_gap(ops, 0.0, 10.0) == (6.0, 2.0)
    assert recovery(ops, 0, 5.0, 20.0) == 3.0
    assert recovery(ops, 1, 5.0, 20.0) is None  # its only write after the heal timed out
    assert longest_gap([], 0.0, 3.0) == (3.0, 0.0)
    assert math.isinf(Op(0, "w", "k", "v", 0, math.inf, "info").end)
