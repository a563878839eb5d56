"""A member's full disk as a NOSPACE alarm in the log (etcd raises NOSPACE when its
backend cannot grow, and keeps it until ``etcdctl alarm disarm``).

:mod:`raftlog.health` notices ENOSPC/EDQUOT on this member's Raft log or change log and
refuses its writes; that state is local and leaves by itself when space returns (issue
14). In a cluster of several members, :class:`DiskAlarm` also proposes ACTIVATE NOSPACE
for this member, so that every member refuses growing writes (the others would otherwise
keep filling the log this member must still write). The proposal goes through while this
disk is full (``even_if_full``): the other members commit it, this one applies it when
it has space again. It is proposed once per episode, again every
:data:`RETRY_S` while the episode lasts and the alarm is not seen here (this member may
not apply it before its disk has room). Once the disk has room again, the member that raised
the alarm disarms it itself (the cluster heals without a restart, as a lone member does); a
NOSPACE raised by the quota, or by a process since restarted, waits for ``alarm disarm`` as
etcd's. A one-member cluster proposes nothing: no one else could commit it, and the local
state already answers ``alarm list``.

The disarm is proposed whether or not the alarm is in this member's image yet, and the
member forgets that it raised one only once its disarm has applied here. While the disk was
full, the ACTIVATE may have waited uncommitted (every member's Raft log full) and commit
only after the disk recovered, later than this member looks at its image (a member that
disarmed only what its image showed left that alarm raised for good). Both go through this member's
one path to the leader, so the ACTIVATE is ahead of the DEACTIVATE in the log or never commits: once
the DEACTIVATE applied, no NOSPACE of this episode can come back.
"""

from __future__ import annotations

import logging
import time

from nameserver.cluster.apply import alarm_entry
from nameserver.cluster.records import ALARM_NOSPACE, alarm_key
from nameserver.state.duties import PeriodicDuties
from nameserver.state.machine import MetadataStateMachine
from protos.etcdserverpb import rpc_pb2
from raftlog import ConsensusEngine, ReplicatedLog

log = logging.getLogger(__name__)

#: How often the disk's state is looked at.
CHECK_S = 0.5
#: While the disk stays full and the alarm is not seen here, propose again this often.
RETRY_S = 30.0


class DiskAlarm(PeriodicDuties):
    """Proposes this member's NOSPACE alarm while its disk is full (every member)."""

    def __init__(
        self,
        rlog: ReplicatedLog,
        state: MetadataStateMachine,
        engine: ConsensusEngine,
        member_id: int,
        timeout_s: float,
    ) -> None:
        super().__init__(rlog)
        self.state = state
        self.engine = engine
        self.member_id = member_id
        self.timeout_s = timeout_s
        self._proposed_at: float | None = None  # this episode's last proposal (monotonic)
        #: this process raised the member's NOSPACE for its disk: it clears it once the disk
        #: has room again (a quota's NOSPACE, or one from before a restart, waits for disarm)
        self._raised_here = False

    def start(self) -> None:
        self.run_every((CHECK_S, self.raise_if_full))

    async def stop(self) -> None:
        await self.stop_jobs()

    async def raise_if_full(self) -> None:
        if not self.log.health.refuses_writes:
            self._proposed_at = None  # the episode is over
            if self._raised_here:
                await self._clear()
            return
        if len(self.engine.members()) < 2:
            return
        if self.state.image.alarms.get(alarm_key(self.member_id, ALARM_NOSPACE)) is not None:
            return
        now = time.monotonic()
        if self._proposed_at is not None and now - self._proposed_at < RETRY_S:
            return
        self._proposed_at = now
        request = rpc_pb2.AlarmRequest(
            action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=self.member_id, alarm=rpc_pb2.NOSPACE
        )
        log.warning("disk full: raising NOSPACE for member %x in the log", self.member_id)
        self._raised_here = True
        # waits for this member's apply, which may not come before space does: a timeout
        # here is expected, the others have committed it
        await self.log.propose([alarm_entry(request)], self.timeout_s, even_if_full=True)

    async def _clear(self) -> None:
        """The disk has room again: disarm the NOSPACE this process raised for it (a write
        past the quota raises it again at once, see :mod:`nameserver.cluster.nospace`).

        Proposed even when the alarm is not in the image yet: the ACTIVATE may still be on
        its way to commit (see the module docstring). A failed or timed-out proposal is
        proposed again on the next check (a DEACTIVATE of an alarm not raised changes
        nothing)."""
        request = rpc_pb2.AlarmRequest(
            action=rpc_pb2.AlarmRequest.DEACTIVATE, memberID=self.member_id, alarm=rpc_pb2.NOSPACE
        )
        log.warning("disk has room again: clearing NOSPACE for member %x", self.member_id)
        await self.log.propose([alarm_entry(request)], self.timeout_s)
        self._raised_here = False  # applied here: the episode's ACTIVATE, if any, is gone
