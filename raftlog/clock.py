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


def wall_ms() -> int:
    """This process's steady wall clock in milliseconds (see the module's docstring)."""
    return _CLOCK.now_ms()
