"""tests/faults/net/broker_checker.py: the total-queue and one-master-per-epoch checks on
hand-made histories, including the ones they must reject."""

from __future__ import annotations

from tests.faults.net.broker_checker import (
    GroupState,
    Send,
    Stored,
    check_masters,
    check_queue,
    check_reads,
    epoch_at,
    longest_gap,
    recovery,
)

A, B = "10.0.0.1:1", "10.0.0.2:1"


def ok(q: int, seq: int, qoff: int, phys: int, replica: str = A, t: float = 0.0) -> Send:
    return Send(f"q{q}-{seq}", q, seq, seq, replica, t, t + 0.1, "ok", qoff, phys)


def info(q: int, seq: int, replica: str = A) -> Send:
    return Send(f"q{q}-{seq}", q, seq, seq, replica, 0.0, 1.0, "info")


def stored(q: int, seq: int, qoff: int, phys: int, crc: int | None = None) -> Stored:
    return Stored(f"q{q}-{seq}", q, qoff, phys, seq if crc is None else crc)


def test_a_clean_history_passes() -> None:
    sends = [ok(0, 0, 0, 0), info(0, 1), ok(0, 1, 2, 200), ok(1, 0, 0, 100)]
    got = [stored(0, 0, 0, 0), stored(0, 1, 1, 150), stored(0, 1, 2, 200), stored(1, 0, 0, 100)]
    assert check_queue(sends, got) == []


def test_an_acknowledged_message_missing_is_lost() -> None:
    problems = check_queue([ok(0, 0, 0, 0), ok(0, 1, 1, 100)], [stored(0, 0, 0, 0)])
    assert any("acknowledged and lost: q0-1" in p for p in problems)


def test_an_acknowledged_message_elsewhere_than_its_answer_said() -> None:
    sends = [ok(0, 0, 0, 0), ok(0, 1, 1, 100)]
    problems = check_queue(sends, [stored(0, 0, 0, 0), stored(0, 1, 1, 180)])
    assert any("q0-1 acknowledged" in p for p in problems)


def test_a_message_with_another_body_or_never_sent() -> None:
    problems = check_queue([ok(0, 0, 0, 0)], [stored(0, 0, 0, 0, crc=99), stored(0, 5, 1, 50)])
    assert sum("never sent with that body" in p for p in problems) == 2


def test_a_gap_in_a_queue_and_a_step_back_in_send_order() -> None:
    sends = [ok(0, 0, 0, 0), ok(0, 1, 2, 200)]
    gapped = check_queue(sends, [stored(0, 0, 0, 0), stored(0, 1, 2, 200)])
    assert any("without gaps" in p for p in gapped)
    sends = [info(0, 0), info(0, 1)]
    problems = check_queue(sends, [stored(0, 1, 0, 0), stored(0, 0, 1, 100)])
    assert any("after seq 1" in p for p in problems)


def test_epoch_at_takes_the_stretch_holding_the_offset() -> None:
    entries = [(1, 0), (3, 500), (4, 900)]
    assert [epoch_at(entries, x) for x in (0, 499, 500, 899, 5000)] == [1, 1, 3, 3, 4]
    assert epoch_at([(2, 10)], 5) is None


def test_two_replicas_acknowledging_in_one_epoch_is_split_brain() -> None:
    epochs = [(1, 0), (2, 1000)]
    history = [GroupState(0, A, 1), GroupState(5, B, 2)]
    sends = [ok(0, 0, 0, 0, A), ok(0, 1, 1, 1000, B), ok(0, 2, 2, 1100, A)]
    problems = check_masters(sends, epochs, history)
    assert any("epoch 2" in p and "all acknowledged" in p for p in problems)
    assert check_masters(sends[:2], epochs, history) == []


def test_an_acknowledgement_by_a_replica_metaledger_did_not_name() -> None:
    problems = check_masters([ok(0, 0, 0, 0, B)], [(1, 0)], [GroupState(0, A, 1)])
    assert any("metaledger's master was" in p for p in problems)
    two = check_masters([], [(1, 0)], [GroupState(0, A, 1), GroupState(1, B, 1)])
    assert any("named" in p for p in two)


def test_gap_and_recovery() -> None:
    sends = [ok(0, 0, 0, 0, t=1.0), ok(0, 1, 1, 9, t=5.0), info(0, 2)]
    gap, at = longest_gap(sends, 0.0, 6.0)
    assert abs(gap - 4.0) < 1e-9 and abs(at - 1.1) < 1e-9
    assert recovery(sends, 3.0, 10.0) is not None
    assert recovery(sends, 6.0, 10.0) is None


def test_a_read_taken_back_after_the_heal() -> None:
    final = [stored(0, 0, 0, 0), stored(0, 2, 1, 100)]
    assert check_reads([stored(0, 0, 0, 0)], final, [A]) == []
    problems = check_reads([stored(0, 0, 0, 0), stored(0, 1, 1, 100)], final, [A, B])
    assert len(problems) == 1 and "q0-1" in problems[0] and B in problems[0]
