"""Lease duties of a node: keepalive checkpoints and, on the leader, expiry.

The state machine never reads a clock (apply is deterministic). Time enters the log only
through entries' ``timestamp_ms``, and only the leader's clock: a leader stamps what a
follower forwards (:func:`raftlog.entry.stamp_item`), so a follower whose clock runs slow
or fast moves no deadline.

* **Keepalives** arrive on any node (``LeaseKeepAlive``) and are answered at once from
  this node's image. They are not written one by one: every
  :data:`CHECKPOINT_INTERVAL_S` each node proposes one ``lease`` entry with a
  ``LeaseRefresh`` batch naming the leases kept alive since the last batch, with no time
  of its own: apply counts them refreshed at the entry's timestamp, when the leader
  appended it (up to one interval after the keepalive: later, never earlier).
  Followers' batches are forwarded to the leader like any write.
* **Expiry** is decided by the leader: every :data:`EXPIRE_INTERVAL_S` it proposes a
  ``LeaseExpire`` for the leases whose deadline passed by its wall clock. Apply re-checks
  each lease against the entry's ``timestamp_ms`` and the lease's ``last_refresh_ms + ttl``
  (a refresh applied in between wins), so a stale expiry never removes a live lease.
* **Each node's view** (remaining TTL, whether a keepalive is still accepted) counts the
  log's times on its own clock through the skew it measured
  (:meth:`PeriodicDuties.log_time_here`), and keepalives received here on its own clock.

**Leader change.** Remaining time carries over from the last checkpoint in the log: a new
leader does not hand leases a fresh TTL. Its predecessor's stamps are moved to its own
clock by the skew it measured as a follower (late rather than early, whichever clock ran
ahead), and never past the start of its leadership: no lease lives longer than a full TTL
(+ grace) from then, and none shorter than the old leader would have kept it. It adds a
grace of one election timeout to the leases whose last checkpoint predates its
leadership, because keepalives the old leader answered but had not yet checkpointed are
lost with it. Hence the bound: after a leader change a lease may live up to one
checkpoint interval + one election timeout longer than its TTL, never less than its TTL
after the last keepalive acknowledged to its holder. (A keepalive answered by a follower
counts at the leader only once its checkpoint is applied, up to one checkpoint interval
later, so a holder should keep alive well before TTL - checkpoint interval, as etcd
clients do at TTL/3.)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from nameserver.leases.records import Lease
from nameserver.state.duties import PeriodicDuties, now_ms
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from raftlog import Entry, ReplicatedLog
from raftlog.clock import LogClock

log = logging.getLogger(__name__)

#: How often a node writes the keepalives it received as one ``LeaseRefresh`` entry.
CHECKPOINT_INTERVAL_S = 0.5
#: How often the leader looks for expired leases.
EXPIRE_INTERVAL_S = 0.2
#: At most this many leases per ``LeaseExpire`` / ``LeaseRefresh`` entry.
MAX_LEASES_PER_ENTRY = 1000
#: How late a refresh known from the log may count on a node's clock: a checkpoint counts
#: when the leader appended it (up to one checkpoint interval after the keepalive, plus
#: forwarding) and the skew is measured up to one duty round late. Expiry waits for it
#: (late rather than early); the remaining TTL a node reports leaves it out.
REPORT_SLACK_MS = int((CHECKPOINT_INTERVAL_S + EXPIRE_INTERVAL_S) * 1000) + 100


def lease_entry(op: records_pb2.LeaseOperation, lease_id: int = 0) -> Entry:
    key = lease_id.to_bytes(8, "big", signed=True) if lease_id else b""
    return Entry(type="lease", key=key, value=op.SerializeToString())


class LeaseKeeper(PeriodicDuties):
    """Batches keepalives into checkpoints and, while leader, proposes expiries."""

    def __init__(
        self,
        rlog: ReplicatedLog,
        state: MetadataStateMachine,
        election_timeout_ms: int,
        propose_timeout_s: float,
        clock_ms: Callable[[], int] = now_ms,
        log_clock: LogClock | None = None,
    ) -> None:
        super().__init__(rlog, clock_ms, log_clock)
        self.state = state
        self.grace_ms = election_timeout_ms
        self.timeout_s = propose_timeout_s
        self._unsent: dict[int, int] = {}  # lease id -> latest keepalive not yet proposed
        self._seen: dict[int, int] = {}  # lease id -> latest keepalive received here

    # -------------------------------------------------------------- keepalive
    def refreshed_ms(self, lease: Lease) -> int:
        """The lease's last refresh as this node knows it, on its clock: the log's
        checkpoint (a leader's stamp, moved to this clock) or a keepalive received here
        since."""
        return max(self.log_time_here(lease.last_refresh_ms), self._seen.get(lease.id, 0))

    def remaining_ms(self, lease: Lease, at_ms: int | None = None) -> int:
        at = self.clock_ms() if at_ms is None else at_ms
        return self.refreshed_ms(lease) + lease.ttl_s * 1000 - at

    def remaining_ttl_s(self, lease: Lease) -> int:
        """Remaining TTL in whole seconds, rounded up: at least 1 while the lease lives
        here, else what is left for sure. A refresh this node knows only from the log counts
        up to :data:`REPORT_SLACK_MS` late here, which the answer leaves out (a keepalive
        received here is exact)."""
        remaining = self.remaining_ms(lease)
        if remaining <= 0:
            return 0
        if self._seen.get(lease.id, 0) < self.log_time_here(lease.last_refresh_ms):
            remaining -= REPORT_SLACK_MS
        return max(1, math.ceil(remaining / 1000))

    def keep_alive(self, lease: Lease) -> int:
        """Record a keepalive of ``lease`` now; returns its TTL, or 0 if it already expired
        (its expiry is on the way: it is not revived)."""
        at = self.clock_ms()
        if self.remaining_ms(lease, at) <= 0:
            return 0
        self._seen[lease.id] = at
        self._unsent[lease.id] = at
        return lease.ttl_s

    # ------------------------------------------------------------------ tasks
    def start(self) -> None:
        self.run_every((CHECKPOINT_INTERVAL_S, self.checkpoint), (EXPIRE_INTERVAL_S, self.expire))

    async def stop(self) -> None:
        await self.stop_jobs()

    async def checkpoint(self) -> None:
        """Propose the keepalives received since the last checkpoint as one entry."""
        leases = self.state.image.leases
        self._seen = {i: t for i, t in self._seen.items() if leases.get(i) is not None}
        if not self._unsent:
            return
        batch = sorted(self._unsent.items())[:MAX_LEASES_PER_ENTRY]
        for lease_id, _ in batch:
            del self._unsent[lease_id]
        op = records_pb2.LeaseOperation()
        # no time of this node's: apply counts the entry's, the leader's clock
        op.refresh.checkpoints.extend(records_pb2.LeaseCheckpoint(id=i) for i, _ in batch)
        try:
            await self.log.propose([lease_entry(op)], self.timeout_s)
        except BaseException:
            for lease_id, at in batch:  # try again with the next batch
                self._unsent[lease_id] = max(at, self._unsent.get(lease_id, 0))
            raise

    def due_for_expiry(self, now: int) -> list[int]:
        """The leases whose deadline (plus the grace of a new leader) passed at ``now``."""
        since = self._leader_since_ms or 0
        due = []
        for lease in self.state.image.leases.leases.values():
            refreshed = self.refreshed_ms(lease)
            grace = self.grace_ms if refreshed < since else 0
            if now >= refreshed + lease.ttl_s * 1000 + grace:
                due.append(lease.id)
        return sorted(due)[:MAX_LEASES_PER_ENTRY]

    async def expire(self) -> None:
        """On the leader: propose the expiry of the leases whose deadline passed."""
        if self.lead() is None:
            return
        due = self.due_for_expiry(self.clock_ms())
        if not due:
            return
        op = records_pb2.LeaseOperation()
        op.expire.ids.extend(due)
        applied = await self.log.propose([lease_entry(op)], self.timeout_s)
        if isinstance(applied.result, list) and applied.result:
            log.info("leases expired: %s", ", ".join(f"{i:x}" for i in applied.result))
