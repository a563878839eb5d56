"""The apply rules of ``kv`` and ``txn`` entries: etcd's Put, DeleteRange and Txn over a
:class:`~nameserver.kv.records.KvDelta` (deterministic, no I/O), and a read-only Txn over
one image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nameserver.errors import InvalidArgument, NameserverError, NotFound
from nameserver.kv import semantics as kvops
from nameserver.kv.records import KeyValue, KvDelta
from nameserver.leases.apply import LEASE_NOT_FOUND
from nameserver.leases.records import LeaseDelta
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Effect, Entry


# ------------------------------------------------------------------- entry rules
def apply_kv_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> Any:
    """One ``kv`` entry: a Put or a DeleteRange."""
    op = records_pb2.KvOperation.FromString(e.value)
    which = op.WhichOneof("op")
    if which == "put":
        # the lease sub-delta only when the put names a lease (else it is not read)
        return put(delta.kv, op.put, rev, effects, delta.leases if op.put.lease else None)
    if which == "delete_range":
        return delete_range(delta.kv, op.delete_range, effects)
    raise InvalidArgument("kv entry carries no operation")


def apply_txn_entry(
    delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]
) -> rpc_pb2.TxnResponse:
    """One ``txn`` entry."""
    req = records_pb2.TxnOperation.FromString(e.value).txn
    return txn(delta.kv, req, rev, effects, delta.leases)


# ---------------------------------------------------------------------- kv ops
def put(
    kv: KvDelta,
    req: rpc_pb2.PutRequest,
    rev: int,
    effects: list[Effect],
    leases: LeaseDelta | None = None,
) -> rpc_pb2.PutResponse:
    prev = kv.get(req.key)
    if (req.ignore_value or req.ignore_lease) and prev is None:
        raise InvalidArgument("etcdserver: key not found")
    value = prev.value if (req.ignore_value and prev is not None) else req.value
    lease = prev.lease if (req.ignore_lease and prev is not None) else req.lease
    if lease and not req.ignore_lease and (leases is None or leases.get(lease) is None):
        raise NotFound(LEASE_NOT_FOUND)
    new = KeyValue(
        key=req.key,
        value=value,
        create_revision=prev.create_revision if prev else rev,
        mod_revision=rev,
        version=prev.version + 1 if prev else 1,
        lease=lease,
    )
    kv.put_over(prev, new)
    effects.append(Effect("kv", new.key, new.to_record()))
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


def txn(
    kv: KvDelta,
    req: rpc_pb2.TxnRequest,
    rev: int,
    effects: list[Effect],
    leases: LeaseDelta | None = None,
    budget: kvops.ResponseBudget | None = None,  # reads only; apply passes none
) -> rpc_pb2.TxnResponse:
    succeeded = all(kvops.evaluate_compare(kv, c) for c in req.compare)
    resp = rpc_pb2.TxnResponse(succeeded=succeeded)
    for op in req.success if succeeded else req.failure:
        which = op.WhichOneof("request")
        out = resp.responses.add()
        if which == "request_range":
            src: kvops.KvView = kv
            if op.request_range.revision and isinstance(kv, _ReadOnlyDelta):
                src = kv.at(op.request_range.revision)  # checked by the caller
            r = kvops.do_range(src, op.request_range, budget, out.response_range)
            r.header.revision = rev
        elif which == "request_put":
            p = put(kv, op.request_put, rev, effects, leases)
            p.header.revision = rev
            out.response_put.CopyFrom(p)
        elif which == "request_delete_range":
            d = delete_range(kv, op.request_delete_range, effects)
            d.header.revision = rev
            out.response_delete_range.CopyFrom(d)
        elif which == "request_txn":
            t = txn(kv, op.request_txn, rev, effects, leases, budget)
            t.header.revision = rev
            out.response_txn.CopyFrom(t)
        else:
            raise InvalidArgument("etcdserver: txn op has no request")
    return resp


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
