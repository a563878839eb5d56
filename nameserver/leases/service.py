"""etcd's Lease service: grant, revoke, keepalive, time-to-live, leases."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from nameserver.errors import FailedPrecondition, InvalidArgument, OutOfRange
from nameserver.grpc.status import abort_stream, rpc
from nameserver.leases.apply import MAX_LEASE_TTL_S
from nameserver.leases.expiry import LeaseKeeper, lease_entry
from nameserver.state import consistency
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

if TYPE_CHECKING:
    from nameserver.node import NodeFacade

#: LeaseGrant's trailing metadata: the lease's fencing token, the grant's offset (the
#: header's revision is the store revision, the same once the store counts etcd's way)
FENCING_TOKEN_METADATA = "x-ml-fencing-token"


def new_lease_id() -> int:
    """A lease id chosen by the proposing node before it proposes the grant (apply must be
    deterministic): its clock in ms in the high bits, 22 random bits below, never 0."""
    lease_id = ((int(time.time() * 1000) << 22) | secrets.randbits(22)) & 0x7FFF_FFFF_FFFF_FFFF
    return lease_id or 1


class LeaseService(rpc_pb2_grpc.LeaseServicer):  # type: ignore[misc]
    """etcd's Lease service. Reads of lease state are linearizable (read barrier);
    keepalives are answered from this node's image and checkpointed in batches
    (:mod:`nameserver.leases.expiry`)."""

    def __init__(self, node: NodeFacade, keeper: LeaseKeeper) -> None:
        self.node = node
        self.keeper = keeper

    @rpc
    async def LeaseGrant(
        self, request: rpc_pb2.LeaseGrantRequest, context: Any
    ) -> rpc_pb2.LeaseGrantResponse:
        """Grant a lease. Its fencing token is the grant's offset (it never changes while the
        lease lives, and a later grant always has a higher one): in the trailing metadata,
        and the response header's ``revision`` while the store counts by offset."""
        if request.TTL <= 0:
            raise InvalidArgument(f"etcdserver: TTL must be positive (TTL: {request.TTL})")
        if request.TTL > MAX_LEASE_TTL_S:
            raise OutOfRange("etcdserver: too large lease TTL")
        if request.ID < 0:
            raise InvalidArgument(f"ID: a lease ID must be positive (ID: {request.ID})")
        chosen = request.ID == 0
        if not chosen and (await self.node.read_image(False)).leases.get(request.ID) is not None:
            raise FailedPrecondition("etcdserver: lease already exists")
        # a chosen id that collides (two grants in one ms drawing the same 22 random bits)
        # is rejected by apply like any duplicate; the client retries
        lease_id = new_lease_id() if chosen else request.ID
        op = records_pb2.LeaseOperation()
        op.grant.id, op.grant.ttl_s = lease_id, request.TTL
        applied = await self.node.propose(lease_entry(op, lease_id), context.invocation_metadata())
        # the fencing token (the grant's offset) also in the trailing metadata: the header
        # says the store revision, which a grant keeps once the store counts etcd's way
        with contextlib.suppress(AttributeError):  # a context without metadata (tests)
            context.set_trailing_metadata(((FENCING_TOKEN_METADATA, str(applied.offset)),))
        return rpc_pb2.LeaseGrantResponse(
            header=self.node.header(self.node.revision_after(applied)), ID=lease_id, TTL=request.TTL
        )

    @rpc
    async def LeaseRevoke(
        self, request: rpc_pb2.LeaseRevokeRequest, context: Any
    ) -> rpc_pb2.LeaseRevokeResponse:
        await self.node.require_lease(request.ID)
        op = records_pb2.LeaseOperation()
        op.revoke.id = request.ID
        applied = await self.node.propose(
            lease_entry(op, request.ID), context.invocation_metadata()
        )
        # the store revision after it (counting etcd's way: moved if it deleted keys)
        return rpc_pb2.LeaseRevokeResponse(
            header=self.node.header(self.node.revision_after(applied))
        )

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
