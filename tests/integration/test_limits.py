"""Bad input against a 3-node cluster: each request gets INVALID_ARGUMENT (NOT_FOUND for
an unknown lease) with a message naming the field or limit, and the cluster keeps serving
with nothing lost. Limits are etcd's (nameserver/config.py): values up to 1.5 MiB,
requests up to 2 MiB, at most 128 operations per txn branch.

Bad requests go through a follower (which would forward a write) and the leader alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2 as pb
from tests.harness import Cluster

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
MAX_VALUE = 3 * MiB // 2
MAX_REQUEST = 2 * MiB
MAX_TXN_OPS = 128


def put_op(key: bytes, value: bytes = b"v", lease: int = 0) -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value, lease=lease))


def range_op(key: bytes) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key))


def delete_op(key: bytes, range_end: bytes = b"") -> pb.RequestOp:
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key, range_end=range_end))


def version_is_zero(key: bytes) -> pb.Compare:
    return pb.Compare(key=key, target=pb.Compare.VERSION, result=pb.Compare.EQUAL, version=0)


@dataclass(frozen=True)
class Bad:
    """A request the server must refuse, how, and what the message must name."""

    name: str
    method: str  # KV method
    request: Callable[[], Any]
    code: grpc.StatusCode
    names: tuple[str, ...]  # substrings of the error message
    writes_keys: tuple[bytes, ...] = ()  # keys that must not exist afterwards


INVALID = grpc.StatusCode.INVALID_ARGUMENT
EMPTY_KEY = ("key is not provided",)

BAD_REQUESTS = [
    # empty key
    Bad("put-empty-key", "Put", lambda: pb.PutRequest(key=b"", value=b"x"), INVALID, EMPTY_KEY),
    Bad("get-empty-key", "Range", lambda: pb.RangeRequest(key=b""), INVALID, EMPTY_KEY),
    Bad(
        "get-empty-key-serializable",
        "Range",
        lambda: pb.RangeRequest(key=b"", serializable=True),
        INVALID,
        EMPTY_KEY,
    ),
    Bad("del-empty-key", "DeleteRange", lambda: pb.DeleteRangeRequest(key=b""), INVALID, EMPTY_KEY),
    Bad(
        "txn-put-empty-key",
        "Txn",
        lambda: pb.TxnRequest(success=[put_op(b"limits/ok"), put_op(b"")]),
        INVALID,
        EMPTY_KEY,
        (b"limits/ok",),
    ),
    Bad(
        "txn-get-empty-key",
        "Txn",
        lambda: pb.TxnRequest(success=[range_op(b"")]),
        INVALID,
        EMPTY_KEY,
    ),
    Bad(
        "txn-del-empty-key",
        "Txn",
        lambda: pb.TxnRequest(failure=[delete_op(b"")]),
        INVALID,
        EMPTY_KEY,
    ),
    # value over 1.5 MiB
    Bad(
        "put-value-too-large",
        "Put",
        lambda: pb.PutRequest(key=b"limits/big-value", value=b"v" * (MAX_VALUE + 1)),
        INVALID,
        ("value is too large", "max_value_bytes", str(MAX_VALUE)),
        (b"limits/big-value",),
    ),
    Bad(
        "txn-value-too-large",
        "Txn",
        lambda: pb.TxnRequest(
            success=[put_op(b"limits/small"), put_op(b"limits/big-value", b"v" * (MAX_VALUE + 1))]
        ),
        INVALID,
        ("value is too large", "max_value_bytes"),
        (b"limits/small", b"limits/big-value"),
    ),
    # request over 2 MiB
    Bad(
        "put-request-too-large",  # the value is at the limit; the key makes it too large
        "Put",
        lambda: pb.PutRequest(key=b"limits/k" + b"k" * (700 * 1024), value=b"v" * MAX_VALUE),
        INVALID,
        ("request is too large", "max_request_bytes", str(MAX_REQUEST)),
    ),
    Bad(
        "txn-request-too-large",
        "Txn",
        lambda: pb.TxnRequest(
            success=[put_op(f"limits/mib{i}".encode(), b"m" * MiB) for i in range(3)]
        ),
        INVALID,
        ("request is too large", "max_request_bytes"),
        tuple(f"limits/mib{i}".encode() for i in range(3)),
    ),
    Bad(
        "del-request-too-large",
        "DeleteRange",
        lambda: pb.DeleteRangeRequest(key=b"limits/" + b"d" * (MAX_REQUEST + 1)),
        INVALID,
        ("request is too large", "max_request_bytes"),
    ),
    # more than 128 operations
    Bad(
        "txn-too-many-success-ops",
        "Txn",
        lambda: pb.TxnRequest(
            success=[put_op(f"limits/op{i}".encode()) for i in range(MAX_TXN_OPS + 1)]
        ),
        INVALID,
        ("too many operations", "max_txn_ops", str(MAX_TXN_OPS)),
        (b"limits/op0",),
    ),
    Bad(
        "txn-too-many-failure-ops",
        "Txn",
        lambda: pb.TxnRequest(
            failure=[range_op(f"limits/op{i}".encode()) for i in range(MAX_TXN_OPS + 1)]
        ),
        INVALID,
        ("too many operations", "max_txn_ops"),
    ),
    Bad(
        "txn-too-many-compares",
        "Txn",
        lambda: pb.TxnRequest(
            compare=[version_is_zero(f"limits/c{i}".encode()) for i in range(MAX_TXN_OPS + 1)],
            success=[put_op(b"limits/cmp")],
        ),
        INVALID,
        ("too many operations", "max_txn_ops"),
        (b"limits/cmp",),
    ),
    # the same key written twice in one branch
    Bad(
        "txn-duplicate-put",
        "Txn",
        lambda: pb.TxnRequest(success=[put_op(b"limits/dup", b"1"), put_op(b"limits/dup", b"2")]),
        INVALID,
        ("duplicate key",),
        (b"limits/dup",),
    ),
    Bad(
        "txn-put-inside-deleted-range",
        "Txn",
        lambda: pb.TxnRequest(failure=[put_op(b"limits/dup2"), delete_op(b"limits/", b"limits0")]),
        INVALID,
        ("duplicate key",),
        (b"limits/dup2",),
    ),
    # unknown lease
    Bad(
        "put-unknown-lease",
        "Put",
        lambda: pb.PutRequest(key=b"limits/leased", value=b"v", lease=0x1234),
        grpc.StatusCode.NOT_FOUND,
        ("lease not found",),
        (b"limits/leased",),
    ),
    Bad(
        "txn-put-unknown-lease",
        "Txn",
        lambda: pb.TxnRequest(success=[put_op(b"limits/leased", lease=0x1234)]),
        grpc.StatusCode.NOT_FOUND,
        ("lease not found",),
        (b"limits/leased",),
    ),
]


def call(cluster: Cluster, node: int, method: str, request: Any) -> Any:
    return getattr(cluster.stub(node), method)(request, timeout=10)


def nodes_to_try(cluster: Cluster) -> list[int]:
    leader = cluster.leader()
    return [next(i for i in range(cluster.n) if i != leader), leader]


@pytest.mark.parametrize("bad", BAD_REQUESTS, ids=lambda b: b.name)
def test_bad_request_is_refused_naming_the_limit(module_cluster: Cluster, bad: Bad) -> None:
    for node in nodes_to_try(module_cluster):
        with pytest.raises(grpc.RpcError) as info:
            call(module_cluster, node, bad.method, bad.request())
        err = info.value
        assert err.code() == bad.code, f"{bad.name} via {node}: {err.code()} {err.details()}"
        for text in bad.names:
            assert text in err.details(), f"{bad.name}: {err.details()!r} lacks {text!r}"
    leader = module_cluster.leader()
    for key in bad.writes_keys:
        assert key not in module_cluster.range_all(leader, key), f"{bad.name} wrote {key!r}"


def test_requests_at_the_limits_are_accepted(module_cluster: Cluster) -> None:
    c = module_cluster
    follower = nodes_to_try(c)[0]
    big = b"x" * MAX_VALUE
    resp = c.put(follower, b"limits/at/value", big)
    assert resp.header.revision > 0
    ops = [put_op(f"limits/at/op{i:03d}".encode(), b"o") for i in range(MAX_TXN_OPS)]
    txn = c.stub(follower).Txn(
        pb.TxnRequest(
            compare=[version_is_zero(f"limits/at/c{i}".encode()) for i in range(MAX_TXN_OPS)],
            success=ops,
        ),
        timeout=10,
    )
    assert txn.succeeded
    for node in range(c.n):
        got = c.range_all(node, b"limits/at/")
        assert got[b"limits/at/value"][0] == big
        assert len(got) == 1 + MAX_TXN_OPS


def test_cluster_still_serves_after_bad_input(module_cluster: Cluster) -> None:
    """Every bad request again, through every node, between good writes: nothing the
    good writes wrote is lost, nothing the bad ones carried is written, and all nodes
    end with equal images."""
    c = module_cluster
    good: dict[bytes, bytes] = {}
    for round_ in range(2):
        for node in range(c.n):
            for bad in BAD_REQUESTS:
                key = f"still/{round_}/{node}/{bad.name}".encode()
                c.put(node, key, b"good " + key)
                good[key] = b"good " + key
                with pytest.raises(grpc.RpcError) as info:
                    call(c, node, bad.method, bad.request())
                assert info.value.code() in (INVALID, grpc.StatusCode.NOT_FOUND)
    for node in range(c.n):
        assert {k: v[0] for k, v in c.range_all(node, b"still/").items()} == good
        for bad in BAD_REQUESTS:
            for key in bad.writes_keys:
                assert key not in c.range_all(node, key), f"{bad.name} wrote {key!r}"
        st = c.status(node)
        assert st.apply_offset <= st.commit_offset <= st.end_offset
    target = c.wait_converged()
    images = [c.range_all(i, serializable=True) for i in range(c.n)]
    assert images[0] == images[1] == images[2]
    assert all(c.status(i).apply_offset >= target for i in range(c.n))


def test_txn_compare_with_empty_key_is_refused(module_cluster: Cluster) -> None:
    """etcd (v3rpc checkTxnRequest) refuses a compare on the empty key with
    ErrGRPCEmptyKey, as it does for every other empty key."""
    c = module_cluster
    for node in nodes_to_try(c):
        with pytest.raises(grpc.RpcError) as info:
            c.stub(node).Txn(
                pb.TxnRequest(compare=[version_is_zero(b"")], success=[put_op(b"limits/cmp0")]),
                timeout=10,
            )
        assert info.value.code() == INVALID, info.value.details()
        assert "key is not provided" in info.value.details()
    assert b"limits/cmp0" not in c.range_all(c.leader(), b"limits/cmp0")


def test_a_burst_of_concurrent_writes_is_queued_not_cancelled(module_cluster: Cluster) -> None:
    """3,000 puts at once on one connection: gRPC's default would cancel every call beyond
    the 1,000 waiting for the server to take them (silently, status CANCELLED); all must be
    applied and acknowledged."""
    c = module_cluster
    n = 3000

    async def burst() -> list[Any]:
        async with grpc.aio.insecure_channel(c.endpoints[c.leader()]) as channel:
            put = channel.unary_unary(
                "/etcdserverpb.KV/Put",
                request_serializer=pb.PutRequest.SerializeToString,
                response_deserializer=pb.PutResponse.FromString,
            )
            return await asyncio.gather(
                *(
                    put(pb.PutRequest(key=b"burst/%05d" % i, value=b"v"), timeout=60)
                    for i in range(n)
                ),
                return_exceptions=True,
            )

    results = asyncio.run(burst())
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} of {n} puts failed, e.g. {failed[0]!r}"
    revisions = sorted(r.header.revision for r in results)
    assert len(set(revisions)) == n  # each its own revision
    got = c.stub(0).Range(pb.RangeRequest(key=b"burst/", range_end=b"burst0", count_only=True))
    assert got.count == n
