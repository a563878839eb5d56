"""raftlog.clock.LogClock: stamps never go below the last one applied, and a node that
takes over from a leader whose clock was an hour ahead measures the offset there and then.

A new cluster's first leader an hour ahead that lost its leadership before the others
measured its stamps in a duty round left a successor that stamped an hour back from the
log's time (docs/reliability.md, "Clocks that step or run fast or slow").
"""

from __future__ import annotations

from raftlog.clock import LAG_SLACK_MS, LogClock, lag_beyond_slack

HOUR_MS = 3_600_000
T = 1_800_000_000_000


def clock_at(now: list[int]) -> LogClock:
    return LogClock(lambda: now[0])


def test_a_new_leader_takes_the_log_s_time_from_its_predecessor_s_newest_stamp() -> None:
    now = [T]
    lc = clock_at(now)
    lc.take_over(T + HOUR_MS - 300)  # stamped 300 ms ago by a leader an hour ahead
    assert lc.measured == (T + HOUR_MS - 300, -HOUR_MS + 300)
    assert lc.lag_ms == -HOUR_MS + 300
    assert lc.stamp() == T + HOUR_MS - 300  # continues from it (late by the election)
    now[0] += 1000
    assert lc.stamp() == T + HOUR_MS + 700  # and runs at this clock's rate


def test_a_stamp_already_measured_is_not_measured_again_on_takeover() -> None:
    now = [T]
    lc = clock_at(now)
    stamp = T + HOUR_MS - 50
    lc.observe(stamp, now[0])  # a duty round saw it applied, 50 ms after it was made
    now[0] += 5000  # the takeover comes later: measuring again would be 5 s late
    lc.take_over(stamp)
    assert lc.measured == (stamp, -HOUR_MS + 50)
    assert lc.lag_ms == -HOUR_MS + 50


def test_a_predecessor_an_hour_behind_is_measured_on_takeover_too() -> None:
    now = [T]
    lc = clock_at(now)
    lc.take_over(T - HOUR_MS - 200)
    assert lc.lag_ms == lag_beyond_slack(HOUR_MS + 200)
    # the log goes forward by at most the slack and the election, never an hour
    assert T - HOUR_MS - 200 <= lc.stamp() <= T - HOUR_MS + LAG_SLACK_MS


def test_stamps_never_go_below_the_last_applied() -> None:
    now = [T]
    lc = clock_at(now)
    lc.applied(T + 400)  # a predecessor 400 ms ahead (within the slack): no new lag
    assert lc.stamp() == T + 400
    assert lc.lag_ms == 0
    now[0] += 600
    assert lc.stamp() == T + 600  # its own clock once past it
    lc.applied(0)  # an entry without a stamp changes nothing
    assert lc.floor_ms == T + 400


def test_a_stamp_an_hour_below_the_log_measures_the_lag_there_and_then() -> None:
    """No takeover call (an engine without ``on_lead``): the first stamp does it."""
    now = [T]
    lc = clock_at(now)
    lc.applied(T + HOUR_MS - 100)
    assert lc.stamp() == T + HOUR_MS - 100
    assert lc.lag_ms == -HOUR_MS + 100
    assert lc.measured == (T + HOUR_MS - 100, -HOUR_MS + 100)
    now[0] += 250
    assert lc.stamp() == T + HOUR_MS + 150


def test_the_floor_is_the_last_stamp_applied_not_the_highest() -> None:
    """An older log may hold a stamp an hour ahead long ago (before stamps were kept
    monotonic): a replay must not hold every later stamp up to it."""
    now = [T]
    lc = clock_at(now)
    lc.applied(T + HOUR_MS)
    lc.applied(T - 10)
    assert lc.stamp() == T
    assert lc.lag_ms == 0
