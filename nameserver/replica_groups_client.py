"""Client side of ``metaledger.v1.ReplicaGroups``.

:class:`nameserver.client.Client` exposes these as thin methods (``replica_register``,
``replica_heartbeat``, ``replica_alter_isr``, ``replica_elect``, ``replica_group``,
``replica_groups``, ``replica_set_policy``); they fail over and raise the client's typed
errors like every other call. A fenced AlterSyncStateSet (stale master epoch or in-sync set
epoch) and a failed election are :class:`~nameserver.client.FailedPrecondition` whose message
names RocketMQ's controller code (``[CONTROLLER_FENCED_MASTER_EPOCH 2000]``); an unknown
group or replica is :class:`~nameserver.client.NotFound`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nameserver.image import QuorumPolicy
from protos.metaledger.v1 import replica_groups_pb2 as pb
from protos.metaledger.v1 import replica_groups_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from nameserver.client import Client

__all__ = [
    "GroupPolicy",
    "GroupReplica",
    "NeedAck",
    "ReplicaGroupInfo",
    "ReplicaGroupWrite",
    "ReplicaHeartbeat",
]


#: totalReplicas, inSyncReplicas, minInSyncReplicas, enableAutoInSyncReplicas, haMaxGapNotInSync
GroupPolicy = QuorumPolicy


@dataclass(frozen=True, slots=True)
class GroupReplica:
    broker_id: int
    address: str
    alive: bool
    in_sync: bool
    heartbeat_timeout_ms: int


@dataclass(frozen=True, slots=True)
class NeedAck:
    need_ack_nums: int
    in_sync_replicas: int
    alive_replicas: int
    enough: bool
    status: str


@dataclass(frozen=True, slots=True)
class ReplicaGroupInfo:
    broker_name: str
    cluster_name: str
    replicas: list[GroupReplica]
    master_id: int
    master_address: str
    master_epoch: int
    sync_state_set: list[int]
    sync_state_set_epoch: int
    policy: QuorumPolicy
    create_revision: int
    mod_revision: int
    version: int
    #: GetGroup only: need_ack_nums of the group as it is
    need_ack: NeedAck | None = None
    #: the serving node's apply offset (reads) or the write's revision
    revision: int = 0

    @classmethod
    def from_proto(
        cls, g: pb.ReplicaGroup, revision: int = 0, need: pb.NeedAckNums | None = None
    ) -> ReplicaGroupInfo:
        return cls(
            g.broker_name,
            g.cluster_name,
            [
                GroupReplica(r.broker_id, r.address, r.alive, r.in_sync, r.heartbeat_timeout_ms)
                for r in g.replicas
            ],
            g.master_id,
            g.master_address,
            g.master_epoch,
            list(g.sync_state_set),
            g.sync_state_set_epoch,
            QuorumPolicy.from_pb(g.policy),
            g.create_revision,
            g.mod_revision,
            g.version,
            None
            if need is None
            else NeedAck(
                need.need_ack_nums,
                need.in_sync_replicas,
                need.alive_replicas,
                need.enough,
                need.status,
            ),
            revision,
        )


@dataclass(frozen=True, slots=True)
class ReplicaGroupWrite:
    """The answer to a write: its revision, the group after it, the broker id a register
    got, and for an election whether the master changed (``code`` says why not)."""

    revision: int
    group: ReplicaGroupInfo
    broker_id: int = 0
    changed: bool = True
    code: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaHeartbeat:
    alive: bool
    master_id: int
    master_address: str
    master_epoch: int
    sync_state_set_epoch: int
    revision: int


def _stub(method: str) -> Any:
    return lambda s: getattr(pb_grpc.ReplicaGroupsStub(s.channel), method)


def register(
    client: Client,
    cluster_name: str,
    broker_name: str,
    address: str,
    broker_id: int = 0,
    heartbeat_timeout_ms: int = 0,
) -> ReplicaGroupWrite:
    req = pb.RegisterReplicaRequest(
        cluster_name=cluster_name,
        broker_name=broker_name,
        address=address,
        broker_id=broker_id,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )
    r = client._call(_stub("Register"), req, write=True)
    return ReplicaGroupWrite(
        r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision), r.broker_id
    )


def heartbeat(
    client: Client, broker_name: str, broker_id: int, max_offset: int = 0, epoch: int = 0
) -> ReplicaHeartbeat:
    req = pb.ReplicaHeartbeatRequest(
        broker_name=broker_name, broker_id=broker_id, max_offset=max_offset, epoch=epoch
    )
    r = client._call(_stub("Heartbeat"), req, write=False)
    return ReplicaHeartbeat(
        r.alive, r.master_id, r.master_address, r.master_epoch, r.sync_state_set_epoch, r.revision
    )


def alter_isr(
    client: Client,
    broker_name: str,
    *,
    master_id: int,
    master_epoch: int,
    sync_state_set_epoch: int,
    sync_state_set: Sequence[int],
) -> ReplicaGroupWrite:
    req = pb.AlterSyncStateSetRequest(
        broker_name=broker_name,
        master_id=master_id,
        master_epoch=master_epoch,
        sync_state_set_epoch=sync_state_set_epoch,
        sync_state_set=list(sync_state_set),
    )
    r = client._call(_stub("AlterSyncStateSet"), req, write=True)
    return ReplicaGroupWrite(r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision))


def elect(
    client: Client, broker_name: str, broker_id: int = 0, unclean: bool = False
) -> ReplicaGroupWrite:
    req = pb.ElectMasterRequest(broker_name=broker_name, broker_id=broker_id, unclean=unclean)
    r = client._call(_stub("ElectMaster"), req, write=True)
    return ReplicaGroupWrite(
        r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision), 0, r.changed, r.code
    )


def get_group(client: Client, broker_name: str) -> ReplicaGroupInfo:
    r = client._call(_stub("GetGroup"), pb.GetGroupRequest(broker_name=broker_name), write=False)
    return ReplicaGroupInfo.from_proto(r.group, r.revision, r.need_ack)


def list_groups(client: Client, cluster_name: str = "") -> list[ReplicaGroupInfo]:
    req = pb.ListGroupsRequest(cluster_name=cluster_name)
    r = client._call(_stub("ListGroups"), req, write=False)
    return [ReplicaGroupInfo.from_proto(g, r.revision) for g in r.groups]


def set_policy(
    client: Client, broker_name: str, policy: GroupPolicy, cluster_name: str = ""
) -> ReplicaGroupWrite:
    req = pb.SetPolicyRequest(
        broker_name=broker_name,
        cluster_name=cluster_name,
        policy=pb.ReplicaGroupPolicy.FromString(policy.to_pb().SerializeToString()),
    )
    r = client._call(_stub("SetPolicy"), req, write=True)
    return ReplicaGroupWrite(r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision))
