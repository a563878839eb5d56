"""etcd's KV service (Range, Put, DeleteRange, Txn, Compact): validate, then read the image
or propose an entry and wait until it is applied here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nameserver.errors import (
    AlreadyExists,
    InvalidArgument,
    NameserverError,
    Unavailable,
    Unimplemented,
)
from nameserver.grpc.status import rpc
from nameserver.kv import semantics as kvops
from nameserver.kv.apply import fill_past_ranges, read_only_txn, taken_revisions
from nameserver.kv.mvcc import check_compact
from nameserver.state import consistency
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from raftlog import (
    Entry,
)
from raftlog.entry import length_delimited

if TYPE_CHECKING:
    from nameserver.node import Metadata, NodeFacade
    from nameserver.state.image import MetadataImage

#: Field numbers of records.KvOperation.put / .delete_range and records.TxnOperation.txn.
_KV_PUT = records_pb2.KvOperation.PUT_FIELD_NUMBER
_KV_DELETE_RANGE = records_pb2.KvOperation.DELETE_RANGE_FIELD_NUMBER
_TXN_TXN = records_pb2.TxnOperation.TXN_FIELD_NUMBER


def _require_key(key: bytes, what: str) -> None:
    if not key:
        raise InvalidArgument(f"etcdserver: key is not provided ({what}: key must not be empty)")


class KVService(rpc_pb2_grpc.KVServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade) -> None:
        self.node = node

    @rpc
    async def Range(self, request: rpc_pb2.RangeRequest, context: Any) -> rpc_pb2.RangeResponse:
        kvops.validate_range(request)
        image, _ = await consistency.read_image(self.node, "kv", request.serializable)
        rev, current = request.revision, image.revision
        budget = self.node.response_budget("range")
        if 0 < rev < current:  # a past revision: its view from the history index
            view = await self.node.kv_at(rev, current)
            resp = kvops.do_range(view, request, budget)
            self.node.recheck(rev, current)
        else:
            self.node.check_revision(rev, current)
            resp = kvops.do_range(image.kv, request, budget)
        self.node.fill_header(resp.header, current)  # etcd: the current revision
        return resp

    # The write handlers encode the request once: its bytes give its size, and framed as
    # field 1 (put) or 2 (delete_range) they are the KvOperation (TxnOperation: field 1 txn)
    # that KvOperation(put=request) would copy the request into and encode again. The
    # result the apply thread built for this request is its response (the state machine
    # makes a new one per request and hands it to this waiter only): no copy either.
    @rpc
    async def Put(self, request: rpc_pb2.PutRequest, context: Any) -> rpc_pb2.PutResponse:
        _require_key(request.key, "put")
        self._check_value(request.value)
        body = request.SerializeToString()
        self.node.check_encoded_size(len(body))
        if request.lease and not request.ignore_lease:
            await self.node.require_lease(request.lease)
        applied = await self.node.propose(
            Entry("kv", request.key, length_delimited(_KV_PUT, body)), context.invocation_metadata()
        )
        result = applied.result
        resp = result if isinstance(result, rpc_pb2.PutResponse) else rpc_pb2.PutResponse()
        # apply stamped the store revision after the put (a duplicate: the current one)
        self.node.fill_header(resp.header, resp.header.revision or self.node.state.image.revision)
        return resp

    @rpc
    async def DeleteRange(
        self, request: rpc_pb2.DeleteRangeRequest, context: Any
    ) -> rpc_pb2.DeleteRangeResponse:
        _require_key(request.key, "delete")
        body = request.SerializeToString()
        self.node.check_encoded_size(len(body))
        if request.prev_kv:  # the deleted keys come back: they must fit a response
            budget = self.node.response_budget("delete_range")
            op = rpc_pb2.RequestOp(request_delete_range=request)
            kvops.estimate_txn_reads(
                self.node.state.image.kv, rpc_pb2.TxnRequest(success=[op]), budget
            )
        entry = Entry("kv", request.key, length_delimited(_KV_DELETE_RANGE, body))
        metadata = context.invocation_metadata()
        if not _deletes(self.node.state.image.kv, request) and self._may_answer_as_read(
            entry, metadata
        ):
            # etcd's store revision stays put for a delete that deletes nothing: linearized
            # at a read index where the range is empty, it is that read (no entry)
            image = await self.node.read_image(False)
            if not _deletes(image.kv, request):
                resp = rpc_pb2.DeleteRangeResponse()
                self.node.fill_header(resp.header, image.revision)
                return resp
        applied = await self.node.propose(entry, metadata)
        result = applied.result
        resp = (
            result
            if isinstance(result, rpc_pb2.DeleteRangeResponse)
            else rpc_pb2.DeleteRangeResponse()
        )
        self.node.fill_header(resp.header, resp.header.revision or self.node.state.image.revision)
        return resp

    @rpc
    async def Txn(self, request: rpc_pb2.TxnRequest, context: Any) -> rpc_pb2.TxnResponse:
        body = request.SerializeToString()
        self.node.check_encoded_size(len(body))
        kvops.validate_txn(request, self.node.config.max_txn_ops)
        self._check_txn_values(request)
        if not kvops.txn_has_writes(request):
            serializable = all(
                op.request_range.serializable
                for op in (*request.success, *request.failure)
                if op.WhichOneof("request") == "request_range"
            ) and bool(len(request.success) + len(request.failure))
            return await self._read_txn(request, await self.node.read_image(serializable))
        entry = Entry("txn", value=length_delimited(_TXN_TXN, body))
        metadata = context.invocation_metadata()
        if not _txn_writes(self.node.state.image.kv, request) and self._may_answer_as_read(
            entry, metadata
        ):
            # the branch taken writes nothing (a failed compare-and-swap, deletes of absent
            # keys): etcd's store revision stays put, and at a read index where it is still
            # so, the txn is that read (no entry)
            image = await self.node.read_image(False)
            if not _txn_writes(image.kv, request):
                return await self._read_txn(request, image)
        history = self.node.history
        revisions = _range_revisions(request)
        if revisions and history is None:
            raise Unimplemented("metaledger: this node keeps no kv history")
        # ranges at a revision are read here once the txn is applied (apply checks them
        # against the log's compaction revision only): this node's history must keep them
        generation = history.generation if history is not None else 0  # before the pin
        pinned = history.pin(revisions) if history is not None and revisions else []
        try:
            return await self._write_txn(request, entry, metadata, pinned, generation)
        finally:
            if pinned and history is not None:
                history.unpin(pinned)

    async def _read_txn(
        self, request: rpc_pb2.TxnRequest, image: MetadataImage
    ) -> rpc_pb2.TxnResponse:
        """A txn that writes nothing, answered from ``image`` (no entry)."""
        budget = self.node.response_budget("txn")
        current = image.revision
        views: dict[int, kvops.KvView] = {}
        for rev in sorted(taken_revisions(image.kv, request)):  # etcd refuses the whole txn
            if 0 < rev < current:
                views[rev] = await self.node.kv_at(rev, current)
            else:
                self.node.check_revision(rev, current)
        resp = read_only_txn(image.kv, request, current, budget, views.get)
        for rev in views:
            self.node.recheck(rev, current)
        self.node.fill_header(resp.header, current)
        return resp

    def _may_answer_as_read(self, entry: Entry, metadata: Metadata | None) -> bool:
        """Whether a write request that turns out to change nothing may be answered as a
        linearizable read: not when the client de-duplicates its retries (a retry of one
        applied must be told so, not answered anew), nor when it would be refused for
        space (etcd refuses a txn with puts under NOSPACE whichever branch it takes) or
        under CORRUPT (etcd refuses every txn with a write in either branch)."""
        if any(k == "x-ml-seq" for k, _ in metadata or ()):
            return False
        image = self.node.state.image
        return not image.alarms.corrupt and self.node.space.refuses(image, entry) is None

    async def _write_txn(
        self,
        request: rpc_pb2.TxnRequest,
        entry: Entry,
        metadata: Metadata | None,
        pinned: list[int],
        generation: int,
    ) -> rpc_pb2.TxnResponse:
        history = self.node.history
        image = self.node.state.image

        def at(revision: int) -> kvops.KvView | None:
            ok = history is not None and 0 < revision < image.revision
            return history.view(revision) if ok and history is not None else None

        # what it reads back is built at apply on every node, with no limit there: checked
        # here, against this node's image, before anything is proposed
        kvops.estimate_txn_reads(image.kv, request, self.node.response_budget("txn"), at)
        if not request.compare:  # the success branch is taken: its leases must exist
            for lease_id in _put_leases(request.success):
                await self.node.require_lease(lease_id)
        applied = await self.node.propose(entry, metadata)
        if applied.duplicate:
            raise AlreadyExists(
                f"metaledger: this txn was already applied at revision {applied.offset}; "
                "its result is not kept",
            )
        resp = applied.result
        if not isinstance(resp, rpc_pb2.TxnResponse):
            raise NameserverError(f"metaledger: txn applied with no response ({resp!r})")
        revision = resp.header.revision  # the store revision after it (apply's stamp)
        if pinned and history is not None:
            await history.ready(revision, self.node.timeout_s)
            fill_past_ranges(request, resp, history.view)
            if history.generation != generation:  # a snapshot install reset the history
                raise Unavailable(
                    f"metaledger: the txn was applied at revision {revision}, but this "
                    "node's history was reset meanwhile: its ranges at a revision could not "
                    "be read (read them in a txn of their own)"
                )
        self.node.fill_header(resp.header, revision)
        return resp

    @rpc
    async def Compact(
        self, request: rpc_pb2.CompactionRequest, context: Any
    ) -> rpc_pb2.CompactionResponse:
        """etcd's Compact: checked here, proposed, checked again at apply (another Compact
        may come first); answered once applied (``physical`` or not: the history index
        drops what it no longer needs as it applies the entry)."""
        image = self.node.state.image
        check_compact(request.revision, image.mvcc.compacted, image.revision)
        body = records_pb2.MvccCompaction(
            revision=request.revision, physical=request.physical
        ).SerializeToString()
        applied = await self.node.propose(
            Entry("compact", value=body), context.invocation_metadata()
        )
        # a compaction keeps the store revision (counting etcd's way)
        return rpc_pb2.CompactionResponse(
            header=self.node.header(self.node.revision_after(applied))
        )

    def _check_value(self, value: bytes) -> None:
        self.node.check_value(value)

    def _check_txn_values(self, txn: rpc_pb2.TxnRequest) -> None:
        for op in (*txn.success, *txn.failure):
            which = op.WhichOneof("request")
            if which == "request_put":
                self._check_value(op.request_put.value)
            elif which == "request_txn":
                self._check_txn_values(op.request_txn)


def _deletes(view: kvops.KvView, req: rpc_pb2.DeleteRangeRequest) -> bool:
    """Whether a DeleteRange over ``view`` deletes at least one key."""
    return any(True for _ in kvops.select_lazy(view, req.key, req.range_end))


def _txn_writes(view: kvops.KvView, req: rpc_pb2.TxnRequest) -> bool:
    """Whether a txn over ``view`` changes a key: the branches its compares take (nested
    ones too, all compared against ``view``, as etcd's ``compareToPath``) hold a put, or a
    delete of a key that is there."""
    evaluate = kvops.evaluate_compare
    ok = all(evaluate(view, c) for c in req.compare)
    for op in req.success if ok else req.failure:
        which = op.WhichOneof("request")
        if which == "request_put":
            return True
        if which == "request_delete_range":
            if _deletes(view, op.request_delete_range):
                return True
        elif which == "request_txn" and _txn_writes(view, op.request_txn):
            return True
    return False


def _put_leases(ops: Any) -> set[int]:
    """The leases that the puts of an unconditional txn branch attach keys to."""
    leases: set[int] = set()
    for op in ops:
        which = op.WhichOneof("request")
        if which == "request_put" and op.request_put.lease and not op.request_put.ignore_lease:
            leases.add(op.request_put.lease)
        elif which == "request_txn" and not op.request_txn.compare:
            leases |= _put_leases(op.request_txn.success)
    return leases


def _range_revisions(txn: rpc_pb2.TxnRequest) -> set[int]:
    """The revisions the ranges of a txn (both branches, nested txns too) read at."""
    revs: set[int] = set()
    for op in (*txn.success, *txn.failure):
        which = op.WhichOneof("request")
        if which == "request_range" and op.request_range.revision:
            revs.add(op.request_range.revision)
        elif which == "request_txn":
            revs |= _range_revisions(op.request_txn)
    return revs
