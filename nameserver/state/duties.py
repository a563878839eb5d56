"""Periodic duties of a node and its leadership clock, shared by the liveness keepers
(leases: :mod:`nameserver.leases.expiry`, brokers: :mod:`nameserver.routing.liveness`, replica
groups: :mod:`nameserver.replica_groups.liveness`).

Each keeper tracks liveness in memory (keepalives, heartbeats) and, on the leader only,
proposes expiries into the log. A node that just became leader has missed what the old
leader saw, so every keeper gives everything a full timeout counted from
:attr:`PeriodicDuties.leader_since_ms` before expiring it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from raftlog import ReplicatedLog
from raftlog.clock import wall_ms

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


def now_ms() -> int:
    """The node's steady wall clock (:mod:`raftlog.clock`): steps of the system clock
    move it by at most 0.1 % of the time that passes."""
    return wall_ms()


class PeriodicDuties:
    """Runs jobs every few hundred ms and knows since when this node leads."""

    def __init__(self, rlog: ReplicatedLog, clock_ms: Callable[[], int] = now_ms) -> None:
        self.log = rlog
        self.clock_ms = clock_ms
        #: when this node became leader in its current term (None: not the leader, as of
        #: the last :meth:`lead` call)
        self._leader_since_ms: int | None = None
        self._leader_term = -1
        self._tasks: list[asyncio.Task[None]] = []

    def lead(self) -> int | None:
        """Whether this node leads now: the time it became leader in this term, else None."""
        status = self.log.engine_status()
        if status.role != "leader":
            self._leader_since_ms = None
            return None
        if self._leader_since_ms is None or status.term != self._leader_term:
            self._leader_since_ms = self.clock_ms()
            self._leader_term = status.term
        return self._leader_since_ms

    def run_every(self, *jobs: tuple[float, Job]) -> None:
        """Start each ``(interval_s, job)`` on the running loop until :meth:`stop_jobs`."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(interval, job)) for interval, job in jobs]

    async def stop_jobs(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _every(self, interval_s: float, job: Job) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # consensus refused (no leader, timeout): retry later
                log.debug("%s.%s: %s", type(self).__name__, getattr(job, "__name__", job), exc)
