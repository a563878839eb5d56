"""The wall clock a node stamps log entries with and counts lease and liveness deadlines in.

It starts at the system's real-time clock and then advances with the monotonic clock,
following the real-time clock only by slewing at most :data:`MAX_SLEW` (0.1 %, twice what
ntpd allows itself). So a step of the system clock while the node runs (``date -s``, NTP
stepping after a long partition, a VM resumed with a stale clock) moves this clock by at
most 1 ms per second that passes: a lease granted for T seconds is never expired before
T * (1 - MAX_SLEW) has passed on the leader, and a follower whose clock stepped back keeps
stamping keepalives that count. What a step cannot move either way is the monotonic clock
itself: a node whose *monotonic* clock runs fast (a broken timer, not a step) expires
leases early, as in every system that counts timeouts (etcd included).

This clock never goes backwards within a process.

**The log's time.** What a node stamps into the log is :func:`stamp_ms`: this clock minus a
*stamp lag*, the difference between this clock and the log's (the clock of the leader that
appended what it applies) when it exceeds :data:`LAG_SLACK_MS` (:func:`lag_beyond_slack`),
which the node's lease keepers
measure while it follows (:func:`set_stamp_lag`, from
:class:`nameserver.state.duties.PeriodicDuties`). So a leader whose clock is an hour
ahead of or behind its predecessor's continues the log's time instead of moving it by the
hour: a lease its predecessor refreshed keeps its deadline on every member, and a follower
that took the old stamps for its own clock's by the old skew is still right. Clocks that
agree within the slack stamp their own time, as before.
"""

from __future__ import annotations

import threading
import time

#: The largest rate at which the clock follows the system's real-time clock (0.1 %).
MAX_SLEW = 0.001


class SteadyWallClock:
    """Milliseconds since the epoch, immune to steps of the real-time clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mono_ns = time.monotonic_ns()
        #: real-time minus monotonic, as this clock has it
        self._offset_ns = time.time_ns() - self._mono_ns

    def now_ns(self) -> int:
        with self._lock:
            mono = time.monotonic_ns()
            step = int((mono - self._mono_ns) * MAX_SLEW)
            diff = time.time_ns() - mono - self._offset_ns
            self._offset_ns += max(-step, min(step, diff))
            self._mono_ns = mono
            return mono + self._offset_ns

    def now_ms(self) -> int:
        return self.now_ns() // 1_000_000


_CLOCK = SteadyWallClock()

#: Differences between a node's clock and the log's up to this are not taken off its stamps:
#: a measured difference includes up to a duty round and a replication of lateness, which
#: would otherwise set the log's time back a little at every change of leader.
LAG_SLACK_MS = 1000
_stamp_lag_ms = 0


def wall_ms() -> int:
    """This process's steady wall clock in milliseconds (see the module's docstring)."""
    return _CLOCK.now_ms()


def lag_beyond_slack(skew_ms: int) -> int:
    """The stamp lag for a measured ``skew_ms`` (this clock minus the log's, measured late:
    too high by up to a duty round): 0 within :data:`LAG_SLACK_MS`; ahead beyond it, the
    skew less the slack (the log's time may go forward by up to the slack at a change of
    leader, never back); behind beyond it, the whole skew (the log goes back by no more
    than the measurement's lateness)."""
    if abs(skew_ms) <= LAG_SLACK_MS:
        return 0
    return skew_ms - LAG_SLACK_MS if skew_ms > 0 else skew_ms


def set_stamp_lag(lag_ms: int) -> None:
    """How far this process's stamps are set back from :func:`wall_ms` (negative: ahead)."""
    global _stamp_lag_ms
    _stamp_lag_ms = lag_ms


def stamp_lag_ms() -> int:
    return _stamp_lag_ms


def stamp_ms() -> int:
    """The time this process stamps into the log: :func:`wall_ms` less the stamp lag (the
    module's docstring)."""
    return _CLOCK.now_ms() - _stamp_lag_ms
