"""etcd v3 key-value semantics over an image or a delta (no I/O, no clocks).

The same functions serve reads (over a published :class:`KvImage`) and the
apply thread (over a :class:`KvDelta`, inside a txn), so reads inside a txn
see the txn's own earlier writes, as in etcd.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from nameserver.image import KeyValue
from protos.etcdserverpb import kv_pb2, rpc_pb2

Compare = rpc_pb2.Compare
RangeRequest = rpc_pb2.RangeRequest


class Rejected(Exception):
    """An operation the state machine refuses; ``code`` is a gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class KvView(Protocol):
    def get(self, key: bytes) -> KeyValue | None: ...

    def range(self, key: bytes, range_end: bytes | None) -> Iterable[KeyValue]: ...


def normalize_end(key: bytes, range_end: bytes) -> bytes | None:
    """etcd's range_end: empty = the single key; b"\\x00" = every key >= key."""
    if not range_end:
        return None
    return range_end


def to_pb(
    kv: KeyValue,
    keys_only: bool = False,
    new: Callable[..., kv_pb2.KeyValue] = kv_pb2.KeyValue,
) -> kv_pb2.KeyValue:
    """``kv`` as etcd's KeyValue, made by ``new`` (a repeated field's ``add`` builds it in
    its place in a response)."""
    return new(
        key=kv.key,
        value=b"" if keys_only else kv.value,
        create_revision=kv.create_revision,
        mod_revision=kv.mod_revision,
        version=kv.version,
        lease=kv.lease,
    )


def select(view: KvView, key: bytes, range_end: bytes) -> list[KeyValue]:
    end = normalize_end(key, range_end)
    if end is None:
        kv = view.get(key)
        return [kv] if kv is not None else []
    if end != b"\x00" and end <= key:
        return []
    return list(view.range(key, end))


_SORT_KEYS = {
    RangeRequest.KEY: lambda kv: kv.key,
    RangeRequest.VERSION: lambda kv: kv.version,
    RangeRequest.CREATE: lambda kv: kv.create_revision,
    RangeRequest.MOD: lambda kv: kv.mod_revision,
    RangeRequest.VALUE: lambda kv: kv.value,
}


def do_range(view: KvView, req: rpc_pb2.RangeRequest) -> rpc_pb2.RangeResponse:
    """Evaluate a Range (everything but the header and the revision check)."""
    kvs = select(view, req.key, req.range_end)
    if req.min_mod_revision:
        kvs = [kv for kv in kvs if kv.mod_revision >= req.min_mod_revision]
    if req.max_mod_revision:
        kvs = [kv for kv in kvs if kv.mod_revision <= req.max_mod_revision]
    if req.min_create_revision:
        kvs = [kv for kv in kvs if kv.create_revision >= req.min_create_revision]
    if req.max_create_revision:
        kvs = [kv for kv in kvs if kv.create_revision <= req.max_create_revision]
    resp = rpc_pb2.RangeResponse(count=len(kvs))
    if req.count_only:
        return resp
    order = req.sort_order
    if order == RangeRequest.NONE and req.sort_target != RangeRequest.KEY:
        order = RangeRequest.ASCEND  # etcd: a sort target without an order means ascending
    if order != RangeRequest.NONE and not (
        order == RangeRequest.ASCEND and req.sort_target == RangeRequest.KEY
    ):
        kvs.sort(key=_SORT_KEYS[req.sort_target], reverse=order == RangeRequest.DESCEND)
    if req.limit > 0 and len(kvs) > req.limit:
        kvs = kvs[: req.limit]
        resp.more = True
    add, keys_only = resp.kvs.add, req.keys_only
    for kv in kvs:
        to_pb(kv, keys_only, add)  # built in place, not built apart and copied in
    return resp


def _cmp(a: int | bytes, b: int | bytes) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def compare_one(kv: KeyValue | None, c: rpc_pb2.Compare) -> bool:
    if c.target == Compare.VALUE:
        if kv is None:
            return False  # etcd: comparing the value of a missing key always fails
        r = _cmp(kv.value, c.value)
    elif c.target == Compare.CREATE:
        r = _cmp(kv.create_revision if kv else 0, c.create_revision)
    elif c.target == Compare.MOD:
        r = _cmp(kv.mod_revision if kv else 0, c.mod_revision)
    elif c.target == Compare.VERSION:
        r = _cmp(kv.version if kv else 0, c.version)
    elif c.target == Compare.LEASE:
        r = _cmp(kv.lease if kv else 0, c.lease)
    else:
        raise Rejected("INVALID_ARGUMENT", f"etcdserver: unknown compare target {c.target}")
    if c.result == Compare.EQUAL:
        return r == 0
    if c.result == Compare.NOT_EQUAL:
        return r != 0
    if c.result == Compare.GREATER:
        return r > 0
    if c.result == Compare.LESS:
        return r < 0
    raise Rejected("INVALID_ARGUMENT", f"etcdserver: unknown compare result {c.result}")


def evaluate_compare(view: KvView, c: rpc_pb2.Compare) -> bool:
    kvs = select(view, c.key, c.range_end)
    if not kvs:
        return compare_one(None, c)
    return all(compare_one(kv, c) for kv in kvs)


def validate_txn(txn: rpc_pb2.TxnRequest, max_ops: int) -> None:
    """etcd's checks, done before proposing: op counts and no key written twice."""
    n = len(txn.success) + len(txn.failure)
    if len(txn.compare) > max_ops or len(txn.success) > max_ops or len(txn.failure) > max_ops:
        raise Rejected(
            "INVALID_ARGUMENT",
            f"etcdserver: too many operations in txn request "
            f"(limit max_txn_ops={max_ops}, got {len(txn.compare)} compares, "
            f"{len(txn.success)} success and {len(txn.failure)} failure ops)",
        )
    del n
    for c in txn.compare:
        if not c.key:
            raise Rejected("INVALID_ARGUMENT", "etcdserver: key is not provided (txn compare)")
    for branch in (txn.success, txn.failure):
        _check_branch(branch, max_ops)


def _written_keys(op: rpc_pb2.RequestOp) -> list[tuple[bytes, bytes]]:
    which = op.WhichOneof("request")
    if which == "request_put":
        return [(op.request_put.key, b"")]
    if which == "request_delete_range":
        return [(op.request_delete_range.key, op.request_delete_range.range_end)]
    if which == "request_txn":
        out: list[tuple[bytes, bytes]] = []
        for sub in (*op.request_txn.success, *op.request_txn.failure):
            out.extend(_written_keys(sub))
        return out
    return []


def _check_branch(ops: Iterable[rpc_pb2.RequestOp], max_ops: int) -> None:
    puts: set[bytes] = set()
    dels: list[tuple[bytes, bytes]] = []
    for op in ops:
        which = op.WhichOneof("request")
        if which is None:
            raise Rejected("INVALID_ARGUMENT", "etcdserver: txn op has no request")
        if which == "request_put":
            if not op.request_put.key:
                raise Rejected("INVALID_ARGUMENT", "etcdserver: key is not provided (txn put)")
            if op.request_put.key in puts:
                raise Rejected("INVALID_ARGUMENT", "etcdserver: duplicate key given in txn request")
            puts.add(op.request_put.key)
        elif which == "request_delete_range":
            if not op.request_delete_range.key:
                raise Rejected("INVALID_ARGUMENT", "etcdserver: key is not provided (txn delete)")
            dels.append((op.request_delete_range.key, op.request_delete_range.range_end))
        elif which == "request_range":
            if not op.request_range.key:
                raise Rejected("INVALID_ARGUMENT", "etcdserver: key is not provided (txn range)")
        elif which == "request_txn":
            validate_txn(op.request_txn, max_ops)
            for k, _ in _written_keys(op):
                if k in puts:
                    raise Rejected(
                        "INVALID_ARGUMENT", "etcdserver: duplicate key given in txn request"
                    )
    for k in puts:
        for start, end in dels:
            if (not end and k == start) or (end and start <= k and (end == b"\x00" or k < end)):
                raise Rejected("INVALID_ARGUMENT", "etcdserver: duplicate key given in txn request")


def txn_has_writes(txn: rpc_pb2.TxnRequest) -> bool:
    return any(_written_keys(op) for op in (*txn.success, *txn.failure))
