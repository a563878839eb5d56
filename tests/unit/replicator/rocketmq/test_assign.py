"""Rendezvous assignment of source queues to the live workers of a job."""

from __future__ import annotations

import pytest

from replicator.rocketmq.assign import Membership, assignment, claim_key, workers_prefix

PARTITIONS = [f"Topic{t}/broker-{b}/{q}" for t in range(3) for b in "ab" for q in range(8)]


def owners(workers: list[str], partitions: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for w in workers:
        for p in assignment(workers, partitions, w):
            assert p not in out, f"{p} assigned twice"
            out[p] = w
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_every_partition_goes_to_exactly_one_live_worker(n: int) -> None:
    workers = [f"w{i}" for i in range(n)]
    got = owners(workers, PARTITIONS)
    assert set(got) == set(PARTITIONS)
    assert set(got.values()) <= set(workers)
    if n <= 3:  # 48 partitions spread: nobody is left out
        assert set(got.values()) == set(workers)


def test_removing_a_worker_moves_only_its_partitions() -> None:
    workers = [f"w{i}" for i in range(5)]
    before = owners(workers, PARTITIONS)
    for gone in workers:
        after = owners([w for w in workers if w != gone], PARTITIONS)
        moved = {p for p in PARTITIONS if before[p] != after[p]}
        assert moved == {p for p in PARTITIONS if before[p] == gone}


def test_adding_a_worker_moves_partitions_only_to_it() -> None:
    workers = ["a", "b", "c"]
    before = owners(workers, PARTITIONS)
    after = owners([*workers, "d"], PARTITIONS)
    assert all(after[p] in (before[p], "d") for p in PARTITIONS)
    assert "d" in after.values()


def test_the_answer_ignores_list_order_and_duplicates_and_keeps_partition_order() -> None:
    mine = assignment(["b", "a", "c"], PARTITIONS, "a")
    assert mine == assignment(["c", "a", "b", "a"], PARTITIONS, "a")
    assert mine == [p for p in PARTITIONS if p in set(mine)]
    assert assignment(["a", "b"], PARTITIONS, "zz") == []
    assert assignment([], PARTITIONS, "a") == []


def test_the_answer_is_stable_across_processes() -> None:
    # blake2b, not the salted hash(): a fixed expectation
    assert assignment(["a", "b"], ["T/b/0", "T/b/1", "T/b/2", "T/b/3"], "a") == (
        assignment(["b", "a"], ["T/b/0", "T/b/1", "T/b/2", "T/b/3"], "a")
    )
    got = owners(["a", "b"], ["T/b/0", "T/b/1", "T/b/2", "T/b/3"])
    assert got == {"T/b/0": "b", "T/b/1": "a", "T/b/2": "b", "T/b/3": "b"}


def test_keys() -> None:
    assert workers_prefix("j1") == b"/replicators/rocketmq/j1/workers/"
    assert claim_key("j1", "T/b/3") == b"/replicators/rocketmq/j1/claims/T/b/3"


def test_a_worker_name_cannot_hold_a_slash() -> None:
    with pytest.raises(ValueError, match="worker"):
        Membership(None, "job", "a/b")  # type: ignore[arg-type]
