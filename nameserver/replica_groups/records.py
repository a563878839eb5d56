"""Replica group records: replicas, quorum policy, the replica-groups sub-image and its delta."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2


# ------------------------------------------------------------------ replica groups
@dataclass(frozen=True, slots=True)
class Replica:
    broker_id: int
    address: str
    heartbeat_timeout_ms: int
    registered_revision: int


@dataclass(frozen=True, slots=True)
class QuorumPolicy:
    """RocketMQ 5's quorum-write settings of a group, with RocketMQ's defaults."""

    total_replicas: int = 1
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    ha_max_gap_not_in_sync: int = 256 * 1024

    def to_pb(self) -> records_pb2.ReplicaGroupPolicy:
        return records_pb2.ReplicaGroupPolicy(
            total_replicas=self.total_replicas,
            in_sync_replicas=self.in_sync_replicas,
            min_in_sync_replicas=self.min_in_sync_replicas,
            enable_auto_in_sync_replicas=self.enable_auto_in_sync_replicas,
            ha_max_gap_not_in_sync=self.ha_max_gap_not_in_sync,
        )

    @staticmethod
    def from_pb(p: Any) -> QuorumPolicy:
        """From ``records.ReplicaGroupPolicy`` or ``metaledger.v1.ReplicaGroupPolicy`` (the
        same fields)."""
        return QuorumPolicy(
            p.total_replicas,
            p.in_sync_replicas,
            p.min_in_sync_replicas,
            p.enable_auto_in_sync_replicas,
            p.ha_max_gap_not_in_sync,
        )


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """One broker name's replica group (``records.ReplicaGroupRecord``). Id sets are sorted
    tuples, so equal groups encode to equal bytes."""

    broker_name: str
    cluster_name: str
    replicas: tuple[Replica, ...] = ()
    alive: tuple[int, ...] = ()
    master_id: int = 0
    master_epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0
    policy: QuorumPolicy = QuorumPolicy()
    next_broker_id: int = 1
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0

    def replica(self, broker_id: int) -> Replica | None:
        for r in self.replicas:
            if r.broker_id == broker_id:
                return r
        return None

    def address_of(self, broker_id: int) -> str:
        r = self.replica(broker_id)
        return r.address if r is not None else ""

    def size(self) -> int:
        """What it counts against the replica_group byte quota: its encoded record."""
        return len(self.broker_name.encode()) + len(self.to_record())

    def to_record(self) -> bytes:
        data: bytes = records_pb2.ReplicaGroupRecord(
            broker_name=self.broker_name,
            cluster_name=self.cluster_name,
            replicas=[
                records_pb2.ReplicaRecord(
                    broker_id=r.broker_id,
                    address=r.address,
                    heartbeat_timeout_ms=r.heartbeat_timeout_ms,
                    registered_revision=r.registered_revision,
                )
                for r in self.replicas
            ],
            alive=list(self.alive),
            master_id=self.master_id,
            master_epoch=self.master_epoch,
            sync_state_set=list(self.sync_state_set),
            sync_state_set_epoch=self.sync_state_set_epoch,
            policy=self.policy.to_pb(),
            next_broker_id=self.next_broker_id,
            create_revision=self.create_revision,
            mod_revision=self.mod_revision,
            version=self.version,
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> ReplicaGroup:
        r = records_pb2.ReplicaGroupRecord.FromString(data)
        return ReplicaGroup(
            r.broker_name,
            r.cluster_name,
            tuple(
                Replica(x.broker_id, x.address, x.heartbeat_timeout_ms, x.registered_revision)
                for x in r.replicas
            ),
            tuple(r.alive),
            r.master_id,
            r.master_epoch,
            tuple(r.sync_state_set),
            r.sync_state_set_epoch,
            QuorumPolicy.from_pb(r.policy),
            r.next_broker_id,
            r.create_revision,
            r.mod_revision,
            r.version,
        )


@dataclass(frozen=True, slots=True)
class ReplicaGroupsImage:
    groups: Mapping[str, ReplicaGroup] = field(default_factory=lambda: MappingProxyType({}))
    value_bytes: int = 0

    def get(self, broker_name: str) -> ReplicaGroup | None:
        return self.groups.get(broker_name)

    def __len__(self) -> int:
        return len(self.groups)


class ReplicaGroupDelta(MapDelta[str, ReplicaGroup]):
    def __init__(self, base: ReplicaGroupsImage) -> None:
        super().__init__(base.get, ReplicaGroup.size)
        self.base = base

    def put(self, group: ReplicaGroup) -> None:
        self._change(group.broker_name, group)

    def build(self) -> ReplicaGroupsImage:
        if not self.changes:
            return self.base
        return ReplicaGroupsImage(
            self.merged(self.base.groups), self.base.value_bytes + self.byte_delta
        )
