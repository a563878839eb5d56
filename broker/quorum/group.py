"""GroupView: a replica's immutable picture of its replica group, as metaledger last answered.

Built from :class:`nameserver.client.ReplicaGroupInfo` (GetGroup, Register,
AlterSyncStateSet, ElectMaster answers). The role manager swaps the whole view on each
answer with a master epoch not lower than the one it holds (RocketMQ 5's ``ReplicasManager``:
brokers act only on a higher master epoch), and the send path and the in-sync set upkeep
read the current reference without locks (the view is immutable).
"""

from __future__ import annotations

from dataclasses import dataclass

from nameserver.client import GroupPolicy, ReplicaGroupInfo

__all__ = ["GroupView"]


@dataclass(frozen=True, slots=True)
class GroupView:
    broker_name: str
    #: this replica's broker id in the group
    self_id: int
    master_id: int
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    #: replicas metaledger counts alive (heartbeats within their timeout)
    alive: frozenset[int]
    policy: GroupPolicy
    #: metaledger's revision of the answer this view came from
    revision: int = 0

    @classmethod
    def of(cls, info: ReplicaGroupInfo, self_id: int) -> GroupView:
        return cls(
            info.broker_name,
            self_id,
            info.master_id,
            info.master_address,
            info.master_epoch,
            frozenset(info.sync_state_set),
            info.sync_state_set_epoch,
            frozenset(r.broker_id for r in info.replicas if r.alive),
            info.policy,
            info.revision,
        )

    @property
    def is_master(self) -> bool:
        return self.master_id == self.self_id

    @property
    def alive_replicas(self) -> int:
        """RocketMQ 5's aliveReplicaNumInGroup (``DefaultMessageStore``)."""
        return len(self.alive)

    @property
    def in_sync_slaves(self) -> frozenset[int]:
        """The in-sync set without the master: the slaves whose acks count."""
        return self.sync_state_set - {self.master_id}

    def newer_than(self, other: GroupView | None) -> bool:
        """Whether this view may replace ``other``: a higher master epoch, else a higher in-sync
        set epoch, else a revision at least as high (alive set and policy change without an
        epoch)."""
        if other is None:
            return True
        mine = (self.master_epoch, self.sync_state_set_epoch, self.revision)
        return mine >= (other.master_epoch, other.sync_state_set_epoch, other.revision)
