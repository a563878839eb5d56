"""Replica liveness: heartbeats in the leader's memory, alive-set changes in the log.

RocketMQ's controller keeps broker heartbeats in memory (``BrokerHeartbeatManager``) and
writes only what follows from them. So does metaledger, like Kafka's KRaft: a heartbeat is
never an entry. The leader's :class:`ReplicaLiveness` remembers, per (broker name, broker
id), when it last heard from the replica and the max offset and epoch it reported; the
Heartbeat handler (followers forward it to the leader) proposes a ``ReplicaLiveness`` entry
only when a replica that is not alive in the image heartbeats, and every
:data:`SCAN_INTERVAL_S` the leader proposes the replicas whose heartbeat timeout passed as
dead (one entry per group). The reported offsets travel in those entries, so an election
they trigger (a dead master) is decided from the entry alone.

**Leader change.** A new leader knows no heartbeat: it grants every alive replica a full
timeout from the moment it became leader (or first noticed the replica, for one registered
through another node), never expiring anyone on the old leader's word. A replica may thus
stay alive up to one timeout (+ one scan interval) longer than its timeout after a leader
change, never shorter.

**Race.** A heartbeat that arrives while the leader's own "dead" entry for that replica is
in flight sees it alive and proposes nothing; the replica is marked dead and then alive again
at its next heartbeat (heartbeat well within the timeout, as RocketMQ brokers do).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from nameserver.state.duties import PeriodicDuties, now_ms
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from raftlog import Entry, ReplicatedLog

log = logging.getLogger(__name__)

#: How often the leader looks for replicas whose heartbeat timeout passed.
SCAN_INTERVAL_S = 0.2


@dataclass(slots=True)
class Seen:
    at_ms: int
    max_offset: int = 0
    epoch: int = 0
    #: offsets came in a heartbeat since the replica last registered
    reported: bool = False


def liveness_entry(op: records_pb2.ReplicaLiveness) -> Entry:
    return Entry(
        type="replica_group",
        key=op.broker_name.encode(),
        value=records_pb2.ReplicaGroupOperation(liveness=op).SerializeToString(),
    )


class ReplicaLiveness(PeriodicDuties):
    """Heartbeats of replicas as this node (the leader) received them, and the expiry scan."""

    def __init__(
        self,
        rlog: ReplicatedLog,
        state: MetadataStateMachine,
        propose_timeout_s: float,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        super().__init__(rlog, clock_ms)
        self.state = state
        self.timeout_s = propose_timeout_s
        self._seen: dict[tuple[str, int], Seen] = {}

    # -------------------------------------------------------------- heartbeats
    def heartbeat(self, broker_name: str, broker_id: int, max_offset: int, epoch: int) -> None:
        self._seen[(broker_name, broker_id)] = Seen(self.clock_ms(), max_offset, epoch, True)

    def noticed(self, broker_name: str, broker_id: int) -> None:
        """A replica registered here: its timeout runs from now, and the offsets it reported
        before (a restart may have lost some) are forgotten until its next heartbeat."""
        self._seen[(broker_name, broker_id)] = Seen(self.clock_ms())

    def states(self, broker_name: str) -> list[records_pb2.ReplicaState]:
        """What the replicas of a group last reported here since they registered (for
        elections)."""
        return [
            records_pb2.ReplicaState(broker_id=i, max_offset=s.max_offset, epoch=s.epoch)
            for (name, i), s in sorted(self._seen.items())
            if name == broker_name and s.reported
        ]

    # -------------------------------------------------------------- expiry
    def due(self, now: int) -> dict[str, list[int]]:
        """Per group, the alive replicas whose timeout passed at ``now`` (as the leader)."""
        since = self._leader_since_ms or 0
        out: dict[str, list[int]] = {}
        known: set[tuple[str, int]] = set()
        for name, group in self.state.image.replica_groups.groups.items():
            alive = set(group.alive)
            for replica in group.replicas:
                key = (name, replica.broker_id)
                known.add(key)
                if replica.broker_id not in alive:
                    continue
                seen = self._seen.get(key)
                if seen is None:  # first noticed now (registered elsewhere): a full timeout
                    self._seen[key] = Seen(now)
                    continue
                if now >= max(seen.at_ms, since) + replica.heartbeat_timeout_ms:
                    out.setdefault(name, []).append(replica.broker_id)
        for key in [k for k in self._seen if k not in known]:
            del self._seen[key]  # unregistered (or never registered) replicas
        return out

    def start(self) -> None:
        self.run_every((SCAN_INTERVAL_S, self.scan))

    async def stop(self) -> None:
        await self.stop_jobs()

    async def scan(self) -> None:
        """On the leader: propose the replicas whose heartbeat timeout passed as dead."""
        if self.lead() is None:
            return
        due = self.due(self.clock_ms())
        if not due:
            return
        entries = []
        for name, ids in sorted(due.items()):
            op = records_pb2.ReplicaLiveness(broker_name=name, dead=ids)
            op.states.extend(self.states(name))
            entries.append(liveness_entry(op))
        await self.log.propose(entries, self.timeout_s)
        log.info(
            "replicas not alive (no heartbeat within their timeout): %s",
            "; ".join(f"{n}: {ids}" for n, ids in sorted(due.items())),
        )
