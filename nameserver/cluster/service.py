"""etcd's Cluster service: member list, add, remove, update, promote.

Learners as etcd 3.4 has them: ``MemberAdd`` with ``isLearner`` adds a non-voting member
(at most one), ``MemberPromote`` makes it a voter once its log holds nearly all of the
leader's, with etcd's errors (:mod:`nameserver.cluster.learner`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from nameserver.cluster.learner import (
    MAX_LEARNERS,
    LearnerNotInSync,
    NotALearner,
    TooManyLearners,
)
from nameserver.cluster.records import host_port, member_id_of
from nameserver.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unimplemented,
    from_status,
)
from nameserver.grpc.status import rpc
from nameserver.state.image import MetadataImage
from nameserver.tls import node_channel
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from raftlog import (
    Entry,
    LearnerNotReadyError,
)

if TYPE_CHECKING:
    from nameserver.node import NodeFacade


def peer_address(url: str) -> str:
    address = host_port(url)
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"peerURLs: {url!r} is not http://host:port")
    return address


class ClusterService(rpc_pb2_grpc.ClusterServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade) -> None:
        self.node = node

    def _list(self, image: MetadataImage) -> list[Any]:
        scheme = "https://" if self.node.config.peer_cert_file else "http://"  # peer TLS
        learners = self._learners()
        return [
            rpc_pb2.Member(
                ID=mid,
                name=name,
                peerURLs=[scheme + address],
                clientURLs=list(client_urls),
                isLearner=address in learners,
            )
            for name, mid, address, client_urls in self.node.members(image)
        ]

    def _learners(self) -> set[str]:
        return {m.address for m in self.node.engine.members() if m.is_learner}

    async def _change(self, add: bool, address: str) -> None:
        """One membership change (retried while refused, see NodeFacade.engine_call)."""
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
        if len(request.peerURLs) != 1:
            raise InvalidArgument("peerURLs: give exactly one peer URL (http://host:port)")
        address = peer_address(request.peerURLs[0])
        members = self.node.engine.members()
        if address in {m.address for m in members}:
            raise FailedPrecondition("etcdserver: Peer URLs already exists")
        engine = self.node.engine
        if request.isLearner:
            if sum(m.is_learner for m in members) >= MAX_LEARNERS:
                raise TooManyLearners()
            await self.node.engine_call(lambda cb: engine.add_learner(address, cb))
        else:
            await self._change(True, address)
        image = await self.node.read_image(False)
        resp = rpc_pb2.MemberAddResponse(header=self.node.header(image.revision))
        resp.member.CopyFrom(
            rpc_pb2.Member(
                ID=member_id_of(address),
                peerURLs=list(request.peerURLs),
                isLearner=request.isLearner,
            )
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
            raise NotFound(f"etcdserver: member not found (ID {request.ID:x})")
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
        raise Unimplemented(
            "metaledger: MemberUpdate is not supported: a member's peer URL is its identity "
            "here; remove the member and add it again with the new URL",
        )

    @rpc
    async def MemberPromote(
        self, request: rpc_pb2.MemberPromoteRequest, context: Any
    ) -> rpc_pb2.MemberPromoteResponse:
        image = await self.node.read_image(False)
        target = [m for m in self.node.members(image) if m[1] == request.ID]
        if not target:
            raise NotFound("etcdserver: member not found")
        address = target[0][2]
        if address not in self._learners():
            raise NotALearner()
        engine = self.node.engine
        try:
            await self.node.engine_call(lambda cb: engine.promote_member(address, cb))
        except LearnerNotReadyError:
            raise LearnerNotInSync() from None
        image = await self.node.read_image(False)
        resp = rpc_pb2.MemberPromoteResponse(header=self.node.header(image.revision))
        resp.members.extend(self._list(image))
        return resp

    async def _forward_remove_to_leader(
        self, request: rpc_pb2.MemberRemoveRequest, image: MetadataImage, name: str
    ) -> rpc_pb2.MemberRemoveResponse:
        """Only the leader can hand its leadership over: forward the request to it."""
        leader = image.members.find(self.node.engine.leader_address())
        target = leader.client_address if leader is not None else None
        if target is None:
            raise Unavailable(
                f"metaledger: member {name} is the leader and its client URL is unknown here; "
                "send MemberRemove to the leader",
            )
        async with node_channel(target, self.node.config.client_tls) as channel:
            stub = rpc_pb2_grpc.ClusterStub(channel)
            try:
                resp: rpc_pb2.MemberRemoveResponse = await stub.MemberRemove(
                    request, timeout=self.node.timeout_s * 2, metadata=self.node.node_metadata
                )
            except grpc.aio.AioRpcError as exc:
                raise from_status(
                    exc.code(), exc.details() or "forwarded MemberRemove failed"
                ) from None
        return resp
