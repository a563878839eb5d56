"""gRPC services: the etcd v3 protocol (KV, Lease, Cluster, Maintenance) and metaledger.v1.Admin.

Handlers validate, then either read the image (after a read barrier unless the
request is serializable) or propose an entry and wait until it is applied
here. Every error leaves through :func:`nameserver.errors.to_status`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from nameserver import consistency, image_hash
from nameserver import kv as kvops
from nameserver.config import ServerConfig
from nameserver.errors import InvalidRequest, to_status
from nameserver.image import MetadataImage
from nameserver.kv import Rejected
from nameserver.leases import LeaseKeeper, lease_entry
from nameserver.state import (
    LEASE_NOT_FOUND,
    MAX_LEASE_TTL_S,
    CapturedImage,
    MetadataStateMachine,
    read_only_txn,
)
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from raftlog import (
    Applied,
    ApplyFailure,
    ConsensusEngine,
    Entry,
    ProposeError,
    ReplicatedLog,
    UnsafeReconfigurationError,
)
from raftlog.entry import length_delimited
from snapshots import SnapshotMeta, etcd_trailer, write_snapshot

log = logging.getLogger(__name__)

ETCD_VERSION = "3.4.0"  # the etcd API level we speak
SNAPSHOT_CHUNK_BYTES = 1 << 20

R = TypeVar("R")


def member_id_of(peer_address: str) -> int:
    """etcd member ids are uint64: ours is a stable hash of the member's peer address."""
    text = "member:" + peer_address.removeprefix("http://").removeprefix("https://")
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def _peer_address(url: str) -> str:
    address = url.removeprefix("http://").removeprefix("https://").rstrip("/")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidRequest(f"peerURLs: {url!r} is not http://host:port")
    return address


def rpc(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Turn any error of a handler into its gRPC status (one place, STYLE.md 3)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            code, message = to_status(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", fn.__name__)
            await context.abort(code, message)
            raise  # unreachable: abort raises

    return wrapper


async def abort_stream(context: grpc.aio.ServicerContext, method: str, exc: Exception) -> None:
    """End a streaming handler on ``exc`` with its status (what :func:`rpc` does for unary
    handlers); only a server fault (INTERNAL) is logged above DEBUG."""
    code, message = to_status(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=exc)
    else:
        log.debug("%s: %s", method, message)
    await context.abort(code, message)


class NodeContext:
    """What the handlers share: config, the log, the state machine and identities."""

    def __init__(
        self,
        config: ServerConfig,
        rlog: ReplicatedLog,
        state: MetadataStateMachine,
        cluster_id: int,
        engine: ConsensusEngine,
    ) -> None:
        self.config = config
        self.log = rlog
        self.state = state
        self.cluster_id = cluster_id
        self.engine = engine
        self.timeout_s = config.propose_timeout_ms / 1000
        self.member_id = member_id_of(config.listen_peer)

    def members(self, image: MetadataImage) -> list[tuple[str, int, str, tuple[str, ...]]]:
        """(name, member id, peer address, client URLs) of the current configuration,
        named from the member records in ``image`` (a member added but not yet started
        has no name)."""
        by_peer = {m.peer_url.removeprefix("http://"): m for m in image.members.members.values()}
        out = []
        for address in (m.address for m in self.engine.members()):
            rec = by_peer.get(address)
            if rec is not None:
                self.engine.name_member(rec.id, address)
            out.append(
                (
                    rec.id if rec else "",
                    member_id_of(address),
                    address,
                    rec.client_urls if rec else (),
                )
            )
        return out

    async def engine_call(
        self, start: Callable[[Callable[[int | None, Exception | None], None]], None]
    ) -> None:
        """Run an engine operation that answers through a callback on the engine thread
        (membership change, leadership transfer) and wait for it; a refusal (ProposeError:
        a change in progress, a target still catching up) is retried every 0.1 s until the
        propose timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            done: asyncio.Future[None] = loop.create_future()

            def callback(_: int | None, err: Exception | None, fut: Any = done) -> None:
                loop.call_soon_threadsafe(_settle_future, fut, err)

            start(callback)
            try:
                await asyncio.wait_for(done, max(0.1, deadline - loop.time()))
                return
            except UnsafeReconfigurationError:
                raise  # waiting does not start members
            except ProposeError:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    async def transfer_leadership(self, address: str | None) -> str:
        """Hand leadership to ``address`` (None: the most caught-up follower) and wait until
        another node leads; returns the new leader's address."""
        await self.engine_call(lambda cb: self.engine.transfer_leadership(address, cb))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        me = self.config.listen_peer
        while loop.time() < deadline:
            leader = self.engine.leader_address()
            if leader and leader != me and (address is None or leader == address):
                return leader
            await asyncio.sleep(0.05)
        raise Rejected(
            "DEADLINE_EXCEEDED",
            f"metaledger: leadership did not move to {address or 'a follower'} in time",
        )

    def leader_member_id(self) -> int:
        leader = self.engine.status().leader_id
        for name, mid, address, _ in self.members(self.state.image):
            if leader in (name, address):
                return mid
        return 0

    def header(self, revision: int) -> rpc_pb2.ResponseHeader:
        return rpc_pb2.ResponseHeader(
            cluster_id=self.cluster_id,
            member_id=self.member_id,
            revision=revision,
            raft_term=self.log.term(),
        )

    def fill_header(self, header: rpc_pb2.ResponseHeader, revision: int) -> None:
        """Stamp a response's own ``header`` in place: a fifth of the cost of building a
        :meth:`header` and copying it in (the KV handlers' hot path)."""
        header.cluster_id = self.cluster_id
        header.member_id = self.member_id
        header.revision = revision
        header.raft_term = self.log.term()

    async def read_image(self, serializable: bool) -> MetadataImage:
        if not serializable:
            index = await self.log.read_barrier(self.timeout_s)
            await self.log.wait_applied(index, self.timeout_s)
        return self.state.image

    async def propose(self, entry: Entry, context: grpc.aio.ServicerContext | None) -> Applied:
        """Propose ``entry`` and wait until it is applied here. The client's de-duplication
        identity comes from ``context``'s metadata; None proposes without one (a handler that
        proposes several entries for one request must not reuse the request's)."""
        client_id, seq = None, None
        metadata = context.invocation_metadata() if context is not None else None
        for k, v in metadata or ():
            if k == "x-ml-client-id":
                client_id = str(v)
            elif k == "x-ml-seq":
                try:
                    seq = int(v)
                except ValueError:
                    raise InvalidRequest(f"x-ml-seq: {v!r} is not an integer") from None
        if (client_id is None) != (seq is None):
            raise InvalidRequest("x-ml-client-id and x-ml-seq must be given together")
        applied = await self.log.propose([entry], self.timeout_s, client_id, seq)
        if isinstance(applied.result, Rejected):
            raise applied.result
        if isinstance(applied.result, ApplyFailure):
            error = applied.result.error  # a Rejected keeps its code
            raise Rejected(str(getattr(error, "code", "")) or "INVALID_ARGUMENT", str(error))
        return applied

    def check_size(self, request: Any) -> None:
        self.check_encoded_size(request.ByteSize())

    def check_value(self, value: bytes) -> None:
        """A value put under a key (KV, lock, election) is at most ``max_value_bytes``."""
        limit = self.config.max_value_bytes
        if len(value) > limit:
            raise InvalidRequest(
                f"etcdserver: value is too large: {len(value)} bytes > limit max_value_bytes={limit}"
            )

    def response_budget(self, what: str) -> kvops.ResponseBudget:
        """A fresh ``max_response_bytes`` budget for one response (of ``what``)."""
        return kvops.ResponseBudget(self.config.max_response_bytes, what)

    def check_encoded_size(self, size: int) -> None:
        """:meth:`check_size` of a request already encoded into ``size`` bytes."""
        if size > self.config.max_request_bytes:
            raise InvalidRequest(
                f"etcdserver: request is too large: {size} bytes > limit "
                f"max_request_bytes={self.config.max_request_bytes}"
            )

    def check_revision(self, revision: int, current: int) -> None:
        if revision <= 0 or revision == current:
            return
        if revision > current:
            raise Rejected(
                "OUT_OF_RANGE",
                f"etcdserver: mvcc: required revision is a future revision ({revision} > {current})",
            )
        raise Rejected(
            "UNIMPLEMENTED",
            f"metaledger: reading at a past revision ({revision}) is not supported; "
            f"only the latest state (revision {current}) is kept",
        )


#: Field numbers of records.KvOperation.put / .delete_range and records.TxnOperation.txn.
_KV_PUT = records_pb2.KvOperation.PUT_FIELD_NUMBER
_KV_DELETE_RANGE = records_pb2.KvOperation.DELETE_RANGE_FIELD_NUMBER
_TXN_TXN = records_pb2.TxnOperation.TXN_FIELD_NUMBER


def _require_key(key: bytes, what: str) -> None:
    if not key:
        raise InvalidRequest(f"etcdserver: key is not provided ({what}: key must not be empty)")


class KVService(rpc_pb2_grpc.KVServicer):  # type: ignore[misc]
    def __init__(self, node: NodeContext) -> None:
        self.node = node

    @rpc
    async def Range(self, request: rpc_pb2.RangeRequest, context: Any) -> rpc_pb2.RangeResponse:
        kvops.validate_range(request)
        image, _ = await consistency.read_image(self.node, "kv", request.serializable)
        self.node.check_revision(request.revision, image.revision)
        resp = kvops.do_range(image.kv, request, self.node.response_budget("range"))
        self.node.fill_header(resp.header, image.revision)
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
            await require_lease(self.node, request.lease)
        applied = await self.node.propose(
            Entry("kv", request.key, length_delimited(_KV_PUT, body)), context
        )
        result = applied.result
        resp = result if isinstance(result, rpc_pb2.PutResponse) else rpc_pb2.PutResponse()
        self.node.fill_header(resp.header, applied.offset)
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
        applied = await self.node.propose(
            Entry("kv", request.key, length_delimited(_KV_DELETE_RANGE, body)), context
        )
        result = applied.result
        resp = (
            result
            if isinstance(result, rpc_pb2.DeleteRangeResponse)
            else rpc_pb2.DeleteRangeResponse()
        )
        self.node.fill_header(resp.header, applied.offset)
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
            image = await self.node.read_image(serializable)
            budget = self.node.response_budget("txn")
            resp = read_only_txn(image.kv, request, image.revision, budget)
            self.node.fill_header(resp.header, image.revision)
            return resp
        # what it reads back is built at apply on every node, with no limit there: checked
        # here, against this node's image, before anything is proposed
        kvops.estimate_txn_reads(
            self.node.state.image.kv, request, self.node.response_budget("txn")
        )
        if not request.compare:  # the success branch is taken: its leases must exist
            for lease_id in _put_leases(request.success):
                await require_lease(self.node, lease_id)
        applied = await self.node.propose(
            Entry("txn", value=length_delimited(_TXN_TXN, body)), context
        )
        if applied.duplicate:
            raise Rejected(
                "ALREADY_EXISTS",
                f"metaledger: this txn was already applied at revision {applied.offset}; "
                "its result is not kept",
            )
        resp = applied.result
        if not isinstance(resp, rpc_pb2.TxnResponse):
            raise Rejected("INTERNAL", f"metaledger: txn applied with no response ({resp!r})")
        self.node.fill_header(resp.header, applied.offset)
        return resp

    @rpc
    async def Compact(
        self, request: rpc_pb2.CompactionRequest, context: Any
    ) -> rpc_pb2.CompactionResponse:
        image = self.node.state.image
        if request.revision > image.revision:
            raise Rejected(
                "OUT_OF_RANGE",
                f"etcdserver: mvcc: required revision is a future revision "
                f"({request.revision} > {image.revision})",
            )
        # metaledger keeps no history of old revisions: there is nothing to compact.
        return rpc_pb2.CompactionResponse(header=self.node.header(image.revision))

    def _check_value(self, value: bytes) -> None:
        self.node.check_value(value)

    def _check_txn_values(self, txn: rpc_pb2.TxnRequest) -> None:
        for op in (*txn.success, *txn.failure):
            which = op.WhichOneof("request")
            if which == "request_put":
                self._check_value(op.request_put.value)
            elif which == "request_txn":
                self._check_txn_values(op.request_txn)


async def require_lease(node: NodeContext, lease_id: int) -> None:
    """NOT_FOUND unless the lease exists (linearizably: a barrier when this node lacks it).

    Apply checks again (the lease may go in between); its rejection keeps its code
    (the Rejected in ``raftlog.ApplyFailure.error``), so the client gets NOT_FOUND either way."""
    if node.state.image.leases.get(lease_id) is not None:
        return
    image = await node.read_image(False)
    if image.leases.get(lease_id) is None:
        raise Rejected("NOT_FOUND", LEASE_NOT_FOUND)


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


def new_lease_id() -> int:
    """A lease id chosen by the proposing node before it proposes the grant (apply must be
    deterministic): its clock in ms in the high bits, 22 random bits below, never 0."""
    lease_id = ((int(time.time() * 1000) << 22) | secrets.randbits(22)) & 0x7FFF_FFFF_FFFF_FFFF
    return lease_id or 1


class LeaseService(rpc_pb2_grpc.LeaseServicer):  # type: ignore[misc]
    """etcd's Lease service. Reads of lease state are linearizable (read barrier);
    keepalives are answered from this node's image and checkpointed in batches
    (:mod:`nameserver.leases`)."""

    def __init__(self, node: NodeContext, keeper: LeaseKeeper) -> None:
        self.node = node
        self.keeper = keeper

    @rpc
    async def LeaseGrant(
        self, request: rpc_pb2.LeaseGrantRequest, context: Any
    ) -> rpc_pb2.LeaseGrantResponse:
        """Grant a lease. The response header's ``revision`` is the grant's offset: the
        lease's fencing token (it never changes while the lease lives, and a later grant
        always has a higher one)."""
        if request.TTL <= 0:
            raise InvalidRequest(f"etcdserver: TTL must be positive (TTL: {request.TTL})")
        if request.TTL > MAX_LEASE_TTL_S:
            raise Rejected("OUT_OF_RANGE", "etcdserver: too large lease TTL")
        if request.ID < 0:
            raise InvalidRequest(f"ID: a lease ID must be positive (ID: {request.ID})")
        chosen = request.ID == 0
        if not chosen and (await self.node.read_image(False)).leases.get(request.ID) is not None:
            raise Rejected("FAILED_PRECONDITION", "etcdserver: lease already exists")
        # a chosen id that collides (two grants in one ms drawing the same 22 random bits)
        # is rejected by apply like any duplicate; the client retries
        lease_id = new_lease_id() if chosen else request.ID
        op = records_pb2.LeaseOperation()
        op.grant.id, op.grant.ttl_s = lease_id, request.TTL
        applied = await self.node.propose(lease_entry(op, lease_id), context)
        return rpc_pb2.LeaseGrantResponse(
            header=self.node.header(applied.offset), ID=lease_id, TTL=request.TTL
        )

    @rpc
    async def LeaseRevoke(
        self, request: rpc_pb2.LeaseRevokeRequest, context: Any
    ) -> rpc_pb2.LeaseRevokeResponse:
        await require_lease(self.node, request.ID)
        op = records_pb2.LeaseOperation()
        op.revoke.id = request.ID
        applied = await self.node.propose(lease_entry(op, request.ID), context)
        return rpc_pb2.LeaseRevokeResponse(header=self.node.header(applied.offset))

    async def LeaseKeepAlive(
        self,
        request_iterator: AsyncIterator[rpc_pb2.LeaseKeepAliveRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[rpc_pb2.LeaseKeepAliveResponse]:
        """Each request is answered with the lease's TTL, or 0 if it is unknown or expired
        (like etcd)."""
        try:
            async for request in request_iterator:
                image = self.node.state.image
                lease = image.leases.get(request.ID)
                if lease is None:  # perhaps granted but not applied here yet
                    image = await self.node.read_image(False)
                    lease = image.leases.get(request.ID)
                ttl = self.keeper.keep_alive(lease) if lease is not None else 0
                yield rpc_pb2.LeaseKeepAliveResponse(
                    header=self.node.header(image.revision), ID=request.ID, TTL=ttl
                )
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # an undecodable request among them, no leader, ...
            await abort_stream(context, "LeaseKeepAlive", exc)

    @rpc
    async def LeaseTimeToLive(
        self, request: rpc_pb2.LeaseTimeToLiveRequest, context: Any
    ) -> rpc_pb2.LeaseTimeToLiveResponse:
        """Remaining TTL (-1 for an unknown lease, like etcd), granted TTL and, if asked,
        the attached keys."""
        image, _ = await consistency.read_image(self.node, "lease")
        resp = rpc_pb2.LeaseTimeToLiveResponse(
            header=self.node.header(image.revision), ID=request.ID, TTL=-1
        )
        lease = image.leases.get(request.ID)
        if lease is not None:
            resp.TTL = self.keeper.remaining_ttl_s(lease)
            resp.grantedTTL = lease.ttl_s
            if request.keys:
                keys = image.kv.keys_of_lease(lease.id)
                budget = self.node.response_budget("lease time-to-live")
                budget.spend(sum(len(k) + 4 for k in keys))
                resp.keys.extend(sorted(keys))
        return resp

    @rpc
    async def LeaseLeases(
        self, request: rpc_pb2.LeaseLeasesRequest, context: Any
    ) -> rpc_pb2.LeaseLeasesResponse:
        image, _ = await consistency.read_image(self.node, "lease")
        resp = rpc_pb2.LeaseLeasesResponse(header=self.node.header(image.revision))
        self.node.response_budget("lease list").spend(16 * len(image.leases.leases))
        resp.leases.extend(rpc_pb2.LeaseStatus(ID=i) for i in sorted(image.leases.leases))
        return resp


class ClusterService(rpc_pb2_grpc.ClusterServicer):  # type: ignore[misc]
    def __init__(self, node: NodeContext) -> None:
        self.node = node

    def _list(self, image: MetadataImage) -> list[Any]:
        return [
            rpc_pb2.Member(
                ID=mid, name=name, peerURLs=["http://" + address], clientURLs=list(client_urls)
            )
            for name, mid, address, client_urls in self.node.members(image)
        ]

    async def _change(self, add: bool, address: str) -> None:
        """One membership change (retried while refused, see NodeContext.engine_call)."""
        engine = self.node.engine
        if add:
            await self.node.engine_call(lambda cb: engine.add_member(address, cb))
        else:
            await self.node.engine_call(lambda cb: engine.remove_member(address, cb))

    @rpc
    async def MemberList(
        self, request: rpc_pb2.MemberListRequest, context: Any
    ) -> rpc_pb2.MemberListResponse:
        image = await self.node.read_image(not getattr(request, "linearizable", False))
        resp = rpc_pb2.MemberListResponse(header=self.node.header(image.revision))
        resp.members.extend(self._list(image))
        return resp

    @rpc
    async def MemberAdd(
        self, request: rpc_pb2.MemberAddRequest, context: Any
    ) -> rpc_pb2.MemberAddResponse:
        if request.isLearner:
            raise Rejected(
                "UNIMPLEMENTED", "metaledger: learners (non-voting members) are not supported"
            )
        if len(request.peerURLs) != 1:
            raise InvalidRequest("peerURLs: give exactly one peer URL (http://host:port)")
        address = _peer_address(request.peerURLs[0])
        if address in {m.address for m in self.node.engine.members()}:
            raise Rejected("FAILED_PRECONDITION", "etcdserver: Peer URLs already exists")
        await self._change(True, address)
        image = await self.node.read_image(False)
        resp = rpc_pb2.MemberAddResponse(header=self.node.header(image.revision))
        resp.member.CopyFrom(
            rpc_pb2.Member(ID=member_id_of(address), peerURLs=list(request.peerURLs))
        )
        resp.members.extend(self._list(image))
        return resp

    @rpc
    async def MemberRemove(
        self, request: rpc_pb2.MemberRemoveRequest, context: Any
    ) -> rpc_pb2.MemberRemoveResponse:
        image = await self.node.read_image(False)
        target = [m for m in self.node.members(image) if m[1] == request.ID]
        if not target:
            raise Rejected("NOT_FOUND", f"etcdserver: member not found (ID {request.ID:x})")
        name, _, address, _ = target[0]
        engine = self.node.engine
        me = self.node.config.peers.get(self.node.config.node_id)
        if address == me and not engine.is_leader():
            # the member being removed stops hearing the log once the change is in it, so
            # it could not wait for the change (and the member record) to apply here
            return await self._forward_remove_to_leader(request, image, name or address)
        if address == engine.leader_address():
            # PySyncObj's leader cannot remove itself: it hands leadership over first.
            if engine.is_leader():
                # hand over, then let the new leader remove us: a removed node never sees
                # the entry that removes it, so it could not wait for it here
                await self.node.transfer_leadership(None)
                image = await self.node.read_image(False)
            return await self._forward_remove_to_leader(request, image, name or address)
        await self._change(False, address)
        if name:
            await self.node.log.propose(
                [Entry(type="member", key=name.encode())], self.node.timeout_s
            )
        image = await self.node.read_image(False)
        resp = rpc_pb2.MemberRemoveResponse(header=self.node.header(image.revision))
        resp.members.extend(self._list(image))
        return resp

    @rpc
    async def MemberUpdate(
        self, request: rpc_pb2.MemberUpdateRequest, context: Any
    ) -> rpc_pb2.MemberUpdateResponse:
        raise Rejected(
            "UNIMPLEMENTED",
            "metaledger: MemberUpdate is not supported: a member's peer URL is its identity "
            "here; remove the member and add it again with the new URL",
        )

    @rpc
    async def MemberPromote(
        self, request: rpc_pb2.MemberPromoteRequest, context: Any
    ) -> rpc_pb2.MemberPromoteResponse:
        raise Rejected(
            "UNIMPLEMENTED",
            "metaledger has no learners (every member votes): MemberPromote is not supported",
        )

    async def _forward_remove_to_leader(
        self, request: rpc_pb2.MemberRemoveRequest, image: MetadataImage, name: str
    ) -> rpc_pb2.MemberRemoveResponse:
        """Only the leader can hand its leadership over: forward the request to it."""
        leader = self.node.engine.leader_address()
        urls = [
            url
            for m in image.members.members.values()
            if m.peer_url.removeprefix("http://") == leader
            for url in m.client_urls
        ]
        if not urls:
            raise Rejected(
                "UNAVAILABLE",
                f"metaledger: member {name} is the leader and its client URL is unknown here; "
                "send MemberRemove to the leader",
            )
        target = urls[0].removeprefix("http://").removeprefix("https://")
        async with grpc.aio.insecure_channel(target) as channel:
            stub = rpc_pb2_grpc.ClusterStub(channel)
            try:
                resp: rpc_pb2.MemberRemoveResponse = await stub.MemberRemove(
                    request, timeout=self.node.timeout_s * 2
                )
            except grpc.aio.AioRpcError as exc:
                raise Rejected(
                    exc.code().name, exc.details() or "forwarded MemberRemove failed"
                ) from None
        return resp


def _settle_future(fut: asyncio.Future[None], err: Exception | None) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(None)


class MaintenanceService(rpc_pb2_grpc.MaintenanceServicer):  # type: ignore[misc]
    def __init__(self, node: NodeContext) -> None:
        self.node = node

    @rpc
    async def Status(self, request: rpc_pb2.StatusRequest, context: Any) -> rpc_pb2.StatusResponse:
        st = self.node.log.engine_status()
        off = self.node.log.offsets()
        return rpc_pb2.StatusResponse(
            header=self.node.header(self.node.state.image.revision),
            version=ETCD_VERSION,
            dbSize=sum(s.size for s in self.node.log.segments.segments()),
            dbSizeInUse=sum(s.size for s in self.node.log.segments.segments()),
            leader=self.node.leader_member_id(),
            raftIndex=off.commit_offset,
            raftTerm=st.term,
            raftAppliedIndex=off.apply_offset,
        )

    async def Snapshot(
        self, request: rpc_pb2.SnapshotRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpc_pb2.SnapshotResponse]:
        """Stream a fresh snapshot of this node's image (our format; ``etcdctl snapshot save``
        stores it, ``metaledger snapshot inspect|restore`` read it)."""
        try:
            image = await self.node.read_image(False)
            directory = os.path.join(self.node.config.data_dir, "snap")
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".stream-", suffix=".tmp", dir=directory)
            os.close(fd)
            captured = CapturedImage(image)
            meta = SnapshotMeta(
                cluster_id=f"{self.node.cluster_id:016x}",
                last_offset=captured.last_offset,
                last_term=captured.last_term,
            )
            await asyncio.to_thread(write_snapshot, tmp, meta, captured.records)
        except Exception as exc:
            await abort_stream(context, "Snapshot", exc)
            return
        try:
            content = os.path.getsize(tmp)
            size = content + len(etcd_trailer(content, hashlib.sha256()))
            digest = hashlib.sha256()
            sent = 0
            with open(tmp, "rb") as f:
                while sent < size:
                    blob = f.read(SNAPSHOT_CHUNK_BYTES)
                    digest.update(blob)
                    if len(blob) < SNAPSHOT_CHUNK_BYTES:  # the end: etcd's trailer follows
                        blob += etcd_trailer(content, digest)
                    resp = rpc_pb2.SnapshotResponse(blob=blob)
                    sent += len(blob)
                    resp.remaining_bytes = size - sent
                    if sent == len(blob):
                        resp.header.CopyFrom(self.node.header(image.revision))
                    yield resp
        finally:
            os.unlink(tmp)

    @rpc
    async def MoveLeader(
        self, request: rpc_pb2.MoveLeaderRequest, context: Any
    ) -> rpc_pb2.MoveLeaderResponse:
        image = self.node.state.image
        target = [m for m in self.node.members(image) if m[1] == request.targetID]
        if request.targetID and not target:
            raise Rejected("NOT_FOUND", f"etcdserver: member not found (ID {request.targetID:x})")
        if not self.node.engine.is_leader():
            raise Rejected("FAILED_PRECONDITION", "etcdserver: not leader")
        if target and target[0][2] == self.node.config.listen_peer:
            return rpc_pb2.MoveLeaderResponse(header=self.node.header(image.revision))
        await self.node.transfer_leadership(target[0][2] if target else None)
        return rpc_pb2.MoveLeaderResponse(header=self.node.header(image.revision))

    @rpc
    async def HashKV(self, request: rpc_pb2.HashKVRequest, context: Any) -> rpc_pb2.HashKVResponse:
        """A content hash of this node's key-value image (:mod:`nameserver.image_hash`);
        the header's revision is the image's apply offset. Only the latest image is kept:
        ``revision`` must be 0 or the current revision, which is also the compaction
        revision (no older revision can be read)."""
        image = self.node.state.image
        if 0 < request.revision < image.revision:  # etcd's answer below its compaction
            raise Rejected(
                "OUT_OF_RANGE",
                f"etcdserver: mvcc: required revision has been compacted (revision "
                f"{request.revision} < compact_revision {image.revision}: only the latest "
                "state is kept)",
            )
        self.node.check_revision(request.revision, image.revision)
        digest = await asyncio.to_thread(image_hash.kv_hash, image)
        return rpc_pb2.HashKVResponse(
            header=self.node.header(image.revision), hash=digest, compact_revision=image.revision
        )

    @rpc
    async def Hash(self, request: rpc_pb2.HashRequest, context: Any) -> rpc_pb2.HashResponse:
        """A content hash of this node's whole image, every record type (etcd: the backend)."""
        image = self.node.state.image
        digest = await asyncio.to_thread(image_hash.image_hash, image)
        return rpc_pb2.HashResponse(header=self.node.header(image.revision), hash=digest)

    @rpc
    async def Defragment(
        self, request: rpc_pb2.DefragmentRequest, context: Any
    ) -> rpc_pb2.DefragmentResponse:
        """Nothing to do: the image lives in memory and the logs are append-only segments
        deleted whole (etcd defragments its bolt file)."""
        return rpc_pb2.DefragmentResponse(header=self.node.header(self.node.state.image.revision))

    @rpc
    async def Alarm(self, request: rpc_pb2.AlarmRequest, context: Any) -> rpc_pb2.AlarmResponse:
        # This node's NOSPACE alarm (raftlog.health): raised and cleared by the node itself
        # as its disk fills and frees, so every action (list, disarm, arm) reports it.
        alarms = [rpc_pb2.AlarmMember(memberID=self.node.member_id, alarm=rpc_pb2.NOSPACE)]
        return rpc_pb2.AlarmResponse(
            header=self.node.header(self.node.state.image.revision),
            alarms=alarms if self.node.log.health.refuses_writes else [],
        )


class AdminService(admin_pb2_grpc.AdminServicer):  # type: ignore[misc]
    def __init__(self, node: NodeContext) -> None:
        self.node = node

    @rpc
    async def Status(
        self, request: admin_pb2.StatusRequest, context: Any
    ) -> admin_pb2.StatusResponse:
        st = self.node.log.engine_status()
        off = self.node.log.offsets()
        cfg = self.node.config
        return admin_pb2.StatusResponse(
            id=cfg.node_id,
            role=st.role,
            term=st.term,
            leader=st.leader_id,
            end_offset=off.end_offset,
            commit_offset=off.commit_offset,
            apply_offset=off.apply_offset,
            applied_lag=off.commit_offset - off.apply_offset,
            segment_flushed_offset=off.flushed_offset,
            cluster_id=f"{self.node.cluster_id:016x}",
            member_id=self.node.member_id,
            db_size_bytes=sum(s.size for s in self.node.log.segments.segments()),
            has_quorum=st.has_quorum,
            peer_url="http://" + cfg.listen_peer,
            client_urls=[cfg.client_url],
            items_proposed=self.node.log.items_proposed,
            requests_proposed=self.node.log.requests_proposed,
        )

    @rpc
    async def Members(
        self, request: admin_pb2.MembersRequest, context: Any
    ) -> admin_pb2.MembersResponse:
        resp = admin_pb2.MembersResponse()
        for name, mid, address, client_urls in self.node.members(self.node.state.image):
            resp.members.add(
                id=name, member_id=mid, peer_url="http://" + address, client_urls=list(client_urls)
            )
        return resp
