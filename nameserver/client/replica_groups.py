"""The replica-groups surface: ``metaledger.v1.ReplicaGroups`` (RocketMQ 5 controller).

:class:`ReplicaGroupsApi` gives :class:`nameserver.client.Client` ``replica_register``,
``replica_heartbeat``, ``replica_alter_isr``, ``replica_elect``, ``replica_group``,
``replica_groups`` and ``replica_set_policy``; they fail over and raise the client's typed
errors like every other call. A fenced AlterSyncStateSet (stale master epoch or in-sync set
epoch) and a failed election are :class:`~nameserver.client.FailedPrecondition` whose message
names RocketMQ's controller code (``[CONTROLLER_FENCED_MASTER_EPOCH 2000]``); an unknown
group or replica is :class:`~nameserver.client.NotFound`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nameserver.client.transport import Transport
from protos.metaledger.v1 import replica_groups_pb2 as pb
from protos.metaledger.v1 import replica_groups_pb2_grpc as pb_grpc

__all__ = [
    "GroupPolicy",
    "GroupReplica",
    "NeedAck",
    "ReplicaGroupInfo",
    "ReplicaGroupWrite",
    "ReplicaGroupsApi",
    "ReplicaHeartbeat",
]


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """RocketMQ 5's quorum-write settings of a group (totalReplicas, inSyncReplicas,
    minInSyncReplicas, enableAutoInSyncReplicas, haMaxGapNotInSync), with its defaults."""

    total_replicas: int = 1
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    ha_max_gap_not_in_sync: int = 256 * 1024

    def to_proto(self) -> pb.ReplicaGroupPolicy:
        return pb.ReplicaGroupPolicy(
            total_replicas=self.total_replicas,
            in_sync_replicas=self.in_sync_replicas,
            min_in_sync_replicas=self.min_in_sync_replicas,
            enable_auto_in_sync_replicas=self.enable_auto_in_sync_replicas,
            ha_max_gap_not_in_sync=self.ha_max_gap_not_in_sync,
        )

    @classmethod
    def from_proto(cls, p: pb.ReplicaGroupPolicy) -> GroupPolicy:
        return cls(
            p.total_replicas,
            p.in_sync_replicas,
            p.min_in_sync_replicas,
            p.enable_auto_in_sync_replicas,
            p.ha_max_gap_not_in_sync,
        )


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
    policy: GroupPolicy
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
            GroupPolicy.from_proto(g.policy),
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


class ReplicaGroupsApi(Transport):
    """RocketMQ 5 replica groups (metaledger.v1.ReplicaGroups)."""

    def replica_register(
        self,
        cluster_name: str,
        broker_name: str,
        address: str,
        broker_id: int = 0,
        heartbeat_timeout_ms: int = 0,
    ) -> ReplicaGroupWrite:
        """ReplicaGroups.Register: assigns (``broker_id`` 0) or keeps a broker id."""
        req = pb.RegisterReplicaRequest(
            cluster_name=cluster_name,
            broker_name=broker_name,
            address=address,
            broker_id=broker_id,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
        )
        r = self._call(_stub("Register"), req, write=True)
        return ReplicaGroupWrite(
            r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision), r.broker_id
        )

    def replica_heartbeat(
        self, broker_name: str, broker_id: int, max_offset: int = 0, epoch: int = 0
    ) -> ReplicaHeartbeat:
        req = pb.ReplicaHeartbeatRequest(
            broker_name=broker_name, broker_id=broker_id, max_offset=max_offset, epoch=epoch
        )
        r = self._call(_stub("Heartbeat"), req, write=False)
        return ReplicaHeartbeat(
            r.alive,
            r.master_id,
            r.master_address,
            r.master_epoch,
            r.sync_state_set_epoch,
            r.revision,
        )

    def replica_alter_isr(
        self,
        broker_name: str,
        *,
        master_id: int,
        master_epoch: int,
        sync_state_set_epoch: int,
        sync_state_set: Sequence[int],
    ) -> ReplicaGroupWrite:
        """ReplicaGroups.AlterSyncStateSet: a compare-and-set fenced by both epochs."""
        req = pb.AlterSyncStateSetRequest(
            broker_name=broker_name,
            master_id=master_id,
            master_epoch=master_epoch,
            sync_state_set_epoch=sync_state_set_epoch,
            sync_state_set=list(sync_state_set),
        )
        r = self._call(_stub("AlterSyncStateSet"), req, write=True)
        return ReplicaGroupWrite(r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision))

    def replica_elect(
        self, broker_name: str, broker_id: int = 0, unclean: bool = False
    ) -> ReplicaGroupWrite:
        req = pb.ElectMasterRequest(broker_name=broker_name, broker_id=broker_id, unclean=unclean)
        r = self._call(_stub("ElectMaster"), req, write=True)
        return ReplicaGroupWrite(
            r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision), 0, r.changed, r.code
        )

    def replica_group(self, broker_name: str) -> ReplicaGroupInfo:
        """ReplicaGroups.GetGroup: the member group and its need_ack_nums."""
        r = self._call(_stub("GetGroup"), pb.GetGroupRequest(broker_name=broker_name), write=False)
        return ReplicaGroupInfo.from_proto(r.group, r.revision, r.need_ack)

    def replica_groups(self, cluster_name: str = "") -> list[ReplicaGroupInfo]:
        req = pb.ListGroupsRequest(cluster_name=cluster_name)
        r = self._call(_stub("ListGroups"), req, write=False)
        return [ReplicaGroupInfo.from_proto(g, r.revision) for g in r.groups]

    def replica_set_policy(
        self, broker_name: str, policy: GroupPolicy, cluster_name: str = ""
    ) -> ReplicaGroupWrite:
        req = pb.SetPolicyRequest(
            broker_name=broker_name,
            cluster_name=cluster_name,
            policy=policy.to_proto(),
        )
        r = self._call(_stub("SetPolicy"), req, write=True)
        return ReplicaGroupWrite(r.revision, ReplicaGroupInfo.from_proto(r.group, r.revision))
