"""A member removed from the cluster stops serving, as etcd's does ("the member has been
permanently removed from the cluster": ``ErrMemberRemoved``, rafthttp's 410 Gone).

Once ``member remove`` has committed, the removed member still holds its image and its
ports: left alone, it would list itself as a follower in ``status`` and answer ``get`` from
an image that no longer moves. :class:`RemovedMember` looks at the engine's status
every :data:`CHECK_S`; once the engine says this member was removed
(:attr:`raftlog.consensus.EngineStatus.removed`: its newest configuration, committed,
leaves it out, and no leader has written to it for a couple of election timeouts), it
calls ``on_removed`` once with the reason. The server then stops (no new request is
accepted) and ``metaledger serve`` exits with ``REMOVED`` (77). Its data dir belongs to no
member any more: wipe it before adding the node back (docs/operations.md, "Recovering a
member"); started again on it, the node stops the same way.

The native engine knows; PySyncObj's never reports it (a member it removed is not sent the
entry that removes it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nameserver.state.duties import PeriodicDuties
from raftlog import ReplicatedLog

log = logging.getLogger(__name__)

#: How often the engine's status is looked at.
CHECK_S = 0.5
#: What the node says when it stops (etcd's words).
REMOVED = "the member has been permanently removed from the cluster"


class RemovedMember(PeriodicDuties):
    """Calls ``on_removed(reason)`` once this member has been removed from the cluster."""

    def __init__(self, rlog: ReplicatedLog, node_id: str) -> None:
        super().__init__(rlog)
        self.node_id = node_id
        self.on_removed: Callable[[str], None] | None = None
        self._told = False

    def start(self) -> None:
        self.run_every((CHECK_S, self.check))

    async def stop(self) -> None:
        await self.stop_jobs()

    async def check(self) -> None:
        if self._told or not self.log.engine_status().removed:
            return
        self._told = True
        reason = (
            f"{REMOVED} ({self.node_id} is not in the configuration its log committed); "
            "wipe its data dir before adding it back with member add"
        )
        if self.on_removed is None:
            log.error("%s", reason)
        else:
            self.on_removed(reason)
