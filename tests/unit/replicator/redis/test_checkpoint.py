"""The confirmed low watermark (which offset may be acked and checkpointed) and the
checkpoint record, with a fake ``Offsets`` client that applies the server's rules."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver.client import CommittedOffset, FailedPrecondition, NotFound, OffsetWrite
from replicator.redis.checkpoint import Checkpoint, CheckpointStore, Watermark
from replicator.redis.errors import ConfigError

R = "a" * 40


def test_safe_moves_only_over_confirmed_boundaries_in_stream_order() -> None:
    w = Watermark(Checkpoint(R, 100))
    b1 = w.add(Checkpoint(R, 130), messages=2)
    w.add(Checkpoint(R, 144), messages=0)  # a PING: nothing to confirm, but after b1
    b3 = w.add(Checkpoint(R, 170, db=3), messages=1)
    assert w.safe().offset == 100
    w.confirm(b3)  # a later queue confirms first: still held back by b1
    assert w.safe().offset == 100 and w.unconfirmed() == 2
    w.confirm(b1)
    assert w.safe().offset == 100
    w.confirm(b1)
    assert w.safe() == Checkpoint(R, 170, db=3) and w.pending == 0


def test_a_boundary_without_messages_is_safe_at_once_when_nothing_is_before_it() -> None:
    w = Watermark(Checkpoint(R, 0))
    w.add(Checkpoint(R, 14), messages=0)
    assert w.safe().offset == 14


def test_an_open_snapshot_boundary_holds_until_sealed_and_confirmed() -> None:
    w = Watermark(Checkpoint("old", 500))
    snap = w.add(Checkpoint(R, 1000, generation=1), messages=0, sealed=False)
    assert w.safe().offset == 500  # empty, but the RDB is still being parsed
    w.grow(snap, 3)
    w.confirm(snap, 2)
    w.seal(snap)
    assert w.safe().replid == "old"
    w.confirm(snap)
    assert w.safe() == Checkpoint(R, 1000, generation=1)


def test_continue_with_a_new_id_renames_the_safe_point_and_the_pending_ones() -> None:
    w = Watermark(Checkpoint(R, 10))
    b = w.add(Checkpoint(R, 20), messages=1)
    w.rename("b" * 40)
    assert w.safe() == Checkpoint("b" * 40, 10, history=R)  # the history stays
    w.confirm(b)
    assert w.safe() == Checkpoint("b" * 40, 20, history=R)
    cp = w.safe()
    assert Checkpoint.decode(cp.encode()) == cp and cp.psync_args() == ("b" * 40, 21)
    assert Checkpoint(R, 1).history == R  # a history begins under its full sync's replid


def test_misuse_is_refused() -> None:
    w = Watermark(Checkpoint(R, 10))
    with pytest.raises(ValueError, match="before"):
        w.add(Checkpoint(R, 5), messages=1)
    b = w.add(Checkpoint(R, 20), messages=1)
    with pytest.raises(ValueError, match="confirmations"):
        w.confirm(b, 2)
    with pytest.raises(ValueError, match="sealed"):
        w.grow(b)
    with pytest.raises(ConfigError, match="offset"):
        Checkpoint(R, -1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.randoms())
def test_any_confirmation_order_gives_the_last_fully_confirmed_boundary(
    counts: list[int], rnd: random.Random
) -> None:
    w = Watermark(Checkpoint(R, 0))
    bounds = [w.add(Checkpoint(R, 10 * (i + 1)), messages=n) for i, n in enumerate(counts)]
    todo = [b for b in bounds for _ in range(b.outstanding)]
    rnd.shuffle(todo)
    confirmed = {id(b): 0 for b in bounds}
    for b in todo:
        w.confirm(b)
        confirmed[id(b)] += 1
        expect = 0
        for i, bb in enumerate(bounds):
            if confirmed[id(bb)] < counts[i]:
                break
            expect = 10 * (i + 1)
        assert w.safe().offset == expect
    assert w.safe().offset == 10 * len(counts)


def test_position_orders_generations_before_offsets() -> None:
    old = Checkpoint(R, 5_000_000, generation=0)
    new = Checkpoint("c" * 40, 1, generation=1)  # a full sync of a restarted master
    assert new.position > old.position
    assert Checkpoint.decode(new.encode()) == new
    assert new.psync_args() == ("c" * 40, 2)
    with pytest.raises(ConfigError, match="unreadable"):
        Checkpoint.decode(b"{}")


class FakeOffsets:
    """The Offsets service's rules that matter here: lease, stale token, backwards."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], CommittedOffset] = {}
        self.live_leases: set[int] = set()
        self.newest_token: dict[tuple[str, str], int] = {}

    def offsets_fetch(self, job: str, partition: str) -> CommittedOffset:
        try:
            return self.rows[job, partition]
        except KeyError:
            raise NotFound("offset not found") from None

    def offsets_commit(
        self,
        job: str,
        partition: str,
        offset: bytes,
        *,
        lease_id: int,
        fencing_token: int,
        position: int = 0,
        expected_version: int = 0,
        epoch: int = 0,
        keepalive: bool = False,
    ) -> OffsetWrite:
        if lease_id not in self.live_leases:
            raise NotFound("requested lease not found")
        key = (job, partition)
        if fencing_token < self.newest_token.get(key, 0):
            raise FailedPrecondition("stale fencing_token")
        old = self.rows.get(key)
        if old is not None and position < old.position:
            raise FailedPrecondition("would move backwards")
        self.newest_token[key] = fencing_token
        v = (old.version if old else 0) + 1
        self.rows[key] = CommittedOffset(
            job, partition, offset, position, v, 0, lease_id, fencing_token, 1, 1, 0
        )
        return OffsetWrite(1, v, 0)


def test_store_commits_fenced_and_skips_repeats() -> None:
    fake = FakeOffsets()
    fake.live_leases = {7, 8}
    store = CheckpointStore(fake, "job1")
    assert store.load() is None
    assert store.commit(Checkpoint(R, 10), lease_id=7, token=70)
    assert not store.commit(Checkpoint(R, 10), lease_id=7, token=70)
    # a new active (newer token) takes over; the old one can no longer commit
    other = CheckpointStore(fake, "job1")
    assert other.load() == Checkpoint(R, 10)
    assert other.commit(Checkpoint(R, 20), lease_id=8, token=80)
    with pytest.raises(FailedPrecondition, match="stale"):
        store.commit(Checkpoint(R, 30), lease_id=7, token=70)
    fake.live_leases.discard(8)
    with pytest.raises(NotFound):
        other.commit(Checkpoint(R, 30), lease_id=8, token=80)
    # a new history after a full sync: lower offset, higher generation, accepted
    fake.live_leases.add(9)
    third = CheckpointStore(fake, "job1")
    assert third.commit(Checkpoint("d" * 40, 3, generation=1), lease_id=9, token=90)
    assert CheckpointStore(fake, "job1").load() == Checkpoint("d" * 40, 3, generation=1)
