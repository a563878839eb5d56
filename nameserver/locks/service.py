"""etcd's lock and election services (``v3lockpb.Lock``, ``v3electionpb.Election``): gRPC
adapters over the recipes of :mod:`nameserver.locks.recipes` (etcd's ``clientv3/concurrency``
mutex and election run inside the server; fencing, waits and errors are described there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from nameserver.errors import FailedPrecondition, InvalidArgument, NotFound
from nameserver.grpc.status import abort_stream, rpc
from nameserver.kv import semantics as kvops
from nameserver.locks.recipes import (
    MISSING_LEADER_KEY,
    NO_LEADER,
    NOT_LEADER,
    Coordinator,
    first_created,
    owner_key,
    require_lease_id,
    require_name,
)
from protos import records_pb2
from protos.etcdserverpb import (
    rpc_pb2,
    v3election_pb2,
    v3election_pb2_grpc,
    v3lock_pb2,
    v3lock_pb2_grpc,
)
from raftlog import Entry

if TYPE_CHECKING:
    from nameserver.node import NodeFacade


class LockService(v3lock_pb2_grpc.LockServicer):  # type: ignore[misc]
    """``v3lockpb.Lock``: etcd's mutex recipe (:mod:`nameserver.locks.recipes`)."""

    def __init__(self, node: NodeFacade) -> None:
        self.node = node
        self.coord = Coordinator(node)

    @rpc
    async def Lock(self, request: v3lock_pb2.LockRequest, context: Any) -> v3lock_pb2.LockResponse:
        require_name(request.name, "lock")
        require_lease_id(request.lease, "a lock")
        await self.node.require_lease(request.lease)
        key = owner_key(request.name, request.lease)
        revision, _, my_rev = await self.coord.create_if_absent(key, b"", request.lease)
        try:
            image = await self.coord.wait_deletes(request.name, key, my_rev)
        except BaseException:
            self.coord.cleanup(key, my_rev)
            raise
        return v3lock_pb2.LockResponse(
            header=self.node.header(max(image.revision, revision)), key=key
        )

    @rpc
    async def Unlock(
        self, request: v3lock_pb2.UnlockRequest, context: Any
    ) -> v3lock_pb2.UnlockResponse:
        if not request.key:
            raise InvalidArgument("etcdserver: key is not provided (unlock: key must not be empty)")
        op = records_pb2.KvOperation(delete_range=rpc_pb2.DeleteRangeRequest(key=request.key))
        applied = await self.node.propose(
            Entry(type="kv", key=request.key, value=op.SerializeToString()),
            context.invocation_metadata(),
        )
        result = applied.result
        revision = getattr(getattr(result, "header", None), "revision", 0)
        return v3lock_pb2.UnlockResponse(
            header=self.node.header(revision or self.node.state.image.revision)
        )


def _leader_key(request: Any) -> v3election_pb2.LeaderKey:
    if not request.HasField("leader"):
        raise InvalidArgument(MISSING_LEADER_KEY)
    leader: v3election_pb2.LeaderKey = request.leader
    if not leader.key or leader.rev <= 0:
        raise InvalidArgument(f"{MISSING_LEADER_KEY} (leader.key and leader.rev are required)")
    return leader


class ElectionService(v3election_pb2_grpc.ElectionServicer):  # type: ignore[misc]
    """``v3electionpb.Election``: etcd's election recipe (:mod:`nameserver.locks.recipes`)."""

    def __init__(self, node: NodeFacade) -> None:
        self.node = node
        self.coord = Coordinator(node)

    @rpc
    async def Campaign(
        self, request: v3election_pb2.CampaignRequest, context: Any
    ) -> v3election_pb2.CampaignResponse:
        require_name(request.name, "campaign")
        require_lease_id(request.lease, "a campaign")
        self.node.check_value(request.value)
        await self.node.require_lease(request.lease)
        key = owner_key(request.name, request.lease)
        revision, existing, my_rev = await self.coord.create_if_absent(
            key, request.value, request.lease
        )
        try:
            if existing is not None and existing != request.value:
                await self._proclaim(key, my_rev, request.value)
            try:
                await self.coord.wait_deletes(request.name, key, my_rev)
            except FailedPrecondition as exc:  # the session's expiry, in election's words
                raise FailedPrecondition(str(exc).replace("mutex:", "election:")) from None
        except BaseException:
            self.coord.cleanup(key, my_rev)
            raise
        return v3election_pb2.CampaignResponse(
            header=self.node.header(revision),
            leader=v3election_pb2.LeaderKey(
                name=request.name, key=key, rev=my_rev, lease=request.lease
            ),
        )

    async def _proclaim(self, key: bytes, rev: int, value: bytes) -> int:
        put = rpc_pb2.PutRequest(key=key, value=value, ignore_lease=True)
        resp, revision = await self.coord.guarded(key, rev, rpc_pb2.RequestOp(request_put=put))
        if not resp.succeeded:
            raise FailedPrecondition(NOT_LEADER)
        return revision

    @rpc
    async def Proclaim(
        self, request: v3election_pb2.ProclaimRequest, context: Any
    ) -> v3election_pb2.ProclaimResponse:
        leader = _leader_key(request)
        self.node.check_value(request.value)
        revision = await self._proclaim(leader.key, leader.rev, request.value)
        return v3election_pb2.ProclaimResponse(header=self.node.header(revision))

    @rpc
    async def Resign(
        self, request: v3election_pb2.ResignRequest, context: Any
    ) -> v3election_pb2.ResignResponse:
        leader = _leader_key(request)
        delete = rpc_pb2.DeleteRangeRequest(key=leader.key)
        resp, revision = await self.coord.guarded(
            leader.key, leader.rev, rpc_pb2.RequestOp(request_delete_range=delete)
        )
        if not resp.succeeded:
            raise FailedPrecondition(NOT_LEADER)
        return v3election_pb2.ResignResponse(header=self.node.header(revision))

    @rpc
    async def Leader(
        self, request: v3election_pb2.LeaderRequest, context: Any
    ) -> v3election_pb2.LeaderResponse:
        require_name(request.name, "leader")
        image = await self.node.read_image(False)
        kv = first_created(image, request.name)
        if kv is None:
            raise NotFound(NO_LEADER)
        return v3election_pb2.LeaderResponse(
            header=self.node.header(image.revision), kv=kvops.to_pb(kv)
        )

    async def Observe(
        self, request: v3election_pb2.LeaderRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[v3election_pb2.LeaderResponse]:
        """Stream the leader's key whenever it changes (a new leader, or a Proclaim); nothing
        while there is no leader. Ends only when the client cancels."""
        try:
            require_name(request.name, "observe")
            image = await self.node.read_image(False)
            seen = self.node.log.apply_offset
        except Exception as exc:
            await abort_stream(context, "Observe", exc)
            return
        last: tuple[bytes, int] | None = None
        while True:
            kv = first_created(image, request.name)
            if kv is not None and (kv.key, kv.mod_revision) != last:
                last = (kv.key, kv.mod_revision)
                yield v3election_pb2.LeaderResponse(
                    header=self.node.header(image.revision), kv=kvops.to_pb(kv)
                )
            seen, image = await self.coord.next_image(seen)
