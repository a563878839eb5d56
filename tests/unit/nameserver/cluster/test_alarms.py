"""The ``alarm`` apply rules and the NOSPACE refusal, driven with plain entries.

etcd 3.4's behaviour is the reference (``etcdserver/apply.go`` ``applierV3backend.Alarm``,
``applierV3Capped``; ``api/v3alarm/alarms.go``; ``quota.go``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nameserver.cluster.apply import alarm_entry
from nameserver.cluster.nospace import (
    DEFAULT_QUOTA_BYTES,
    KV_OVERHEAD,
    LEASE_OVERHEAD,
    NO_SPACE,
    SpaceCheck,
    cost,
    image_bytes,
    puts_of,
)
from nameserver.cluster.records import (
    ALARM_CORRUPT,
    ALARM_NONE,
    ALARM_NOSPACE,
    Alarm,
    alarm_text,
)
from nameserver.errors import DataLoss, InvalidArgument, ResourceExhausted
from nameserver.kinds import REGISTRY
from nameserver.leases.expiry import lease_entry
from nameserver.node import NodeFacade
from nameserver.state.machine import MetadataStateMachine, image_from_records, image_records
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Applied, Entry

ACTIVATE, DEACTIVATE = rpc_pb2.AlarmRequest.ACTIVATE, rpc_pb2.AlarmRequest.DEACTIVATE


def alarm(action: int, member_id: int, kind: int) -> Entry:
    return alarm_entry(
        rpc_pb2.AlarmRequest(action=action, memberID=member_id, alarm=kind)  # type: ignore[arg-type]
    )


def put(key: bytes, value: bytes = b"v") -> Entry:
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def delete(key: bytes) -> Entry:
    op = records_pb2.KvOperation(delete_range=rpc_pb2.DeleteRangeRequest(key=key))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def txn(t: rpc_pb2.TxnRequest) -> Entry:
    return Entry(type="txn", value=records_pb2.TxnOperation(txn=t).SerializeToString())


def put_op(key: bytes) -> rpc_pb2.RequestOp:
    return rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=b"v"))


def grant(lease_id: int) -> Entry:
    op = records_pb2.LeaseOperation(grant=records_pb2.LeaseGrant(id=lease_id, ttl_s=60))
    return lease_entry(op, lease_id)


def revoke(lease_id: int) -> Entry:
    op = records_pb2.LeaseOperation(revoke=records_pb2.LeaseRevoke(id=lease_id))
    return lease_entry(op, lease_id)


class Node:
    """A state machine and its offsets (one request per apply unless grouped)."""

    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0

    def apply(self, *entries: Entry, publish: bool = True) -> object:
        self.offset += 1
        _, result = self.sm.apply(self.offset, 1, list(entries))
        if publish:
            self.sm.publish()
        return result

    def alarms(self) -> list[tuple[int, int]]:
        return [(a.member_id, a.alarm) for a in self.sm.image.alarms.list()]


def members(resp: object) -> list[tuple[int, int]]:
    assert isinstance(resp, rpc_pb2.AlarmResponse)
    return [(a.memberID, a.alarm) for a in resp.alarms]


# ------------------------------------------------------------------ apply rules
def test_activate_stores_once_and_answers_the_alarm() -> None:
    n = Node()
    assert members(n.apply(alarm(ACTIVATE, 7, ALARM_NOSPACE))) == [(7, ALARM_NOSPACE)]
    # again: the alarm already raised is the answer, nothing new is stored (etcd's Activate)
    _, result = n.sm.apply(2, 1, [alarm(ACTIVATE, 7, ALARM_NOSPACE)])
    n.sm.publish()
    assert members(result) == [(7, ALARM_NOSPACE)]
    assert n.alarms() == [(7, ALARM_NOSPACE)]
    assert n.sm.image.alarms.nospace


def test_get_lists_all_members_alarms_or_one_type() -> None:
    n = Node()
    n.apply(alarm(ACTIVATE, 2, ALARM_CORRUPT))
    n.apply(alarm(ACTIVATE, 1, ALARM_NOSPACE))
    n.apply(alarm(ACTIVATE, 0, ALARM_NOSPACE))  # member id 0 is taken, as etcd takes it
    image = n.sm.image.alarms
    assert [(a.member_id, a.alarm) for a in image.list(ALARM_NONE)] == [
        (0, ALARM_NOSPACE),
        (1, ALARM_NOSPACE),
        (2, ALARM_CORRUPT),
    ]
    assert [a.member_id for a in image.list(ALARM_NOSPACE)] == [0, 1]
    assert [a.member_id for a in image.list(ALARM_CORRUPT)] == [2]


def test_deactivate_of_an_alarm_not_raised_answers_nothing_and_changes_nothing() -> None:
    n = Node()
    n.apply(alarm(ACTIVATE, 1, ALARM_NOSPACE))
    effects, result = n.sm.apply(2, 1, [alarm(DEACTIVATE, 2, ALARM_NOSPACE)])
    assert members(result) == [] and effects == []
    effects, result = n.sm.apply(3, 1, [alarm(DEACTIVATE, 1, ALARM_CORRUPT)])
    assert members(result) == [] and effects == []
    n.sm.publish()
    assert n.alarms() == [(1, ALARM_NOSPACE)]


def test_deactivate_disarms_and_answers_the_alarm_removed() -> None:
    n = Node()
    n.apply(alarm(ACTIVATE, 1, ALARM_NOSPACE))
    n.apply(alarm(ACTIVATE, 2, ALARM_NOSPACE))
    effects, result = n.sm.apply(3, 1, [alarm(DEACTIVATE, 1, ALARM_NOSPACE)])
    n.sm.publish()
    assert members(result) == [(1, ALARM_NOSPACE)]
    assert [(e.type, e.delete) for e in effects] == [("alarm", True)]
    assert n.sm.image.alarms.nospace  # member 2's alarm is still raised
    n.apply(alarm(DEACTIVATE, 2, ALARM_NOSPACE))
    assert not n.sm.image.alarms.nospace and n.alarms() == []


@pytest.mark.parametrize(
    "request_",
    [
        rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET),
        rpc_pb2.AlarmRequest(action=ACTIVATE, alarm=9),  # type: ignore[arg-type]
    ],
    ids=["get-is-not-proposed", "unknown-type"],
)
def test_a_bad_alarm_request_is_refused_naming_the_field(request_: rpc_pb2.AlarmRequest) -> None:
    with pytest.raises(InvalidArgument, match="alarm"):
        alarm_entry(request_)
    n = Node()
    bad = Entry(
        type="alarm", value=records_pb2.AlarmOperation(request=request_).SerializeToString()
    )
    with pytest.raises(InvalidArgument):
        n.apply(bad)
    assert n.alarms() == []


def test_alarms_are_records_a_snapshot_keeps() -> None:
    n = Node()
    n.apply(alarm(ACTIVATE, 5, ALARM_NOSPACE))
    n.apply(alarm(ACTIVATE, 6, ALARM_CORRUPT))
    image = n.sm.image
    again = image_from_records(image_records(image), image.revision, 1, REGISTRY)
    assert again.alarms == image.alarms and again.alarms.nospace
    assert Alarm.from_record(Alarm(5, ALARM_NOSPACE).to_record()) == Alarm(5, ALARM_NOSPACE)


# ------------------------------------------------------------ NOSPACE refusal
@pytest.mark.parametrize(
    "entry",
    [
        put(b"k"),
        txn(rpc_pb2.TxnRequest(success=[put_op(b"a")])),
        txn(rpc_pb2.TxnRequest(failure=[put_op(b"a")])),
        txn(  # a put in a nested txn (etcd's cost skips it; it grows the store all the same)
            rpc_pb2.TxnRequest(
                success=[rpc_pb2.RequestOp(request_txn=rpc_pb2.TxnRequest(success=[put_op(b"a")]))]
            )
        ),
        grant(42),
    ],
    ids=["put", "txn-success-put", "txn-failure-put", "nested-txn-put", "lease-grant"],
)
def test_a_raised_nospace_refuses_growing_writes_in_apply(entry: Entry) -> None:
    n = Node()
    n.apply(put(b"before"))
    n.apply(alarm(ACTIVATE, 3, ALARM_NOSPACE))
    before = n.sm.image
    with pytest.raises(ResourceExhausted, match=f"^{NO_SPACE}$"):
        n.apply(entry)
    assert n.sm.image.kv == before.kv and n.sm.image.leases == before.leases
    n.apply(alarm(DEACTIVATE, 3, ALARM_NOSPACE))
    n.apply(entry)  # disarmed: the same write goes through


@pytest.mark.parametrize(
    "entry",
    [
        delete(b"before"),
        txn(
            rpc_pb2.TxnRequest(
                success=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a"))]
            )
        ),
        txn(
            rpc_pb2.TxnRequest(
                success=[
                    rpc_pb2.RequestOp(
                        request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"before")
                    )
                ]
            )
        ),
        revoke(42),
        Entry(type="noop"),
    ],
    ids=["delete", "txn-read", "txn-delete", "lease-revoke", "noop"],
)
def test_a_raised_nospace_still_applies_what_does_not_grow(entry: Entry) -> None:
    n = Node()
    n.apply(put(b"before"))
    n.apply(grant(42))
    n.apply(alarm(ACTIVATE, 3, ALARM_NOSPACE))
    n.apply(entry)


@pytest.mark.parametrize(
    ("kind", "error"),
    [(ALARM_NOSPACE, ResourceExhausted), (ALARM_CORRUPT, DataLoss)],
    ids=["nospace", "corrupt"],
)
def test_the_refusal_sees_an_alarm_raised_earlier_in_the_same_apply_group(
    kind: int, error: type[Exception]
) -> None:
    """Members publish images at different points: the check reads the delta, so a put
    right after the ACTIVATE is refused whether or not an image was published between."""
    for publish in (True, False):
        n = Node()
        n.apply(alarm(ACTIVATE, 1, kind), publish=publish)
        with pytest.raises(error):
            n.apply(put(b"k"), publish=publish)
        n.apply(alarm(DEACTIVATE, 1, kind), publish=publish)
        n.apply(put(b"k"), publish=publish)
        n.sm.publish()
        assert n.sm.image.kv.get(b"k") is not None and n.alarms() == []


# ------------------------------------------------------------------ the quota
def test_cost_follows_etcds_quota_go() -> None:
    p = put(b"key", b"x" * 100)
    assert puts_of(p) == 1 and cost(p) == len(p.value) + KV_OVERHEAD
    assert cost(grant(1)) == LEASE_OVERHEAD
    two = txn(rpc_pb2.TxnRequest(success=[put_op(b"a")], failure=[put_op(b"b"), put_op(b"c")]))
    assert puts_of(two) == 2  # the larger branch
    assert cost(delete(b"k")) == 0 and cost(revoke(1)) == 0


def test_space_check_refuses_past_the_quota_then_while_the_alarm_is_raised() -> None:
    n = Node()
    n.apply(put(b"a", b"x" * 1000))
    size = image_bytes(n.sm.image)
    assert size == len(b"a") + 1000 + KV_OVERHEAD
    small, big = put(b"b", b"y"), put(b"b", b"y" * 2000)
    check = SpaceCheck(size + cost(small) + 1)
    assert check.refuses(n.sm.image, small) is None
    assert check.refuses(n.sm.image, big) == "quota"
    t = txn(rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_put=big_put())]))
    assert check.refuses(n.sm.image, t) == "quota"
    assert check.refuses(n.sm.image, delete(b"a")) is None
    n.apply(alarm(ACTIVATE, 1, ALARM_NOSPACE))
    assert check.refuses(n.sm.image, small) == "alarm"
    assert check.refuses(n.sm.image, delete(b"a")) is None
    assert SpaceCheck(-1).refuses(n.sm.image, big) == "alarm"
    assert SpaceCheck(0).quota == DEFAULT_QUOTA_BYTES


def test_space_check_recounts_only_the_kinds_a_new_image_changed() -> None:
    n = Node()
    check = SpaceCheck(DEFAULT_QUOTA_BYTES)
    steps = [put(b"a", b"x" * 100), grant(7), put(b"a", b"y"), delete(b"a"), revoke(7)]
    for step in steps:
        n.apply(step)
        assert check.size(n.sm.image) == image_bytes(n.sm.image)  # the cache, uncached
    before = n.sm.image
    n.apply(put(b"b", b"z" * 50))
    assert n.sm.image.leases is before.leases  # untouched: counted once, not per image
    assert check.size(n.sm.image) == image_bytes(n.sm.image) == len(b"b") + 50 + KV_OVERHEAD


def big_put() -> rpc_pb2.PutRequest:
    return rpc_pb2.PutRequest(key=b"t", value=b"z" * 4000)


def test_no_quota_refuses_nothing_while_no_alarm_is_raised() -> None:
    n = Node()
    assert SpaceCheck(-1).refuses(n.sm.image, put(b"k", b"v" * 10_000)) is None


def test_alarm_text_is_gos_string_of_an_alarm_member() -> None:
    assert alarm_text(42, ALARM_NOSPACE) == "memberID:42 alarm:NOSPACE "
    assert alarm_text(0, ALARM_CORRUPT) == "alarm:CORRUPT "
    assert alarm_text(5, ALARM_NONE) == "memberID:5 "


# ------------------------------------------------ raising NOSPACE before proposing
class _CountingLog:
    """A log that records what is proposed and answers after a moment."""

    def __init__(self) -> None:
        self.proposed: list[list[Entry]] = []

    async def propose(self, entries: list[Entry], timeout_s: float, *dedup: Any) -> Applied:
        self.proposed.append(entries)
        await asyncio.sleep(0.01)
        return Applied(len(self.proposed), None)


def test_a_write_past_the_quota_raises_nospace_once_and_is_refused() -> None:
    """etcd's quotaAlarmer: the member proposes ACTIVATE NOSPACE for itself and refuses
    the write; concurrent refusals share one proposal."""
    node = NodeFacade.__new__(NodeFacade)
    counting = _CountingLog()
    node.log, node.timeout_s, node.member_id = counting, 1.0, 99  # type: ignore[assignment]
    node.state, node.space, node._raising = MetadataStateMachine.empty(REGISTRY), SpaceCheck(10), {}

    async def main() -> list[BaseException | Applied]:
        writes = [node.propose(put(b"k%d" % i, b"x" * 100), None) for i in range(5)]
        return await asyncio.gather(*writes, return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, ResourceExhausted) and str(r) == NO_SPACE for r in results)
    assert len(counting.proposed) == 1
    (entry,) = counting.proposed[0]
    request = records_pb2.AlarmOperation.FromString(entry.value).request
    assert (entry.type, request.action, request.memberID, request.alarm) == (
        "alarm",
        ACTIVATE,
        99,
        ALARM_NOSPACE,
    )
