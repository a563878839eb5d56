"""etcd v3 key-value semantics over an image or a delta (no I/O, no clocks).

The same functions serve reads (over a published :class:`KvImage`) and the
apply thread (over a :class:`KvDelta`, inside a txn), so reads inside a txn
see the txn's own earlier writes, as in etcd.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from nameserver.errors import InvalidArgument, ResourceExhausted
from nameserver.kv.records import KeyValue
from protos.etcdserverpb import kv_pb2, rpc_pb2

Compare = rpc_pb2.Compare
RangeRequest = rpc_pb2.RangeRequest


def invalid(message: str) -> InvalidArgument:
    return InvalidArgument(message)


#: Txns nested in txns, at most this deep (the outermost is level 1). protobuf decodes at
#: most 100 nested messages, and an entry wraps the txn in one more: a txn 49 deep passed
#: the gRPC decoder and then failed to decode at apply, on every node. This limit is
#: checked before proposing, so nothing that cannot apply reaches the log.
MAX_TXN_DEPTH = 16

#: What a KeyValue costs in a response beyond its key and value: tags, lengths, four
#: varint revisions of up to 10 bytes each (an upper bound: estimates err on the safe side).
KV_OVERHEAD_BYTES = 56


class ResponseTooLarge(ResourceExhausted):
    """A response that would pass ``max_response_bytes``, refused before it is built.

    etcd has no such limit of its own: grpc-go refuses to send the message afterwards
    (RESOURCE_EXHAUSTED "trying to send message larger than max"), after building it. The
    code is the same; the message says which limit and what to do."""

    def __init__(self, limit: int, what: str) -> None:
        super().__init__(
            f"etcdserver: {what} response is too large: over max_response_bytes={limit} "
            "(narrow the range, or set limit, keys_only or count_only)",
        )


class ResponseBudget:
    """The bytes a response may still take, spent while it is built (``max_response_bytes``).

    One budget serves every range of a txn, so 128 ranges share one limit."""

    __slots__ = ("left", "limit", "what")

    def __init__(self, limit: int, what: str = "range") -> None:
        self.limit = limit
        self.left = limit
        self.what = what

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise ResponseTooLarge(self.limit, self.what)


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
_SORT_ORDERS = frozenset(RangeRequest.SortOrder.values())


def _not_one_of(field: str, value: int, enum: object, etcd_error: str = "") -> InvalidArgument:
    """The rejection of an enum field holding a number ``enum`` does not name (proto3 takes
    any); ``etcd_error``, where etcd has one, goes first with the detail in brackets."""
    names = ", ".join(enum.keys())  # type: ignore[attr-defined]
    detail = f"{field}: {value} is not one of {names}"
    return invalid(f"{etcd_error} ({detail})" if etcd_error else detail)


def validate_range(req: rpc_pb2.RangeRequest, where: str = "range") -> None:
    """etcd's checks of a Range before it runs: a key, known sort options (proto3 enums
    take any number; etcd answers "invalid sort option")."""
    if not req.key:
        raise invalid(f"etcdserver: key is not provided ({where}: key must not be empty)")
    bad_sort = "etcdserver: invalid sort option"
    if req.sort_order not in _SORT_ORDERS:
        order, enum = req.sort_order, RangeRequest.SortOrder
        raise _not_one_of(f"{where}.sort_order", order, enum, bad_sort)
    if req.sort_target not in _SORT_KEYS:
        target, targets = req.sort_target, RangeRequest.SortTarget
        raise _not_one_of(f"{where}.sort_target", target, targets, bad_sort)


def _matching(view: KvView, req: rpc_pb2.RangeRequest) -> Iterable[KeyValue]:
    """The keys a Range selects, with its revision filters, lazily where the view is."""
    return _filtered(select_lazy(view, req.key, req.range_end), req)


def _filtered(kvs: Iterable[KeyValue], req: rpc_pb2.RangeRequest) -> Iterable[KeyValue]:
    """``kvs`` that pass a Range's revision filters (min/max mod and create revisions)."""
    lo_mod, hi_mod = req.min_mod_revision, req.max_mod_revision
    lo_create, hi_create = req.min_create_revision, req.max_create_revision
    if lo_mod or hi_mod or lo_create or hi_create:
        kvs = (
            kv
            for kv in kvs
            if (not lo_mod or kv.mod_revision >= lo_mod)
            and (not hi_mod or kv.mod_revision <= hi_mod)
            and (not lo_create or kv.create_revision >= lo_create)
            and (not hi_create or kv.create_revision <= hi_create)
        )
    return kvs


def select_lazy(view: KvView, key: bytes, range_end: bytes) -> Iterable[KeyValue]:
    """:func:`select` without building a list where the view iterates."""
    end = normalize_end(key, range_end)
    if end is None:
        kv = view.get(key)
        return (kv,) if kv is not None else ()
    if end != b"\x00" and end <= key:
        return ()
    return view.range(key, end)


def do_range(
    view: KvView,
    req: rpc_pb2.RangeRequest,
    budget: ResponseBudget | None = None,
    into: rpc_pb2.RangeResponse | None = None,
) -> rpc_pb2.RangeResponse:
    """Evaluate a Range (everything but the header and the revision check), into a new
    response or ``into`` (a txn's: built in its place, not built apart and copied in).

    With a ``budget``, each key is paid for before its KeyValue is built, and the range
    raises :class:`ResponseTooLarge` at the first that does not fit: memory stays within
    the budget whatever the range covers (keys past ``limit`` are only counted). Apply
    passes none: the state machine must not depend on a node's configuration."""
    resp = rpc_pb2.RangeResponse() if into is None else into
    if req.count_only:  # etcd: every key of the range, the revision filters aside
        resp.count = sum(1 for _ in select_lazy(view, req.key, req.range_end))
        return resp
    total = -1  # etcd's count is of the range's keys before the revision filters
    if (
        req.min_mod_revision
        or req.max_mod_revision
        or req.min_create_revision
        or (req.max_create_revision)
    ):
        in_range = list(select_lazy(view, req.key, req.range_end))
        total = len(in_range)
        kvs: Iterable[KeyValue] = list(_filtered(in_range, req))
    else:
        kvs = select_lazy(view, req.key, req.range_end)
    order, target = req.sort_order, req.sort_target
    if order == RangeRequest.NONE and target != RangeRequest.KEY:
        order = RangeRequest.ASCEND  # etcd: a sort target without an order means ascending
        if req.limit > 0 and total < 0:
            # etcd (apply.go Range) fetches limit + 1 keys in key order when no order is
            # given and no filter either, and sorts only those (count: all of the range)
            every = list(kvs)
            total, kvs = len(every), every[: req.limit + 1]
    if order != RangeRequest.NONE and not (
        order == RangeRequest.ASCEND and target == RangeRequest.KEY
    ):
        if target not in _SORT_KEYS:  # validate_range refuses it before; apply may not raise
            target = RangeRequest.KEY
        kvs = sorted(kvs, key=_SORT_KEYS[target], reverse=order == RangeRequest.DESCEND)
    limit = req.limit if req.limit > 0 else -1
    add, keys_only = resp.kvs.add, req.keys_only
    count = 0
    for kv in kvs:
        count += 1
        if count == limit + 1:
            resp.more = True
        if limit >= 0 and count > limit:
            continue  # only counted
        if budget is not None:
            budget.spend(len(kv.key) + (0 if keys_only else len(kv.value)) + KV_OVERHEAD_BYTES)
        to_pb(kv, keys_only, add)  # built in place, not built apart and copied in
    resp.count = count if total < 0 else total
    return resp


def _range_cost(view: KvView, r: rpc_pb2.RangeRequest) -> Iterator[int]:
    """What each KeyValue a Range returns costs in its response, without building any
    (an upper bound where a sort picks the ``limit`` keys: the costliest ``limit``)."""
    if r.count_only:
        return
    keys_only = r.keys_only
    costs = (
        len(kv.key) + (0 if keys_only else len(kv.value)) + KV_OVERHEAD_BYTES
        for kv in _matching(view, r)
    )
    if r.limit <= 0:
        yield from costs
    elif r.sort_order == RangeRequest.NONE and r.sort_target == RangeRequest.KEY:
        yield from itertools.islice(costs, r.limit)
    else:
        yield from heapq.nlargest(r.limit, costs)


def estimate_txn_reads(
    view: KvView,
    txn: rpc_pb2.TxnRequest,
    budget: ResponseBudget,
    at: Callable[[int], KvView | None] | None = None,
) -> None:
    """Check before proposing that what a write txn reads back fits ``budget``: its ranges
    (and deletes' prev_kv) against ``view`` (a range at a revision: ``at(revision)`` where
    it gives one), the costlier branch, nested txns included.

    An estimate: the txn's own writes, and writes between now and its apply, are not seen.
    The state machine builds a txn's response at apply on every node and must not depend
    on a node's configuration, so this is where the limit is applied to write txns."""
    costs = []
    for branch in (txn.success, txn.failure):
        trial = ResponseBudget(budget.limit, budget.what)
        trial.left = budget.left
        for op in branch:
            which = op.WhichOneof("request")
            if which == "request_range":
                r = op.request_range
                past = at(r.revision) if at is not None and r.revision > 0 else None
                for cost in _range_cost(view if past is None else past, r):
                    trial.spend(cost)
            elif which == "request_delete_range" and op.request_delete_range.prev_kv:
                d = op.request_delete_range
                for kv in select_lazy(view, d.key, d.range_end):
                    trial.spend(len(kv.key) + len(kv.value) + KV_OVERHEAD_BYTES)
            elif which == "request_txn":
                estimate_txn_reads(view, op.request_txn, trial, at)
        costs.append(budget.left - trial.left)
    budget.spend(max(costs))


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
        raise InvalidArgument(f"etcdserver: unknown compare target {c.target}")
    if c.result == Compare.EQUAL:
        return r == 0
    if c.result == Compare.NOT_EQUAL:
        return r != 0
    if c.result == Compare.GREATER:
        return r > 0
    if c.result == Compare.LESS:
        return r < 0
    raise InvalidArgument(f"etcdserver: unknown compare result {c.result}")


def evaluate_compare(view: KvView, c: rpc_pb2.Compare) -> bool:
    kvs = select(view, c.key, c.range_end)
    if not kvs:
        return compare_one(None, c)
    return all(compare_one(kv, c) for kv in kvs)


_COMPARE_TARGETS = frozenset(Compare.CompareTarget.values())
_COMPARE_RESULTS = frozenset(Compare.CompareResult.values())


def validate_txn(txn: rpc_pb2.TxnRequest, max_ops: int, max_depth: int = MAX_TXN_DEPTH) -> None:
    """etcd's checks, done before proposing, so that what is proposed applies: op counts
    (etcd's rule: a nested txn gets what its parent's ``max_txn_ops`` leaves), nesting
    depth, no more operations in all levels than a flat txn may have, known enum values,
    keys given, no key written twice."""
    _validate_txn(txn, max_ops, max_ops, 1, max_depth, [0], "txn")


def _too_many(max_ops: int, detail: str) -> InvalidArgument:
    return invalid(
        f"etcdserver: too many operations in txn request (limit max_txn_ops={max_ops}: {detail})"
    )


def _validate_txn(
    txn: rpc_pb2.TxnRequest,
    max_ops: int,
    budget: int,
    depth: int,
    max_depth: int,
    total: list[int],
    where: str,
) -> None:
    if depth > max_depth:
        raise invalid(
            f"etcdserver: txn nested too deeply (a request_txn at level {depth}: the limit "
            f"is {max_depth} levels)"
        )
    ncmp, nsucc, nfail = len(txn.compare), len(txn.success), len(txn.failure)
    opc = max(ncmp, nsucc, nfail)
    if opc > budget:
        raise _too_many(
            max_ops,
            f"{where} has {ncmp} compares, {nsucc} success and {nfail} failure ops"
            + (f"; {budget} left to it by the enclosing txns" if depth > 1 else ""),
        )
    total[0] += ncmp + nsucc + nfail
    if total[0] > 3 * max_ops:
        raise _too_many(max_ops, f"more than {3 * max_ops} compares and ops in all nesting levels")
    for i, c in enumerate(txn.compare):
        if not c.key:
            raise invalid(f"etcdserver: key is not provided ({where}.compare[{i}])")
        if c.target not in _COMPARE_TARGETS:
            raise _not_one_of(f"{where}.compare[{i}].target", c.target, Compare.CompareTarget)
        if c.result not in _COMPARE_RESULTS:
            raise _not_one_of(f"{where}.compare[{i}].result", c.result, Compare.CompareResult)
    for name, branch in (("success", txn.success), ("failure", txn.failure)):
        _check_branch(branch, max_ops, budget - opc, depth, max_depth, total, f"{where}.{name}")


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


def _check_branch(
    ops: Iterable[rpc_pb2.RequestOp],
    max_ops: int,
    budget: int,
    depth: int,
    max_depth: int,
    total: list[int],
    where: str,
) -> None:
    puts: set[bytes] = set()
    dels: list[tuple[bytes, bytes]] = []
    for i, op in enumerate(ops):
        which = op.WhichOneof("request")
        if which is None:
            raise invalid(f"etcdserver: txn op has no request ({where}[{i}])")
        if which == "request_put":
            if not op.request_put.key:
                raise invalid(f"etcdserver: key is not provided (txn put, {where}[{i}])")
            if op.request_put.key in puts:
                raise invalid("etcdserver: duplicate key given in txn request")
            puts.add(op.request_put.key)
        elif which == "request_delete_range":
            if not op.request_delete_range.key:
                raise invalid(f"etcdserver: key is not provided (txn delete, {where}[{i}])")
            dels.append((op.request_delete_range.key, op.request_delete_range.range_end))
        elif which == "request_range":
            validate_range(op.request_range, f"txn range, {where}[{i}]")
        elif which == "request_txn":
            _validate_txn(
                op.request_txn,
                max_ops,
                budget,
                depth + 1,
                max_depth,
                total,
                f"{where}[{i}].request_txn",
            )
            for k, _ in _written_keys(op):
                if k in puts:
                    raise InvalidArgument("etcdserver: duplicate key given in txn request")
    for k in puts:
        for start, end in dels:
            if (not end and k == start) or (end and start <= k and (end == b"\x00" or k < end)):
                raise InvalidArgument("etcdserver: duplicate key given in txn request")


def txn_has_writes(txn: rpc_pb2.TxnRequest) -> bool:
    return any(_written_keys(op) for op in (*txn.success, *txn.failure))
