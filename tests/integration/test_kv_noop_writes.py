"""Writes that change no key take no log entry: a DeleteRange of an empty range and a Txn
whose taken branch has no put and deletes nothing are answered as a linearizable read
(etcd's store revision stays put for them), unless the client de-duplicates its retries
(``x-ml-client-id``/``x-ml-seq``: a retry of one applied must be told so) or a NOSPACE
alarm refuses the txn whichever branch it takes (as etcd's capped applier does)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2 as pb
from tests.harness import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("noop"), n=1) as c:
        c.wait_ready(60)
        yield c


def _applied(cluster: Cluster) -> int:
    return int(cluster.status(0, timeout=10).apply_offset)


def _cas(expect: bytes, then: list[pb.RequestOp], otherwise: list[pb.RequestOp]) -> Any:
    cmp = pb.Compare(key=b"n/a", target=pb.Compare.VALUE, result=pb.Compare.EQUAL, value=expect)
    return pb.TxnRequest(compare=[cmp], success=then, failure=otherwise)


PUT_B = pb.RequestOp(request_put=pb.PutRequest(key=b"n/b", value=b"1"))
GET_A = pb.RequestOp(request_range=pb.RangeRequest(key=b"n/a"))
DELETE_MISSING = pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=b"n/none"))


def test_writes_that_change_nothing_take_no_entry(cluster: Cluster) -> None:
    kv = cluster.stub(0)
    put = kv.Put(pb.PutRequest(key=b"n/a", value=b"1"), timeout=10)
    start = _applied(cluster)

    gone = kv.DeleteRange(pb.DeleteRangeRequest(key=b"n/none", prev_kv=True), timeout=10)
    assert (gone.deleted, list(gone.prev_kvs)) == (0, [])
    prefix = kv.DeleteRange(pb.DeleteRangeRequest(key=b"n/x", range_end=b"n/y"), timeout=10)
    assert prefix.deleted == 0
    failed = kv.Txn(_cas(b"2", [PUT_B], [GET_A]), timeout=10)  # a failed compare-and-swap
    assert not failed.succeeded
    assert [kv.value for kv in failed.responses[0].response_range.kvs] == [b"1"]
    nothing = kv.Txn(_cas(b"1", [DELETE_MISSING], [PUT_B]), timeout=10)
    assert nothing.succeeded and nothing.responses[0].response_delete_range.deleted == 0
    for resp in (gone, prefix, failed, nothing):
        assert resp.header.revision == put.header.revision
    assert _applied(cluster) == start  # no entry

    # the same requests that do change a key are proposed as before
    done = kv.Txn(_cas(b"1", [PUT_B], [GET_A]), timeout=10)
    assert done.succeeded and done.header.revision > put.header.revision
    deleted = kv.DeleteRange(pb.DeleteRangeRequest(key=b"n/b"), timeout=10)
    assert deleted.deleted == 1 and deleted.header.revision > done.header.revision


def test_a_deduplicated_write_is_proposed_even_when_it_changes_nothing(cluster: Cluster) -> None:
    kv = cluster.stub(0)
    start = _applied(cluster)
    md = [("x-ml-client-id", "noop-test"), ("x-ml-seq", "1")]
    first = kv.Txn(_cas(b"9", [PUT_B], [GET_A]), timeout=10, metadata=md)
    assert not first.succeeded
    assert _applied(cluster) == start + 1
    with pytest.raises(grpc.RpcError) as err:  # its retry is told it was applied
        kv.Txn(_cas(b"9", [PUT_B], [GET_A]), timeout=10, metadata=md)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    before = _applied(cluster)
    kv.DeleteRange(
        pb.DeleteRangeRequest(key=b"n/none"), timeout=10, metadata=[md[0], ("x-ml-seq", "2")]
    )
    assert _applied(cluster) == before + 1
