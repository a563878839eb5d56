"""Fencing tokens and resets in a kv store that counts revisions etcd's way: a lock's token is
a store revision, a lease's grant token and a reset are at log offsets, and the Offsets rules
order them by when they came about (nameserver.offsets.apply.fence_of), not by the plain
numbers, which no longer agree once lease and offset requests stop moving the revision."""

from __future__ import annotations

from grpc import StatusCode

from nameserver.kinds import REGISTRY
from nameserver.kv.revision import COUNT_REVISIONS
from nameserver.leases.records import Lease
from nameserver.offsets.apply import fence_of
from nameserver.offsets.records import CommittedOffset, offset_key
from nameserver.state.machine import diff_images, image_from_records, image_records
from protos import records_pb2
from raftlog import Entry
from tests.unit.nameserver.offsets.test_offsets import Driver, commit, delete, grant, put, reset


def counting() -> Driver:
    d = Driver()
    d.apply(Entry(COUNT_REVISIONS))  # offset 1: the store counts from revision 0
    return d


def revision(d: Driver) -> int:
    return d.sm.image.revision


def test_order_of_keys_grants_and_resets() -> None:
    # a key created at revision 5 comes after everything at revision 4 and before any
    # grant or reset at revision 5; grants and resets at one revision follow their offsets
    key5 = fence_of(5, -1)
    assert fence_of(90, 4) < key5 < fence_of(91, 5) < fence_of(92, 5) < fence_of(6, -1)
    # a store counting by offset: the plain numbers' order
    assert fence_of(3, -1) < fence_of(4, -1)


def test_a_lock_taken_after_a_reset_is_newer_than_the_reset() -> None:
    d = counting()
    d.apply(grant(7))
    d.apply(put(b"lock/a", b"w1", lease=7))  # revision 1: worker 1's lock token
    d.apply(commit(1, 7, 10))
    for i in range(5):  # offsets move on, the store revision stays at 1
        d.apply(grant(100 + i))
    d.apply(reset(2))  # at offset 10, store revision 1
    assert revision(d) == 1 and d.offset == 10
    stale = d.rejected(commit(1, 7, 50))  # worker 1 never saw the reset
    assert "was reset" in str(stale)
    d.apply(delete(b"lock/a"))  # revision 2: worker 1 lost the lock
    d.apply(grant(8))
    d.apply(put(b"lock/a", b"w2", lease=8))  # revision 3 (< the reset's offset 10)
    assert revision(d) == 3
    assert d.apply(commit(3, 8, 4)).position == 4  # newer than the reset: no epoch needed


def test_a_lock_taken_after_a_grant_token_committed_is_newer() -> None:
    d = counting()
    d.apply(grant(7))  # offset 2, store revision 0: its grant token is 2
    for i in range(5):
        d.apply(grant(100 + i))
    d.apply(commit(2, 7, 10))
    d.apply(grant(8))  # offset 9
    d.apply(put(b"lock/a", b"w2", lease=8))  # revision 1: a token below every offset above
    assert d.apply(commit(1, 8, 20)).position == 20
    stale = d.rejected(commit(2, 7, 30))  # the grant came before the lock: stale now
    assert stale.status == StatusCode.FAILED_PRECONDITION and "stale fencing_token 2" in str(stale)


def test_a_grant_after_a_lock_is_newer_and_one_before_is_stale() -> None:
    d = counting()
    d.apply(grant(6))  # offset 2 at revision 0: before the lock
    d.apply(grant(7))
    d.apply(put(b"lock/a", b"w1", lease=7))  # revision 1
    d.apply(commit(1, 7, 10))
    assert d.rejected(commit(2, 6, 20)).status == StatusCode.FAILED_PRECONDITION
    d.apply(grant(8))  # at revision 1: after the lock
    token = d.offset
    assert token > 1
    stored = d.apply(commit(token, 8, 20))
    assert (stored.fencing_token, stored.fencing_revision) == (token, 1)
    assert d.rejected(commit(1, 7, 30)).status == StatusCode.FAILED_PRECONDITION


def test_records_round_trip_and_keep_their_old_bytes_when_the_store_never_counted() -> None:
    d = counting()
    d.apply(grant(7))
    d.apply(commit(2, 7, 10))
    d.apply(reset(1, partition="q"))
    image = d.sm.image
    assert image.leases.get(7).granted_revision == 0  # type: ignore[union-attr]
    assert image.offsets.get(offset_key("j", "q")).reset_store_revision == 0  # type: ignore[union-attr]
    rebuilt = image_from_records(list(image_records(image)), image.offset, 1, REGISTRY)
    assert rebuilt.leases == image.leases and not diff_images(image, rebuilt)
    assert list(rebuilt.offsets.data.items()) == list(image.offsets.data.items())

    # a store that never counted writes the fields not at all: a record's bytes as before
    old_lease = Lease(7, 10, 2, 1000)
    assert Lease.from_record(old_lease.to_record()) == old_lease
    assert (
        old_lease.to_record()
        == records_pb2.LeaseRecord(
            id=7, ttl_s=10, granted_offset=2, last_refresh_ms=1000
        ).SerializeToString()
    )
    old = CommittedOffset("j", "p", b"o", 1, 1, 1, 7, 2, 3, 3, 4)
    assert CommittedOffset.from_record(old.to_record()) == old
    record = records_pb2.OffsetRecord.FromString(old.to_record())
    assert not record.HasField("fencing_revision") and not record.HasField("reset_store_revision")
