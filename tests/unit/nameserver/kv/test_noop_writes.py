"""The KV service's test of "this write changes no key" (then it is answered as a
linearizable read, with no entry) agrees with apply: for every txn and delete below, it says
"writes" exactly when applying it yields changes."""

from __future__ import annotations

import pytest

from nameserver.kinds import REGISTRY
from nameserver.kv.service import _deletes, _txn_writes
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2 as pb
from raftlog import Entry

EQUAL = pb.Compare.EQUAL


def put_op(key: bytes, value: bytes = b"v") -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value))


def delete_op(key: bytes, range_end: bytes = b"") -> pb.RequestOp:
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key, range_end=range_end))


def range_op(key: bytes) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key))


def txn_op(txn: pb.TxnRequest) -> pb.RequestOp:
    return pb.RequestOp(request_txn=txn)


def value_is(key: bytes, value: bytes) -> pb.Compare:
    return pb.Compare(key=key, target=pb.Compare.VALUE, result=EQUAL, value=value)


def txn(
    compare: list[pb.Compare], success: list[pb.RequestOp], failure: list[pb.RequestOp] = ()
) -> pb.TxnRequest:
    return pb.TxnRequest(compare=compare, success=success, failure=list(failure))


HOLDS, FAILS = value_is(b"a", b"1"), value_is(b"a", b"2")

TXNS = {
    "compare holds, put": txn([HOLDS], [put_op(b"b")], [range_op(b"a")]),
    "compare fails, range": txn([FAILS], [put_op(b"b")], [range_op(b"a")]),
    "no compare, put": txn([], [put_op(b"b")]),
    "delete of a missing key": txn([HOLDS], [delete_op(b"zz")]),
    "delete of a present key": txn([HOLDS], [delete_op(b"a")]),
    "delete of an empty range": txn([], [delete_op(b"m", b"n")]),
    "delete of a range with keys": txn([], [delete_op(b"a", b"c")]),
    "delete from a key on": txn([], [delete_op(b"b", b"\0")]),
    "nested txn that puts": txn([HOLDS], [txn_op(txn([HOLDS], [put_op(b"c")]))]),
    "nested txn that fails to a range": txn(
        [HOLDS], [range_op(b"a"), txn_op(txn([FAILS], [put_op(b"c")], [range_op(b"a")]))]
    ),
    "nested txn in the branch not taken": txn(
        [FAILS], [txn_op(txn([], [put_op(b"c")]))], [delete_op(b"zz")]
    ),
    "a missing delete, then a put": txn([], [delete_op(b"zz"), put_op(b"c")]),
}


@pytest.fixture
def machine() -> MetadataStateMachine:
    m = MetadataStateMachine.empty(REGISTRY)
    for offset, key in enumerate((b"a", b"bb"), 1):
        op = records_pb2.KvOperation(put=pb.PutRequest(key=key, value=b"1"))
        m.apply(offset, 1, [Entry("kv", key, op.SerializeToString())])
        m.publish()
    return m


@pytest.mark.parametrize("name", sorted(TXNS))
def test_a_txn_writes_exactly_when_apply_changes_a_key(
    machine: MetadataStateMachine, name: str
) -> None:
    req = TXNS[name]
    said = _txn_writes(machine.image.kv, req)
    value = records_pb2.TxnOperation(txn=req).SerializeToString()
    effects, _ = machine.apply(3, 1, [Entry("txn", value=value)])
    assert said == bool(effects), (name, effects)


@pytest.mark.parametrize(
    ("key", "range_end", "deletes"),
    [
        (b"a", b"", True),
        (b"zz", b"", False),
        (b"b", b"c", True),
        (b"c", b"d", False),
        (b"b", b"\0", True),
        (b"c", b"\0", False),
        (b"b", b"a", False),  # an end before the key: nothing
    ],
)
def test_a_delete_range_deletes_exactly_when_apply_does(
    machine: MetadataStateMachine, key: bytes, range_end: bytes, deletes: bool
) -> None:
    req = pb.DeleteRangeRequest(key=key, range_end=range_end)
    assert _deletes(machine.image.kv, req) is deletes
    op = records_pb2.KvOperation(delete_range=req).SerializeToString()
    effects, _ = machine.apply(3, 1, [Entry("kv", key, op)])
    assert bool(effects) is deletes
