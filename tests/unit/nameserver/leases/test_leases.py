"""Leases in the state machine (grant, refresh, expire, revoke), driven with plain entries,
and the leader's expiry rule (DESIGN.md §5)."""

from __future__ import annotations

from typing import Any

import pytest
from grpc import StatusCode

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.leases.expiry import LeaseKeeper
from nameserver.leases.records import Lease, lease_key
from nameserver.state.image import MetadataDelta, MetadataImage
from nameserver.state.machine import (
    MetadataStateMachine,
    diff_images,
    image_from_records,
    image_records,
)
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Effect, Entry

T0 = 1_000_000  # ms


def lease_op(**kw: Any) -> records_pb2.LeaseOperation:
    return records_pb2.LeaseOperation(**kw)


def grant(lease_id: int, ttl_s: int, at: int = T0) -> Entry:
    op = lease_op(grant=records_pb2.LeaseGrant(id=lease_id, ttl_s=ttl_s))
    return Entry(type="lease", value=op.SerializeToString(), timestamp_ms=at)


def revoke(lease_id: int, at: int = T0) -> Entry:
    op = lease_op(revoke=records_pb2.LeaseRevoke(id=lease_id))
    return Entry(type="lease", value=op.SerializeToString(), timestamp_ms=at)


def refresh(at: int, *checkpoints: tuple[int, int]) -> Entry:
    op = lease_op(
        refresh=records_pb2.LeaseRefresh(
            checkpoints=[records_pb2.LeaseCheckpoint(id=i, refreshed_ms=t) for i, t in checkpoints]
        )
    )
    return Entry(type="lease", value=op.SerializeToString(), timestamp_ms=at)


def expire(at: int, *ids: int) -> Entry:
    op = lease_op(expire=records_pb2.LeaseExpire(ids=list(ids)))
    return Entry(type="lease", value=op.SerializeToString(), timestamp_ms=at)


def put(key: bytes, lease: int = 0) -> Entry:
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=b"v", lease=lease))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def delete(key: bytes) -> Entry:
    op = records_pb2.KvOperation(delete_range=rpc_pb2.DeleteRangeRequest(key=key))
    return Entry(type="kv", key=key, value=op.SerializeToString())


class Driver:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0
        self.effects: list[Effect] = []

    def apply(self, *entries: Entry) -> Any:
        self.offset += 1
        try:
            effects, result = self.sm.apply(self.offset, 1, list(entries))
        finally:
            self.sm.publish()
        self.effects.extend(effects)
        return result

    @property
    def image(self) -> MetadataImage:
        return self.sm.image


def test_grant_records_ttl_fencing_token_and_grant_time() -> None:
    d = Driver()
    d.apply(put(b"unrelated"))
    d.apply(grant(7, 5, at=T0))
    assert d.image.leases.get(7) == Lease(7, 5, granted_offset=2, last_refresh_ms=T0)
    assert d.effects[-1] == Effect("lease", lease_key(7), d.image.leases.get(7).to_record())  # type: ignore[union-attr]


def test_duplicate_grant_id_is_rejected_and_changes_nothing() -> None:
    d = Driver()
    d.apply(grant(7, 5))
    with pytest.raises(Rejected) as err:
        d.apply(grant(7, 60, at=T0 + 10))
    assert err.value.status == StatusCode.FAILED_PRECONDITION
    assert d.image.leases.get(7) == Lease(7, 5, 1, T0)


@pytest.mark.parametrize("ttl", [0, -3])
def test_non_positive_ttl_is_rejected_naming_the_field(ttl: int) -> None:
    d = Driver()
    with pytest.raises(Rejected) as err:
        d.apply(grant(7, ttl))
    assert err.value.status == StatusCode.INVALID_ARGUMENT and "TTL" in str(err.value)
    assert len(d.image.leases) == 0


def test_put_with_unknown_lease_is_not_found() -> None:
    d = Driver()
    with pytest.raises(Rejected) as err:
        d.apply(put(b"k", lease=99))
    assert (err.value.status, str(err.value)) == (
        StatusCode.NOT_FOUND,
        "etcdserver: requested lease not found",
    )
    assert d.image.kv.get(b"k") is None


def test_keys_attach_to_their_lease_and_move_between_leases() -> None:
    d = Driver()
    d.apply(grant(1, 5))
    d.apply(grant(2, 5))
    d.apply(put(b"a", 1))
    d.apply(put(b"b", 1))
    assert d.image.kv.keys_of_lease(1) == {b"a", b"b"}
    d.apply(put(b"b", 2))  # re-put with another lease
    d.apply(put(b"a"))  # re-put without a lease
    assert d.image.kv.keys_of_lease(1) == frozenset()
    assert d.image.kv.keys_of_lease(2) == {b"b"}
    d.apply(delete(b"b"))
    assert d.image.kv.keys_of_lease(2) == frozenset()


def test_revoke_deletes_the_lease_and_its_keys_as_delete_effects() -> None:
    d = Driver()
    d.apply(grant(1, 5))
    d.apply(put(b"a", 1), put(b"b", 1), put(b"c"))
    d.effects.clear()
    keys = d.apply(revoke(1))
    assert keys == [b"a", b"b"]
    assert d.effects == [
        Effect("kv", b"a", delete=True),
        Effect("kv", b"b", delete=True),
        Effect("lease", lease_key(1), delete=True),
    ]
    assert d.image.leases.get(1) is None and d.image.kv.get(b"a") is None
    assert d.image.kv.get(b"c") is not None
    assert d.image.kv.keys_of_lease(1) == frozenset()
    with pytest.raises(Rejected) as err:
        d.apply(revoke(1))
    assert err.value.status == StatusCode.NOT_FOUND


def test_refresh_moves_the_deadline_and_never_goes_back_or_revives() -> None:
    d = Driver()
    d.apply(grant(1, 5, at=T0), grant(2, 5, at=T0))
    refreshed = d.apply(refresh(T0 + 3000, (1, T0 + 2000), (2, T0 + 2500), (9, T0)))
    assert refreshed == [1, 2]
    assert d.image.leases.get(1).last_refresh_ms == T0 + 2000  # type: ignore[union-attr]
    d.apply(refresh(T0 + 3000, (1, T0 + 1000)))  # older checkpoint: ignored
    assert d.image.leases.get(1).last_refresh_ms == T0 + 2000  # type: ignore[union-attr]
    d.apply(refresh(T0 + 4000, (1, T0 + 9000)))  # clamped to the entry's time
    assert d.image.leases.get(1).last_refresh_ms == T0 + 4000  # type: ignore[union-attr]
    # lease 2's deadline (T0 + 7500) passed: a late checkpoint does not revive it
    assert d.apply(refresh(T0 + 8000, (2, T0 + 8000))) == []
    assert d.image.leases.get(2).last_refresh_ms == T0 + 2500  # type: ignore[union-attr]


def test_expire_removes_leases_past_their_deadline_with_their_keys() -> None:
    d = Driver()
    d.apply(grant(1, 5, at=T0), grant(2, 10, at=T0))
    d.apply(put(b"k1", 1), put(b"k2", 2))
    d.effects.clear()
    assert d.apply(expire(T0 + 5000, 1, 2)) == [1]  # 2 is not due: skipped
    assert d.effects == [
        Effect("kv", b"k1", delete=True),
        Effect("lease", lease_key(1), delete=True),
    ]
    assert d.image.leases.get(1) is None and d.image.kv.get(b"k1") is None
    assert d.image.leases.get(2) is not None and d.image.kv.get(b"k2") is not None


def test_expire_with_a_stale_timestamp_is_rejected_after_a_refresh() -> None:
    d = Driver()
    d.apply(grant(1, 5, at=T0))
    d.apply(put(b"k", 1))
    d.apply(refresh(T0 + 4000, (1, T0 + 4000)))
    # proposed by a leader that had not seen the refresh yet
    d.effects.clear()
    assert d.apply(expire(T0 + 6000, 1)) == []
    assert d.effects == []
    assert d.image.leases.get(1) is not None and d.image.kv.get(b"k") is not None
    assert d.apply(expire(T0 + 9000, 1)) == [1]


def test_a_rejected_entry_leaves_leases_and_the_key_index_untouched() -> None:
    d = Driver()
    d.apply(grant(1, 5))
    before = d.image
    # the put attaches b"a" to lease 1, then the grant fails: all-or-nothing
    with pytest.raises(Rejected):
        d.apply(put(b"a", 1), grant(2, 5), grant(1, 5))
    assert d.image.kv.keys_of_lease(1) == frozenset()
    assert d.image.leases == before.leases
    d.apply(put(b"b", 1))
    assert d.image.kv.keys_of_lease(1) == {b"b"}


def leased_image() -> MetadataImage:
    d = Driver()
    d.apply(grant(1, 5, at=T0), grant(2, 30, at=T0 + 1))
    d.apply(put(b"a", 1), put(b"b", 2), put(b"c", 2), put(b"d"))
    d.apply(refresh(T0 + 2000, (2, T0 + 2000)))
    return d.image


def test_snapshot_round_trip_keeps_leases_and_attached_keys() -> None:
    image = leased_image()
    records = list(image_records(image))
    assert ("lease", lease_key(1), image.leases.get(1).to_record()) in records  # type: ignore[union-attr]
    back = image_from_records(records, image.revision, 1, REGISTRY)
    assert back.leases == image.leases
    assert dict(back.kv.by_lease) == dict(image.kv.by_lease)
    assert diff_images(image, back) == []


def test_change_log_replay_and_diff_carry_leases() -> None:
    d = Driver()
    d.apply(grant(1, 5, at=T0), grant(2, 30, at=T0))
    d.apply(put(b"a", 1), put(b"b", 2))
    d.apply(revoke(1))
    delta = MetadataDelta(MetadataImage.empty(REGISTRY))
    for eff in d.effects:
        delta.replay(eff.type, eff.key, eff.value, eff.delete)
    replayed = delta.build()
    assert replayed.leases == d.image.leases
    assert dict(replayed.kv.by_lease) == {2: frozenset({b"b"})}
    diff = diff_images(MetadataImage.empty(REGISTRY), d.image)
    assert Effect("lease", lease_key(2), d.image.leases.get(2).to_record()) in diff  # type: ignore[union-attr]
    assert Effect("lease", lease_key(1), delete=True) in diff_images(leased_image(), d.image)


class FakeState:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image


def keeper(image: MetadataImage, grace_ms: int = 2000) -> LeaseKeeper:
    return LeaseKeeper(None, FakeState(image), grace_ms, 1.0)  # type: ignore[arg-type]


def test_leader_expires_at_the_deadline_in_steady_state() -> None:
    k = keeper(leased_image())  # lease 1: refreshed T0, ttl 5 s; lease 2: T0 + 2000, 30 s
    k._leader_since_ms = T0 - 60_000
    assert k.due_for_expiry(T0 + 4999) == []
    assert k.due_for_expiry(T0 + 5000) == [1]


def test_new_leader_adds_one_election_timeout_of_grace_and_no_fresh_ttl() -> None:
    k = keeper(leased_image(), grace_ms=2000)
    k._leader_since_ms = T0 + 4000  # became leader after lease 1's last checkpoint
    assert k.due_for_expiry(T0 + 6999) == []  # not early, and not a full new TTL either:
    assert k.due_for_expiry(T0 + 7000) == [1]  # T0 + ttl + grace


def test_a_keepalive_seen_here_counts_before_its_checkpoint() -> None:
    now = [T0 + 4000]
    image = leased_image()
    k = LeaseKeeper(None, FakeState(image), 2000, 1.0, clock_ms=lambda: now[0])  # type: ignore[arg-type]
    k._leader_since_ms = T0 - 60_000
    lease = image.leases.get(1)
    assert lease is not None
    assert k.keep_alive(lease) == 5
    assert k.due_for_expiry(T0 + 8999) == []
    assert k.due_for_expiry(T0 + 9000) == [1]
    now[0] = T0 + 9000
    assert k.remaining_ttl_s(lease) == 0
    assert k.keep_alive(lease) == 0  # past its deadline: not revived
