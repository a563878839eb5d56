"""The apply rules of ``kv`` and ``txn`` entries: etcd's Put, DeleteRange and Txn over a
:class:`~nameserver.kv.records.KvDelta` (deterministic, no I/O), and a read-only Txn over
one image.

A Txn follows etcd 3.4's etcdserver/apply.go ``Txn``: every compare (nested ones too) is
evaluated before any write (``compareToPath``), the taken ops are checked before any write
(``checkRequests``: a failure fails the whole txn), and inner response headers carry the
revision before the txn's first change, then its own (a nested txn's header stays empty).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from nameserver.errors import InvalidArgument, NameserverError, NotFound
from nameserver.kv import semantics as kvops
from nameserver.kv.mvcc import Compacted, FutureRevision
from nameserver.kv.records import KeyValue, KvDelta, MvccDelta, new_kv
from nameserver.kv.revision import next_revision
from nameserver.leases.apply import LEASE_NOT_FOUND
from nameserver.leases.records import LeaseDelta
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Effect, Entry
from raftlog.entry import put_effect


# ------------------------------------------------------------------- entry rules
# A rule is handed the request's log offset; its changes are made at the store's next
# revision (:func:`nameserver.kv.revision.next_revision`: the offset while the store counts
# by offset), and its response's header says the store revision after it: that revision
# when it changed keys, else the one before it (by offset: the offset, as every entry
# moves the revision then).
def apply_kv_entry(delta: MetadataDelta, e: Entry, offset: int, effects: list[Effect]) -> Any:
    """One ``kv`` entry: a Put or a DeleteRange."""
    op = records_pb2.KvOperation.FromString(e.value)
    which = op.WhichOneof("op")
    rev = next_revision(delta, offset)
    if which == "put":
        req = op.put
        # the lease sub-delta only when the put names a lease (else it is not read)
        resp = put(delta.kv, req, rev, effects, delta.leases if req.lease else None)
        resp.header.revision = rev
        return resp
    if which == "delete_range":
        d = delete_range(delta.kv, op.delete_range, effects)
        d.header.revision = rev if d.deleted or rev == offset else rev - 1
        return d
    raise InvalidArgument("kv entry carries no operation")


def apply_txn_entry(
    delta: MetadataDelta, e: Entry, offset: int, effects: list[Effect]
) -> rpc_pb2.TxnResponse:
    """One ``txn`` entry."""
    req = records_pb2.TxnOperation.FromString(e.value).txn
    mvcc: MvccDelta = delta.sub("mvcc")
    rev = next_revision(delta, offset)
    start = len(effects)
    resp = txn(delta.kv, req, rev, effects, delta.leases, compacted=mvcc.compacted)
    resp.header.revision = rev if len(effects) > start or rev == offset else rev - 1
    return resp


# ---------------------------------------------------------------------- kv ops
def put(
    kv: KvDelta,
    req: rpc_pb2.PutRequest,
    rev: int,
    effects: list[Effect],
    leases: LeaseDelta | None = None,
) -> rpc_pb2.PutResponse:
    key = req.key
    prev = kv.get(key)
    ignore_value, ignore_lease = req.ignore_value, req.ignore_lease
    if (ignore_value or ignore_lease) and prev is None:
        raise InvalidArgument("etcdserver: key not found")
    value = prev.value if (ignore_value and prev is not None) else req.value
    lease = prev.lease if (ignore_lease and prev is not None) else req.lease
    if lease and not ignore_lease and (leases is None or leases.get(lease) is None):
        raise NotFound(LEASE_NOT_FOUND)
    new = new_kv(
        key,
        value,
        prev.create_revision if prev else rev,
        rev,
        prev.version + 1 if prev else 1,
        lease,
    )
    kv.put_over(prev, new)
    effects.append(put_effect("kv", key, new.to_record()))
    resp = rpc_pb2.PutResponse()
    if req.prev_kv and prev is not None:
        resp.prev_kv.CopyFrom(kvops.to_pb(prev))
    return resp


def delete_range(
    kv: KvDelta, req: rpc_pb2.DeleteRangeRequest, effects: list[Effect]
) -> rpc_pb2.DeleteRangeResponse:
    victims = kvops.select(kv, req.key, req.range_end)
    for old in victims:
        kv.delete(old.key)
        effects.append(Effect("kv", old.key, delete=True))
    resp = rpc_pb2.DeleteRangeResponse(deleted=len(victims))
    if req.prev_kv:
        resp.prev_kvs.extend(kvops.to_pb(old) for old in victims)
    return resp


#: which branch a txn takes, and the paths of the nested txns of that branch, in order
Path = tuple[bool, list["Path"]]


def compare_path(view: kvops.KvView, req: rpc_pb2.TxnRequest) -> Path:
    """Every compare of a txn, nested ones too, against the state BEFORE any of its writes
    (etcd's ``compareToPath``: a nested txn does not see its parent's earlier puts)."""
    ok = all(kvops.evaluate_compare(view, c) for c in req.compare)
    ops = req.success if ok else req.failure
    return ok, [
        compare_path(view, op.request_txn)
        for op in ops
        if op.WhichOneof("request") == "request_txn"
    ]


def taken_ops(req: rpc_pb2.TxnRequest, path: Path) -> Iterator[rpc_pb2.RequestOp]:
    """The put, delete and range ops of the branches ``path`` takes, in etcd's order."""
    ok, subs = path
    nested = iter(subs)
    for op in req.success if ok else req.failure:
        if op.WhichOneof("request") == "request_txn":
            yield from taken_ops(op.request_txn, next(nested))
        else:
            yield op


def taken_revisions(view: kvops.KvView, req: rpc_pb2.TxnRequest) -> set[int]:
    """The revisions the ranges of the branches a txn takes over ``view`` read at (etcd
    checks only those: a bad revision in a branch not taken is never looked at)."""
    return {
        op.request_range.revision
        for op in taken_ops(req, compare_path(view, req))
        if op.WhichOneof("request") == "request_range" and op.request_range.revision
    }


def check_taken(
    kv: kvops.KvView,
    req: rpc_pb2.TxnRequest,
    path: Path,
    current: int,
    compacted: int,
    leases: LeaseDelta | None,
) -> None:
    """etcd's checks of a write txn before any of its writes (apply.go ``checkRequests``:
    ``checkRequestPut`` over the taken ops, then ``checkRequestRange``): a put that needs the
    key's previous value or names a lease, a range at a revision above ``current`` (the
    revision before the txn) or below ``compacted`` (the log's compaction revision). Any
    failure fails the whole txn; only the log decides it, never a node's history."""
    ops = list(taken_ops(req, path))
    for op in ops:
        if op.WhichOneof("request") == "request_put":
            p = op.request_put
            if (p.ignore_value or p.ignore_lease) and kv.get(p.key) is None:
                raise InvalidArgument("etcdserver: key not found")
            if p.lease and not p.ignore_lease and (leases is None or leases.get(p.lease) is None):
                raise NotFound(LEASE_NOT_FOUND)
    for op in ops:
        if op.WhichOneof("request") == "request_range" and op.request_range.revision:
            if op.request_range.revision > current:
                raise FutureRevision()
            if op.request_range.revision < compacted:
                raise Compacted(compacted)


def txn(
    kv: KvDelta,
    req: rpc_pb2.TxnRequest,
    rev: int,
    effects: list[Effect],
    leases: LeaseDelta | None = None,
    budget: kvops.ResponseBudget | None = None,  # reads only; apply passes none
    compacted: int | None = None,
) -> rpc_pb2.TxnResponse:
    """A txn at revision ``rev``. Apply passes the log's ``compacted`` revision: the taken
    ops are checked first (:func:`check_taken`), and a range at a ``revision`` is left
    empty, to be read by the node that answers (:func:`fill_past_ranges`: the history at a
    revision below ``rev`` is the same on every node that keeps it, and apply does not read
    a node's history). A read-only txn (``compacted`` None) reads them through ``kv.at``."""
    path = compare_path(kv, req)
    before = rev
    if compacted is not None:
        before = rev - 1  # etcd: inner headers say the revision before the txn's first change
        check_taken(kv, req, path, before, compacted, leases)
    return _run(kv, req, path, rev, before, len(effects), effects, leases, budget)


def _run(
    kv: KvDelta,
    req: rpc_pb2.TxnRequest,
    path: Path,
    rev: int,
    before: int,
    start: int,
    effects: list[Effect],
    leases: LeaseDelta | None,
    budget: kvops.ResponseBudget | None,
) -> rpc_pb2.TxnResponse:
    ok, subs = path
    nested = iter(subs)
    resp = rpc_pb2.TxnResponse(succeeded=ok)
    for op in req.success if ok else req.failure:
        which = op.WhichOneof("request")
        out = resp.responses.add()
        if which == "request_range":
            r = op.request_range
            if r.revision > 0:
                if isinstance(kv, _ReadOnlyDelta):
                    kvops.do_range(kv.at(r.revision), r, budget, out.response_range)
                # else: apply leaves it empty (fill_past_ranges)
            else:
                kvops.do_range(kv, r, budget, out.response_range)
            out.response_range.header.revision = rev if len(effects) > start else before
        elif which == "request_put":
            p = put(kv, op.request_put, rev, effects, leases)
            p.header.revision = rev
            out.response_put.CopyFrom(p)
        elif which == "request_delete_range":
            d = delete_range(kv, op.request_delete_range, effects)
            d.header.revision = rev if len(effects) > start else before
            out.response_delete_range.CopyFrom(d)
        elif which == "request_txn":
            t = _run(kv, op.request_txn, next(nested), rev, before, start, effects, leases, budget)
            out.response_txn.CopyFrom(t)
            out.response_txn.header.SetInParent()  # etcd: a nested txn's header is empty
        else:
            raise InvalidArgument("etcdserver: txn op has no request")
    return resp


def fill_past_ranges(
    req: rpc_pb2.TxnRequest,
    resp: rpc_pb2.TxnResponse,
    at: Callable[[int], kvops.KvView],
    budget: kvops.ResponseBudget | None = None,
) -> None:
    """Read, into an applied write txn's ``resp``, its ranges at a ``revision`` (left empty
    by apply) from ``at(revision)``: the node that answers does it, with its history kept
    down to those revisions until then (:meth:`KvHistory.pin`)."""
    nested = (req.success if resp.succeeded else req.failure, resp.responses)
    for op, out in zip(*nested, strict=False):
        which = op.WhichOneof("request")
        if which == "request_range" and op.request_range.revision > 0:
            header = out.response_range.header.revision
            kvops.do_range(
                at(op.request_range.revision), op.request_range, budget, out.response_range
            )
            out.response_range.header.revision = header
        elif which == "request_txn":
            fill_past_ranges(op.request_txn, out.response_txn, at, budget)


def read_only_txn(
    view: kvops.KvView,
    req: rpc_pb2.TxnRequest,
    rev: int,
    budget: kvops.ResponseBudget | None = None,
    at: Callable[[int], kvops.KvView | None] | None = None,
) -> rpc_pb2.TxnResponse:
    """A txn with no writes, evaluated against one image (no log entry needed); its
    ranges stop at ``budget`` (``max_response_bytes``) before building more. A range with
    a ``revision`` reads ``at(revision)`` (None: ``view``, the current revision)."""
    effects: list[Effect] = []
    return txn(_ReadOnlyDelta(view, at), req, rev, effects, None, budget)  # type: ignore[arg-type]


class _ReadOnlyDelta:
    def __init__(
        self, view: kvops.KvView, at: Callable[[int], kvops.KvView | None] | None = None
    ) -> None:
        self._view = view
        self._at = at

    def at(self, revision: int) -> kvops.KvView:
        past = self._at(revision) if self._at is not None else None
        return past if past is not None else self._view

    def get(self, key: bytes) -> KeyValue | None:
        return self._view.get(key)

    def range(self, key: bytes, range_end: bytes | None) -> Iterable[KeyValue]:
        return self._view.range(key, range_end)  # lazily: a budget may stop it early

    def put(self, kv: KeyValue) -> None:  # pragma: no cover - read-only by construction
        raise NameserverError("write in a read-only txn")

    def put_over(self, old: KeyValue | None, kv: KeyValue) -> None:  # pragma: no cover
        raise NameserverError("write in a read-only txn")

    def delete(self, key: bytes) -> None:  # pragma: no cover
        raise NameserverError("write in a read-only txn")
