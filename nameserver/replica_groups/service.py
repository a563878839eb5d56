"""gRPC service ``metaledger.v1.ReplicaGroups`` (RocketMQ 5 controller semantics).

The rules live in the state machine (:mod:`nameserver.replica_groups.apply`); here requests are
checked early (the same checks apply runs, so a bad request never reaches the log),
proposed and answered. Replica groups are always read linearizably
(:mod:`nameserver.state.consistency`).

Heartbeat and ElectMaster are served by the leader, which alone holds the heartbeats and
the offsets the replicas reported (:mod:`nameserver.replica_groups.liveness`): a follower forwards
them to the leader's client URL (from the member records), marked so that a forwarded call
is never forwarded again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from nameserver.checks import check_name, check_non_negative
from nameserver.errors import AlreadyExists, NotFound, Unavailable, from_status
from nameserver.grpc.status import rpc
from nameserver.replica_groups import apply as replica_groups
from nameserver.replica_groups.apply import GroupResult, controller_error
from nameserver.replica_groups.liveness import ReplicaLiveness, liveness_entry
from nameserver.replica_groups.records import ReplicaGroup
from nameserver.state import consistency
from nameserver.tls import node_channel
from protos import records_pb2
from protos.metaledger.v1 import replica_groups_pb2 as pb
from protos.metaledger.v1 import replica_groups_pb2_grpc as pb_grpc
from raftlog import Applied, Entry

if TYPE_CHECKING:
    from nameserver.node import NodeFacade

FORWARDED_METADATA = "x-ml-forwarded"
DEDUP_METADATA = ("x-ml-client-id", "x-ml-seq")


def group_to_pb(g: ReplicaGroup) -> pb.ReplicaGroup:
    return pb.ReplicaGroup(
        broker_name=g.broker_name,
        cluster_name=g.cluster_name,
        replicas=[
            pb.Replica(
                broker_id=r.broker_id,
                address=r.address,
                alive=r.broker_id in g.alive,
                in_sync=r.broker_id in g.sync_state_set,
                heartbeat_timeout_ms=r.heartbeat_timeout_ms,
            )
            for r in g.replicas
        ],
        master_id=g.master_id,
        master_address=g.address_of(g.master_id),
        master_epoch=g.master_epoch,
        sync_state_set=list(g.sync_state_set),
        sync_state_set_epoch=g.sync_state_set_epoch,
        # the two ReplicaGroupPolicy messages have the same fields and numbers
        policy=pb.ReplicaGroupPolicy.FromString(g.policy.to_pb().SerializeToString()),
        create_revision=g.create_revision,
        mod_revision=g.mod_revision,
        version=g.version,
    )


def need_ack_to_pb(g: ReplicaGroup) -> pb.NeedAckNums:
    n = replica_groups.group_need_ack(g)
    return pb.NeedAckNums(
        need_ack_nums=n.need_ack_nums,
        in_sync_replicas=n.in_sync_replicas,
        alive_replicas=n.alive_replicas,
        enough=n.enough,
        status=n.status,
    )


def _entry(broker_name: str, op: records_pb2.ReplicaGroupOperation) -> Entry:
    return Entry(type="replica_group", key=broker_name.encode(), value=op.SerializeToString())


class ReplicaGroupsService(pb_grpc.ReplicaGroupsServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade, liveness: ReplicaLiveness) -> None:
        self.node = node
        self.liveness = liveness
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    # ------------------------------------------------------------ plumbing
    async def _propose(
        self, broker_name: str, op: records_pb2.ReplicaGroupOperation, context: Any
    ) -> tuple[Applied, GroupResult]:
        applied = await self.node.propose(_entry(broker_name, op), context.invocation_metadata())
        result = applied.result
        if not isinstance(result, GroupResult):  # a de-duplicated retry: no result kept
            group = self.node.state.image.replica_groups.get(broker_name)
            if group is None:
                raise AlreadyExists(
                    f"metaledger: this request was already applied at revision {applied.offset}",
                )
            result = GroupResult(group)
        return applied, result

    def _leader_endpoint(self) -> str | None:
        leader = self.node.state.image.members.find(self.node.engine.leader_address())
        return leader.client_address if leader is not None else None

    async def _forward(self, method: str, request: Any, context: Any) -> Any | None:
        """The leader's answer to ``request``, or None when this node leads (serve here)."""
        if self.node.log.engine_status().role == "leader":
            return None
        metadata = context.invocation_metadata() if context is not None else None
        if any(k == FORWARDED_METADATA for k, _ in metadata or ()):
            raise Unavailable("metaledger: not the leader (leadership moved)")
        endpoint = self._leader_endpoint()
        if endpoint is None:
            raise Unavailable("etcdserver: no leader")
        channel = self._channels.get(endpoint)
        if channel is None:
            channel = self._channels[endpoint] = node_channel(endpoint, self.node.config.client_tls)
        stub = pb_grpc.ReplicaGroupsStub(channel)
        # the client's de-duplication identity goes along, so a retried election is still
        # applied once
        passed = tuple((k, v) for k, v in metadata or () if k in DEDUP_METADATA)
        try:
            return await getattr(stub, method)(
                request,
                timeout=self.node.timeout_s,
                metadata=((FORWARDED_METADATA, "1"), *passed, *self.node.node_metadata),
            )
        except grpc.aio.AioRpcError as err:
            raise from_status(err.code(), err.details() or "") from None

    async def _group(self, broker_name: str) -> tuple[ReplicaGroup, int]:
        image, _ = await consistency.read_image(self.node, "replica_group")
        group = image.replica_groups.get(broker_name)
        if group is None:
            raise controller_error(
                NotFound,
                "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
                f"replica group {broker_name!r} is not registered",
            )
        return group, image.offset

    # ------------------------------------------------------------ handlers
    @rpc
    async def Register(
        self, request: pb.RegisterReplicaRequest, context: Any
    ) -> pb.RegisterReplicaResponse:
        r = records_pb2.ReplicaRegister(
            cluster_name=request.cluster_name,
            broker_name=request.broker_name,
            address=request.address,
            broker_id=request.broker_id,
            heartbeat_timeout_ms=request.heartbeat_timeout_ms,
        )
        replica_groups.check_register(r)
        applied, result = await self._propose(
            r.broker_name, records_pb2.ReplicaGroupOperation(register=r), context
        )
        broker_id = result.broker_id or next(
            (x.broker_id for x in result.group.replicas if x.address == r.address), 0
        )
        self.liveness.noticed(r.broker_name, broker_id)
        return pb.RegisterReplicaResponse(
            revision=applied.offset, broker_id=broker_id, group=group_to_pb(result.group)
        )

    @rpc
    async def Heartbeat(
        self, request: pb.ReplicaHeartbeatRequest, context: Any
    ) -> pb.ReplicaHeartbeatResponse:
        check_name("broker_name", request.broker_name, nul_ok=True)
        replica_groups.check_broker_id("broker_id", request.broker_id)
        check_non_negative("max_offset", request.max_offset)
        check_non_negative("epoch", request.epoch)
        forwarded = await self._forward("Heartbeat", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        name, broker_id = request.broker_name, request.broker_id
        group = self.node.state.image.replica_groups.get(name)
        revision = self.node.state.image.offset
        if group is None or group.replica(broker_id) is None:  # registered just now elsewhere?
            group, revision = await self._group(name)
            if group.replica(broker_id) is None:
                raise controller_error(
                    NotFound,
                    "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
                    f"broker_id {broker_id} is not a replica of {name!r}: register it first",
                )
        self.liveness.heartbeat(name, broker_id, request.max_offset, request.epoch)
        if broker_id not in group.alive:
            op = records_pb2.ReplicaLiveness(broker_name=name, alive=[broker_id])
            op.states.extend(self.liveness.states(name))
            applied = await self.node.propose(liveness_entry(op), None)
            revision = applied.offset
            if isinstance(applied.result, GroupResult):
                group = applied.result.group
            else:
                group = self.node.state.image.replica_groups.get(name) or group
        return pb.ReplicaHeartbeatResponse(
            alive=broker_id in group.alive,
            master_id=group.master_id,
            master_address=group.address_of(group.master_id),
            master_epoch=group.master_epoch,
            sync_state_set_epoch=group.sync_state_set_epoch,
            revision=revision,
        )

    @rpc
    async def AlterSyncStateSet(
        self, request: pb.AlterSyncStateSetRequest, context: Any
    ) -> pb.AlterSyncStateSetResponse:
        a = records_pb2.AlterSyncStateSet(
            broker_name=request.broker_name,
            master_id=request.master_id,
            master_epoch=request.master_epoch,
            sync_state_set_epoch=request.sync_state_set_epoch,
            sync_state_set=list(request.sync_state_set),
        )
        replica_groups.check_alter(a)
        applied, result = await self._propose(
            a.broker_name, records_pb2.ReplicaGroupOperation(alter_sync_state_set=a), context
        )
        return pb.AlterSyncStateSetResponse(
            revision=applied.offset,
            sync_state_set_epoch=result.group.sync_state_set_epoch,
            group=group_to_pb(result.group),
        )

    @rpc
    async def ElectMaster(
        self, request: pb.ElectMasterRequest, context: Any
    ) -> pb.ElectMasterResponse:
        e = records_pb2.ElectMaster(
            broker_name=request.broker_name, broker_id=request.broker_id, unclean=request.unclean
        )
        replica_groups.check_elect(e)
        forwarded = await self._forward("ElectMaster", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        e.states.extend(self.liveness.states(e.broker_name))
        applied, result = await self._propose(
            e.broker_name, records_pb2.ReplicaGroupOperation(elect_master=e), context
        )
        return pb.ElectMasterResponse(
            revision=applied.offset,
            changed=result.changed,
            code=result.code,
            group=group_to_pb(result.group),
        )

    @rpc
    async def GetGroup(self, request: pb.GetGroupRequest, context: Any) -> pb.GetGroupResponse:
        check_name("broker_name", request.broker_name, nul_ok=True)
        group, revision = await self._group(request.broker_name)
        return pb.GetGroupResponse(
            group=group_to_pb(group),
            need_ack=need_ack_to_pb(group),
            revision=revision,
            consistency=consistency.LINEARIZABLE,
        )

    @rpc
    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: Any
    ) -> pb.ListGroupsResponse:
        image, mode = await consistency.read_image(self.node, "replica_group")
        groups = sorted(image.replica_groups.groups.items())
        resp = pb.ListGroupsResponse(revision=image.offset, consistency=mode)
        budget = self.node.response_budget("replica group list")
        for _, g in groups:
            if not request.cluster_name or g.cluster_name == request.cluster_name:
                group = group_to_pb(g)
                budget.spend(group.ByteSize() + 4)  # RESOURCE_EXHAUSTED before passing it
                resp.groups.append(group)
        return resp

    @rpc
    async def SetPolicy(self, request: pb.SetPolicyRequest, context: Any) -> pb.SetPolicyResponse:
        s = records_pb2.SetReplicaGroupPolicy(
            broker_name=request.broker_name,
            cluster_name=request.cluster_name,
            policy=records_pb2.ReplicaGroupPolicy.FromString(request.policy.SerializeToString()),
        )
        replica_groups.check_policy(s)
        applied, result = await self._propose(
            s.broker_name, records_pb2.ReplicaGroupOperation(set_policy=s), context
        )
        return pb.SetPolicyResponse(revision=applied.offset, group=group_to_pb(result.group))
