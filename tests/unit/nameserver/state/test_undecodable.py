"""A request in the log that protobuf cannot decode (a Txn nested past its depth limit) is a
rejection of that request, the same on every node, never a failure of apply (issue 14)."""

from __future__ import annotations

import pytest
from grpc import StatusCode

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Entry


def nested_txn(depth: int) -> rpc_pb2.TxnRequest:
    txn = rpc_pb2.TxnRequest(
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"k", value=b"v"))]
    )
    for _ in range(depth - 1):
        txn = rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_txn=txn)])
    return txn


def test_a_txn_too_deep_to_decode_is_rejected_and_applies_nothing() -> None:
    sm = MetadataStateMachine.empty(REGISTRY)
    value = records_pb2.TxnOperation(txn=nested_txn(50)).SerializeToString()
    with pytest.raises(Rejected) as info:
        sm.apply(1, 1, [Entry(type="txn", value=value)])
    assert info.value.status == StatusCode.INVALID_ARGUMENT
    assert "cannot be decoded" in str(info.value)
    effects, _ = sm.apply(
        2,
        1,
        [Entry(type="txn", value=records_pb2.TxnOperation(txn=nested_txn(3)).SerializeToString())],
    )
    sm.publish()
    assert [e.key for e in effects] == [b"k"] and sm.image.kv.get(b"k") is not None
