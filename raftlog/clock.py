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

**Stamps never go back in the log, and a new leader measures on takeover**
(:class:`LogClock`). A node also keeps the last stamp it applied (:func:`note_applied_stamp`)
as a floor: what it stamps is never below it, and when its own stamp would be below it by
more than the slack, it measures its lag from that stamp there and then (the log's time is
ahead of this clock: it continues from the stamp). A node that becomes leader measures from
the newest stamp in its log (:func:`take_over`, from the native engine's ``on_lead``), unless
a duty round measured that stamp already. So a first leader an hour ahead that loses its
leadership before the others measured its stamps in a duty round no longer leaves a
successor that stamps an hour back from the log's time (a lease granted then expired at
once, and its predecessor's leases lived an hour).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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


class LogClock:
    """The log's time as this node stamps it (sans-I/O: the wall clock is given).

    ``lag_ms``: how far this node's stamps are set back from its wall clock; ``floor_ms``:
    the last stamp applied here (or the newest in its log when it took over), below which
    it never stamps; :attr:`measured`: the last stamp a lag was measured from, and the skew
    measured (this clock then minus that stamp). Thread-safe (apply may run on a thread).
    """

    def __init__(self, wall: Callable[[], int]) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        self.lag_ms = 0
        self.floor_ms = 0
        self._measured = (0, 0)
        #: how many times a takeover or a stamp below the floor measured the log's time:
        #: a stamp taken before it changed may be an hour from the log's
        self.epoch = 0

    def wall_ms(self) -> int:
        return self._wall()

    @property
    def measured(self) -> tuple[int, int]:
        """``(stamp, skew)``: the last stamp a lag was measured from ((0, 0): none)."""
        return self._measured

    def set_lag(self, lag_ms: int) -> None:
        self.lag_ms = lag_ms

    def observe(self, stamp_ms: int, now_ms: int) -> int:
        """A stamp first seen at ``now_ms`` (this clock): the skew, and the lag from it."""
        skew = now_ms - stamp_ms
        with self._lock:
            self.lag_ms = lag_beyond_slack(skew)
            self._measured = (stamp_ms, skew)
        return skew

    def applied(self, stamp_ms: int) -> None:
        """The last stamp applied here (0: none, ignored) is the floor from now on: the
        last, not the highest, so a log written before stamps were kept monotonic (an
        hour-ahead stamp long ago) does not hold the floor up."""
        if stamp_ms > 0:
            self.floor_ms = stamp_ms

    def take_over(self, newest_ms: int) -> None:
        """This node became leader; ``newest_ms`` is the newest stamp in its log (its
        predecessor's; 0: none). Unless a lag was measured from that very stamp (a duty
        round saw it applied), measure it now: this clock minus the stamp, late by the time
        since the predecessor made it (the election), so the predecessor's deadlines come
        out late here, never early. The floor rises to it."""
        if newest_ms <= 0:
            return
        if newest_ms != self._measured[0]:
            self.observe(newest_ms, self._wall())
        with self._lock:
            self.floor_ms = max(self.floor_ms, newest_ms)
            self.epoch += 1

    def stamp(self) -> int:
        """The time to stamp now: this clock less the lag, never below the floor. Below it
        by more than :data:`LAG_SLACK_MS`, the log's time is ahead of this node's (a
        predecessor an hour ahead that nobody measured here): the lag is measured from the
        floor there and then, and the log continues from it."""
        now = self._wall()
        with self._lock:
            own = now - self.lag_ms
            floor = self.floor_ms
            if own >= floor:
                return own
            if floor - own > LAG_SLACK_MS:
                self.lag_ms = now - floor
                self._measured = (floor, now - floor)
                self.epoch += 1
            return floor


#: the process's log clock (on :func:`wall_ms`): what the node stamps and its duties read
LOG_CLOCK = LogClock(wall_ms)


def set_stamp_lag(lag_ms: int) -> None:
    """How far this process's stamps are set back from :func:`wall_ms` (negative: ahead)."""
    LOG_CLOCK.set_lag(lag_ms)


def stamp_lag_ms() -> int:
    return LOG_CLOCK.lag_ms


def note_applied_stamp(stamp_ms: int) -> None:
    """The last stamp this process applied: it never stamps below it (:class:`LogClock`)."""
    LOG_CLOCK.applied(stamp_ms)


def take_over(newest_ms: int) -> None:
    """This process became leader; ``newest_ms``: the newest stamp in its log
    (:meth:`LogClock.take_over`)."""
    LOG_CLOCK.take_over(newest_ms)


def stamp_ms() -> int:
    """The time this process stamps into the log: :func:`wall_ms` less the stamp lag, never
    below the last stamp applied (the module's docstring)."""
    return LOG_CLOCK.stamp()
