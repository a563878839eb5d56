"""Replicator offsets, quotas and consistency by type, driven through the state machine with
plain entries (no consensus, no gRPC)."""

from __future__ import annotations

from typing import Any

import pytest
from grpc import StatusCode

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.offsets.records import CommittedOffset, offset_key
from nameserver.state.consistency import LINEARIZABLE, SERIALIZABLE, declared, read_mode
from nameserver.state.image import MetadataImage
from nameserver.state.machine import (
    MetadataStateMachine,
    diff_images,
    image_from_records,
    image_records,
)
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Entry


def grant(lease_id: int, ttl_s: int = 10) -> Entry:
    op = records_pb2.LeaseOperation()
    op.grant.id, op.grant.ttl_s = lease_id, ttl_s
    return Entry(type="lease", value=op.SerializeToString(), timestamp_ms=1000)


def revoke(lease_id: int) -> Entry:
    op = records_pb2.LeaseOperation()
    op.revoke.id = lease_id
    return Entry(type="lease", value=op.SerializeToString(), timestamp_ms=1000)


def commit(
    token: int, lease: int, position: int, job: str = "j", partition: str = "p", **kw: Any
) -> Entry:
    op = records_pb2.OffsetOperation(
        commit=records_pb2.OffsetCommit(
            job=job,
            partition=partition,
            offset=str(position).encode(),
            position=position,
            lease_id=lease,
            fencing_token=token,
            **kw,
        )
    )
    return Entry(type="offset", value=op.SerializeToString())


def reset(position: int, job: str = "j", partition: str = "p", **kw: Any) -> Entry:
    op = records_pb2.OffsetOperation(
        reset=records_pb2.OffsetReset(
            job=job, partition=partition, offset=b"r", position=position, **kw
        )
    )
    return Entry(type="offset", value=op.SerializeToString())


def put(key: bytes, value: bytes, lease: int = 0) -> Entry:
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def delete(key: bytes) -> Entry:
    op = records_pb2.KvOperation(delete_range=rpc_pb2.DeleteRangeRequest(key=key))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def quota(record_type: str, max_keys: int = 0, max_bytes: int = 0) -> Entry:
    q = records_pb2.QuotaRecord(record_type=record_type, max_keys=max_keys, max_bytes=max_bytes)
    return Entry(type="quota", value=q.SerializeToString())


class Driver:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0

    def apply(self, *entries: Entry) -> Any:
        self.offset += 1
        _, result = self.sm.apply(self.offset, 1, list(entries))
        self.sm.publish()
        return result

    def rejected(self, *entries: Entry) -> Rejected:
        before = self.sm.image
        with pytest.raises(Rejected) as info:
            self.apply(*entries)
        self.sm.publish()
        assert self.sm.image.offsets == before.offsets and self.sm.image.kv == before.kv
        return info.value

    def stored(self, job: str = "j", partition: str = "p") -> CommittedOffset | None:
        return self.sm.image.offsets.get(offset_key(job, partition))


def leased() -> tuple[Driver, int]:
    d = Driver()
    d.apply(grant(7))
    return d, 1  # lease 7, granted at offset 1: its token


def test_first_commit_creates_version_1_epoch_1() -> None:
    d, token = leased()
    result = d.apply(commit(token, 7, 5))
    assert result == d.stored()
    assert result.version == 1 and result.epoch == 1 and result.position == 5
    assert result.fencing_token == token and result.lease_id == 7 and result.mod_revision == 2
    again = d.apply(commit(token, 7, 5))  # the same position again: idempotent
    assert again.version == 2 and again.create_revision == 2 and again.mod_revision == 3


def test_unknown_or_revoked_lease_is_not_found() -> None:
    d, token = leased()
    err = d.rejected(commit(token, 99, 1))
    assert err.status == StatusCode.NOT_FOUND and "requested lease not found" in str(err)
    assert "lease_id 63" in str(err)
    d.apply(revoke(7))
    assert d.rejected(commit(token, 7, 1)).status == StatusCode.NOT_FOUND


def test_token_must_belong_to_the_lease() -> None:
    d, token = leased()
    err = d.rejected(commit(token + 1, 7, 1))
    assert err.status == StatusCode.FAILED_PRECONDITION
    assert "fencing_token 2 is not a token" in str(err)
    d.apply(put(b"lock/owner", b"w", lease=7))  # its create revision: a lock token of lease 7
    lock_token = d.offset
    assert d.apply(commit(lock_token, 7, 1)).fencing_token == lock_token


def test_stale_token_rejected_after_a_newer_holder_committed() -> None:
    d, old = leased()
    d.apply(commit(old, 7, 10))
    d.apply(grant(8))  # offset 3: the newer holder's token
    d.apply(commit(3, 8, 20))
    err = d.rejected(commit(old, 7, 30))
    assert err.status == StatusCode.FAILED_PRECONDITION
    assert "stale fencing_token 1" in str(err) and "newer fencing token 3" in str(err)
    assert d.stored().position == 20


def test_backwards_rejected_unless_reset() -> None:
    d, token = leased()
    d.apply(commit(token, 7, 10))
    err = d.rejected(commit(token, 7, 9))
    assert err.status == StatusCode.FAILED_PRECONDITION
    assert "position 9 < committed position 10" in str(err)
    r = d.apply(reset(2))
    assert (r.position, r.epoch, r.version, r.reset_revision) == (2, 2, 2, 4)
    assert r.fencing_token == token and r.lease_id == 0


def test_a_stale_worker_cannot_undo_a_reset() -> None:
    d, token = leased()
    d.apply(commit(token, 7, 10))
    d.apply(reset(2))
    err = d.rejected(commit(token, 7, 50))
    assert "was reset at revision 3 (epoch 2)" in str(err) and "epoch 2" in str(err)
    assert d.apply(commit(token, 7, 3, epoch=2)).position == 3  # it saw the reset
    d.apply(grant(9))  # a token newer than the reset
    assert d.apply(commit(d.offset, 9, 4)).position == 4


def test_expected_version_and_epoch() -> None:
    d, token = leased()
    err = d.rejected(commit(token, 7, 1, expected_version=1))
    assert "expected_version 1 but" in str(err) and "version 0" in str(err)
    d.apply(commit(token, 7, 1))
    d.apply(commit(token, 7, 2, expected_version=1))
    assert "epoch 5 is not the current epoch 1" in str(d.rejected(commit(token, 7, 3, epoch=5)))
    assert d.rejected(reset(0, expected_version=1)).status == StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        (commit(1, 7, 1, job=""), "job must not be empty"),
        (commit(1, 7, 1, partition=""), "partition must not be empty"),
        (commit(1, 7, 1, job="a\x00b"), "job must not contain a NUL"),
        (commit(1, 7, 1, job="x" * 1025), "job is too long: 1025 bytes > limit 1024"),
        (commit(1, 7, -1), "position must be >= 0"),
        (commit(1, 7, 1, expected_version=-1), "expected_version must be >= 0"),
        (commit(1, 7, 1, epoch=-2), "epoch must be >= 0"),
        (commit(1, 0, 1), "lease_id must be"),
        (commit(0, 7, 1), "fencing_token must be > 0"),
        (reset(-5), "position must be >= 0"),
        (Entry(type="offset", value=b""), "offset entry carries no operation"),
    ],
)
def test_bad_input_names_the_field(entry: Entry, names: str) -> None:
    d, _ = leased()
    err = d.rejected(entry)
    assert err.status == StatusCode.INVALID_ARGUMENT and names in str(err)


def test_list_by_job_and_prefix() -> None:
    d, token = leased()
    for job, part in [("a", "0"), ("a", "1"), ("ab", "0"), ("b", "0")]:
        d.apply(commit(token, 7, 1, job=job, partition=part))
    offs = d.sm.image.offsets
    assert [(o.job, o.partition) for o in offs.of_job("a")] == [("a", "0"), ("a", "1")]
    assert [o.job for o in offs.of_job("a", prefix=True)] == ["a", "a", "ab"]
    assert len(list(offs.of_job("", prefix=True))) == 4


# ---------------------------------------------------------------------------- quotas
def test_kv_quota_rejects_the_whole_request_and_allows_deletes() -> None:
    d = Driver()
    d.apply(quota("kv", max_keys=2))
    d.apply(put(b"a", b"1"))
    d.apply(put(b"b", b"1"))
    op = rpc_pb2.TxnRequest(
        success=[
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"a", value=b"2")),
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"c", value=b"3")),
        ]
    )
    txn = Entry(type="txn", value=records_pb2.TxnOperation(txn=op).SerializeToString())
    err = d.rejected(txn)
    assert err.status == StatusCode.RESOURCE_EXHAUSTED
    assert str(err) == "metaledger: quota exceeded for record type kv: 3 keys > limit 2"
    assert d.sm.image.kv.get(b"a").value == b"1"  # nothing partially applied
    d.apply(put(b"a", b"overwrite"))  # no new key: allowed
    d.apply(quota("kv", max_keys=1))  # a limit below usage: only growth is refused
    d.apply(delete(b"b"))
    assert d.rejected(put(b"d", b"x")).status == StatusCode.RESOURCE_EXHAUSTED


def test_byte_quota_counts_keys_and_values_incrementally() -> None:
    d = Driver()
    d.apply(put(b"k1", b"12345"))
    assert d.sm.image.kv.value_bytes == 7
    d.apply(quota("kv", max_bytes=10))
    err = d.rejected(put(b"k2", b"12"))
    assert str(err) == "metaledger: quota exceeded for record type kv: 11 bytes > limit 10"
    d.apply(put(b"k1", b"1"))  # shrinks
    d.apply(put(b"k2", b"12"))
    assert d.sm.image.kv.value_bytes == 7
    d.apply(delete(b"k1"))
    assert d.sm.image.kv.value_bytes == 4


def test_offset_and_lease_quotas() -> None:
    d, token = leased()
    d.apply(quota("offset", max_keys=1))
    d.apply(commit(token, 7, 1, partition="0"))
    err = d.rejected(commit(token, 7, 1, partition="1"))
    assert "record type offset: 2 keys > limit 1" in str(err)
    d.apply(quota("lease", max_keys=1))
    assert "record type lease: 2 keys > limit 1" in str(d.rejected(grant(8)))


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        (quota("member", 1), "record_type 'member' has no quota"),
        (quota("kv", -1), "max_keys must be >= 0"),
        (quota("kv", 0, -1), "max_bytes must be >= 0"),
    ],
)
def test_bad_quota(entry: Entry, names: str) -> None:
    err = Driver().rejected(entry)
    assert err.status == StatusCode.INVALID_ARGUMENT and names in str(err)


def test_quota_back_to_default_deletes_the_record() -> None:
    d = Driver()
    d.apply(quota("kv", 5))
    assert d.sm.image.quotas.get("kv") is not None
    d.apply(quota("kv", 0, 0))
    assert d.sm.image.quotas.get("kv") is None


# -------------------------------------------------------------- snapshots and diff
def test_offsets_and_quotas_round_trip_through_records() -> None:
    d, token = leased()
    d.apply(commit(token, 7, 3, job="r", partition="q1"))
    d.apply(reset(1, job="r", partition="q2"))
    d.apply(quota("offset", 10, 1000))
    d.apply(put(b"k", b"vv"))
    image = d.sm.image
    again = image_from_records(list(image_records(image)), image.revision, 1, REGISTRY)
    assert again.offsets.data.items() and list(again.offsets.data.items()) == list(
        image.offsets.data.items()
    )
    assert again.offsets.value_bytes == image.offsets.value_bytes
    assert again.kv.value_bytes == image.kv.value_bytes == 3
    assert again.quotas == image.quotas
    effects = diff_images(MetadataImage.empty(REGISTRY), image)
    assert {e.type for e in effects} >= {"offset", "quota"}
    assert diff_images(image, MetadataImage.empty(REGISTRY)) and not diff_images(image, again)


# ------------------------------------------------------------ consistency by type
def test_consistency_table() -> None:
    assert declared("offset", REGISTRY) == declared("lease", REGISTRY) == LINEARIZABLE
    assert read_mode("offset", serializable=True, registry=REGISTRY) == LINEARIZABLE
    assert read_mode("lease", serializable=True, registry=REGISTRY) == LINEARIZABLE
    assert read_mode("kv", serializable=True, registry=REGISTRY) == SERIALIZABLE
    assert read_mode("kv", serializable=False, registry=REGISTRY) == LINEARIZABLE
    assert (
        read_mode("routing", serializable=False, registry=REGISTRY) == SERIALIZABLE
    )  # eventual: local image
    with pytest.raises(KeyError):
        read_mode("nope", serializable=False, registry=REGISTRY)
