"""Properties of replicator offsets under any mix of commits (good and stale tokens, forwards
and backwards), resets, lease grants and expiries, applied through the state machine:

* an offset never moves backwards except by a reset;
* the fencing token that committed never decreases, and every accepted commit carried a live
  lease and one of its tokens;
* after a reset, no commit with a token older than the reset and without the new epoch wins;
* quotas hold whatever the mix, and the image round-trips through snapshot records.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.offsets.records import offset_key
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

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARTITIONS = ["p0", "p1"]

grant_op = st.tuples(st.just("grant"))
commit_op = st.tuples(
    st.just("commit"),
    st.integers(0, 1),  # which lease: 0 = the newest grant, 1 = the one before (may be gone)
    st.sampled_from(["own", "own", "own", "older", "other", "lock"]),  # which token it sends
    st.integers(-3, 10),  # position, relative to the stored one (mostly forwards)
    st.sampled_from(PARTITIONS),
    st.booleans(),  # send the current epoch
)
ops = st.lists(
    st.one_of(
        grant_op,
        commit_op,
        commit_op,  # listed twice: commits are most of the traffic
        st.tuples(st.just("expire"), st.integers(0, 3)),
        st.tuples(st.just("reset"), st.integers(0, 40), st.sampled_from(PARTITIONS)),
        st.tuples(st.just("quota"), st.integers(0, 3)),
        st.tuples(st.just("lock"), st.integers(0, 3)),  # a key attached to a lease: a lock token
    ),
    min_size=8,
    max_size=60,
)


def entry(type_: str, msg: object, ts: int = 1000) -> Entry:
    return Entry(type=type_, value=msg.SerializeToString(), timestamp_ms=ts)  # type: ignore[attr-defined]


@SETTINGS
@given(script=ops)
def test_offsets_never_go_backwards_without_a_reset(script: list[tuple[object, ...]]) -> None:
    sm = MetadataStateMachine.empty(REGISTRY)
    offset = 0
    grants: list[tuple[int, int]] = []  # (lease id, grant offset) in grant order
    locks: dict[int, int] = {}  # lease id -> create revision of a key attached to it
    lock_lease = 0
    sent_epoch = 0  # the epoch the last commit carried (0: none)
    for op in script:
        offset += 1
        kind = op[0]
        image = sm.image
        if kind == "grant":
            lease_id = len(grants) + 1
            g = records_pb2.LeaseOperation()
            g.grant.id, g.grant.ttl_s = lease_id, 1
            e = entry("lease", g)
            grants.append((lease_id, offset))
        elif kind == "expire":
            x = records_pb2.LeaseOperation()
            x.expire.ids.append(int(op[1]) + 1)  # type: ignore[call-overload]
            e = entry("lease", x, ts=10_000)
        elif kind == "commit":
            _, which, token_kind, position, partition, with_epoch = op
            lease_id, granted = grants[-1 - int(which) % len(grants)] if grants else (1, 1)  # type: ignore[call-overload]
            token = {
                "own": granted,
                "older": max(1, granted - 1),
                "other": granted + 1,
                "lock": locks.get(lease_id, granted),
            }[str(token_kind)]
            current = image.offsets.get(offset_key("job", str(partition)))
            position = max(0, (current.position if current else 0) + int(position))  # type: ignore[call-overload]
            c = records_pb2.OffsetCommit(
                job="job",
                partition=str(partition),
                offset=b"x",
                position=position,
                lease_id=lease_id,
                fencing_token=token,
                epoch=current.epoch if (current and with_epoch) else 0,
            )
            sent_epoch = c.epoch
            e = entry("offset", records_pb2.OffsetOperation(commit=c))
        elif kind == "lock":
            lock_lease = grants[int(op[1]) % len(grants)][0] if grants else 1  # type: ignore[call-overload]
            put = rpc_pb2.PutRequest(key=b"lock/%d" % lock_lease, value=b"", lease=lock_lease)
            e = entry("kv", records_pb2.KvOperation(put=put))
        elif kind == "reset":
            r = records_pb2.OffsetReset(job="job", partition=str(op[2]), position=int(op[1]))  # type: ignore[call-overload]
            e = entry("offset", records_pb2.OffsetOperation(reset=r))
        else:
            q = records_pb2.QuotaRecord(record_type="offset", max_keys=int(op[1]))  # type: ignore[call-overload]
            e = entry("quota", q)
        try:
            sm.apply(offset, 1, [e])
            accepted = True
        except Rejected:
            accepted = False
        sm.publish()
        after = sm.image
        if accepted and kind == "lock":
            locks[lock_lease] = offset
        _check_step(image, after, kind, accepted, offset, sent_epoch)
        quota = after.quotas.get("offset")
        if quota is not None and quota.max_keys and len(after.offsets) > len(image.offsets):
            assert len(after.offsets) <= quota.max_keys
    # snapshot round trip of everything the script built
    image = sm.image
    again = image_from_records(list(image_records(image)), image.revision, 1, REGISTRY)
    assert list(again.offsets.data.items()) == list(image.offsets.data.items())
    assert again.offsets.value_bytes == image.offsets.value_bytes
    assert again.quotas == image.quotas and again.leases == image.leases
    assert diff_images(image, again) == []


def _check_step(
    before: MetadataImage,
    after: MetadataImage,
    kind: str,
    accepted: bool,
    offset: int,
    sent_epoch: int,
) -> None:
    for partition in PARTITIONS:
        key = offset_key("job", partition)
        old, new = before.offsets.get(key), after.offsets.get(key)
        if old is None or new is None or old == new:
            continue
        assert accepted
        if kind == "reset":
            assert new.epoch == old.epoch + 1 and new.reset_revision == offset
            continue
        assert kind == "commit"
        assert new.position >= old.position, "moved backwards without a reset"
        assert new.fencing_token >= old.fencing_token, "a stale token won"
        lease = before.leases.get(new.lease_id)
        assert lease is not None, "a commit from a gone lease won"
        lock_tokens = {
            kv.create_revision
            for k in before.kv.keys_of_lease(lease.id)
            if (kv := before.kv.get(k)) is not None
        }
        assert new.fencing_token in {lease.granted_offset} | lock_tokens, "a foreign token won"
        if old.reset_revision > new.fencing_token:
            assert sent_epoch == old.epoch, "a pre-reset token undid a reset"
