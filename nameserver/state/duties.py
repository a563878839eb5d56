"""Periodic duties of a node and its leadership clock, shared by the liveness keepers
(leases: :mod:`nameserver.leases.expiry`, brokers: :mod:`nameserver.routing.liveness`, replica
groups: :mod:`nameserver.replica_groups.liveness`).

Each keeper tracks liveness in memory (keepalives, heartbeats) and, on the leader only,
proposes expiries into the log. A node that just became leader has missed what the old
leader saw, so every keeper gives everything a full timeout counted from
:attr:`PeriodicDuties.leader_since_ms` before expiring it.

**Whose clock.** The times in the log are the clock of the leader that appended each entry
(a leader stamps what a follower forwards: :func:`raftlog.entry.stamp_item`). A node counts
them against its own clock through :attr:`PeriodicDuties.skew_ms`: its own clock minus the
leader's, measured as *own clock when a new stamp was first seen here minus that stamp*.
The stamp was made before it was seen, so this over-estimates the skew by the time between
the two (replication, apply and up to one duty round): log times moved to this node's clock
come out a little late, never early, whichever clock runs ahead or slow.

**Taking over.** A node that becomes leader may not have measured its predecessor's
newest stamps in a duty round (a first leader an hour ahead lost its leadership at once):
the node's :class:`raftlog.clock.LogClock` then measures them on takeover, or at its first
stamp below the last one applied, and :meth:`PeriodicDuties.lead` takes that measurement
as the skew it hands over. When the stamp lag changes while this node leads (measured at
a stamp), its leadership clock restarts there: everything gets a full timeout (+ grace)
from that moment, and nothing it stamped before counts earlier than it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from raftlog import ReplicatedLog
from raftlog.clock import LOG_CLOCK, LogClock, wall_ms

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


def now_ms() -> int:
    """The node's steady wall clock (:mod:`raftlog.clock`): steps of the system clock
    move it by at most 0.1 % of the time that passes."""
    return wall_ms()


class PeriodicDuties:
    """Runs jobs every few hundred ms and knows since when this node leads."""

    def __init__(
        self,
        rlog: ReplicatedLog,
        clock_ms: Callable[[], int] = now_ms,
        log_clock: LogClock | None = None,
    ) -> None:
        """``log_clock``: what this node stamps the log with, on ``clock_ms``
        (:data:`raftlog.clock.LOG_CLOCK` with the default clock; else none: a clock of its
        own stamps nothing)."""
        self.log = rlog
        self.clock_ms = clock_ms
        if log_clock is None and clock_ms is now_ms:
            log_clock = LOG_CLOCK
        self._log_clock = log_clock
        #: the stamp lag when this node became leader: its own stamps are its clock less it
        self._lead_lag_ms = 0
        #: the lag it led with before it measured another in this term (None: it did not)
        self._lag_before_ms: int | None = None
        #: when this node became leader in its current term (None: not the leader, as of
        #: the last :meth:`lead` call)
        self._leader_since_ms: int | None = None
        self._leader_term = -1
        #: this node's clock minus the clock of the log's leader (module docstring)
        self.skew_ms = 0
        #: :attr:`skew_ms` as it was when this node became leader: how far the previous
        #: leader's stamps lag behind this node's clock
        self._handover_skew_ms = 0
        self._stamp_seen = 0
        self._tasks: list[asyncio.Task[None]] = []

    def observe_stamp(self, stamp_ms: int) -> None:
        """Note the latest log time applied here; a new one measures :attr:`skew_ms`."""
        if stamp_ms and stamp_ms != self._stamp_seen:
            self._stamp_seen = stamp_ms
            now = self.clock_ms()
            if self._log_clock is not None:
                self.skew_ms = self._log_clock.observe(stamp_ms, now)
            else:
                self.skew_ms = now - stamp_ms

    def lead(self) -> int | None:
        """Whether this node leads now: the time it became leader in this term, else None.

        The skew is measured while following only: once this node leads, the stamps it
        applies are soon its own, and the skew it hands over must be its predecessor's
        (a measurement from its own first stamp said 0, and a leader an hour ahead expired
        every lease its predecessor had refreshed at once)."""
        status = self.log.engine_status()
        if status.role != "leader":
            self.observe_stamp(self.log.last_stamp_ms)
            self._leader_since_ms = None
            return None
        lc = self._log_clock
        if self._leader_since_ms is None or status.term != self._leader_term:
            self._leader_since_ms = self.clock_ms()
            self._leader_term = status.term
            self._take_measured()
            self._handover_skew_ms = self.skew_ms
            self._lead_lag_ms = lc.lag_ms if lc is not None else 0
            self._lag_before_ms = None
        elif lc is not None and lc.lag_ms != self._lead_lag_ms:
            # measured at a stamp below the log's time (module docstring): lead anew
            self._leader_since_ms = self.clock_ms()
            self._take_measured()
            self._handover_skew_ms = self.skew_ms
            self._lag_before_ms, self._lead_lag_ms = self._lead_lag_ms, lc.lag_ms
        return self._leader_since_ms

    def _take_measured(self) -> None:
        """The log clock's last measurement, when it measured a stamp this keeper did not
        (on takeover, at a stamp, or another keeper's duty round since this one's)."""
        lc = self._log_clock
        if lc is None:
            return
        stamp, skew = lc.measured
        if stamp and stamp != self._stamp_seen:
            self._stamp_seen = stamp
            self.skew_ms = skew

    def log_time_here(self, at_ms: int) -> int:
        """A time from the log (a leader's stamp) on this node's clock, late rather than
        early. On a follower: moved by :attr:`skew_ms` (or by a fresh measurement when a
        new stamp was applied since). On the leader, a time from before
        its leadership came from its predecessor's clock: moved by the skew it had then,
        and never past the start of this leadership (nothing the old leader acknowledged
        can be later); its own stamps are its clock already."""
        since = self._leader_since_ms
        if since is None:
            # a stamp applied since the last duty round (this node just stopped leading, or
            # a new leader's first stamp came) is measured for this answer; only the duty
            # round keeps a measurement (:meth:`lead`: not in the moment after this node
            # became leader and before its round, when the stamps it applies are its own)
            stamp = self.log.last_stamp_ms
            if stamp and stamp != self._stamp_seen:
                return at_ms + self.clock_ms() - stamp
            return at_ms + self.skew_ms
        own_at = at_ms + self._lead_lag_ms
        if own_at < since:
            moved = at_ms + self._handover_skew_ms
            if self._lag_before_ms is not None:
                # or its own, stamped before it measured again: late rather than early
                moved = max(moved, at_ms + self._lag_before_ms)
            return min(moved, since)
        return own_at

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
