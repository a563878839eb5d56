"""raftlog.clock.LogClock: stamps never go below the last one applied, and a node that
takes over from a leader whose clock was an hour ahead measures the offset there and then.

A new cluster's first leader an hour ahead that lost its leadership before the others
measured its stamps in a duty round left a successor that stamped an hour back from the
log's time (docs/reliability.md, "Clocks that step or run fast or slow").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from protos import records_pb2
from raftlog import Entry
from raftlog.clock import LAG_SLACK_MS, LOG_CLOCK, LogClock, lag_beyond_slack, wall_ms
from raftlog.consensus import ProposeCallback
from raftlog.entry import decode_item
from raftlog.health import Health
from raftlog.log.contracts import Applied
from raftlog.log.group_commit import GroupCommit
from raftlog.wait import Wait

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


def test_takeover_bumps_the_epoch_and_a_stamp_below_the_floor_too() -> None:
    now = [T]
    lc = clock_at(now)
    lc.take_over(T + HOUR_MS)
    assert lc.epoch == 1
    lc.applied(T + 2 * HOUR_MS)
    lc.stamp()
    assert lc.epoch == 2
    lc.stamp()  # nothing new measured
    assert lc.epoch == 2


@pytest.fixture
def process_clock() -> Iterator[LogClock]:
    """The process's log clock, given back as it was."""
    saved = (LOG_CLOCK.lag_ms, LOG_CLOCK.floor_ms, LOG_CLOCK.measured, LOG_CLOCK.epoch)
    try:
        yield LOG_CLOCK
    finally:
        LOG_CLOCK.lag_ms, LOG_CLOCK.floor_ms, LOG_CLOCK._measured, LOG_CLOCK.epoch = saved


def test_requests_stamped_before_a_takeover_go_out_with_the_leader_s_stamp(
    process_clock: LogClock,
) -> None:
    """Requests this node stamped before it took over (its clock an hour behind the log's)
    and that leave after: their item carries its stamp, taken on the log's time."""
    proposed: list[tuple[bytes, ProposeCallback]] = []
    wait = Wait()
    commit = GroupCommit(
        lambda data, cb: proposed.append((data, cb)),
        wait,
        Health(),
        "c",
        max_item_requests=512,
        max_item_bytes=1 << 20,
        batch_window_s=0.0,
        max_in_flight=1,
        busy_item_requests=10,
        window_per_request_s=0.0,
    )

    async def main() -> None:
        first = asyncio.ensure_future(commit.propose([Entry("set", b"a")], 5.0))
        await asyncio.sleep(0)
        later = [
            asyncio.ensure_future(commit.propose([Entry("set", b"k%d" % i)], 5.0)) for i in range(2)
        ]
        await asyncio.sleep(0)
        before = wall_ms()
        process_clock.take_over(before + HOUR_MS)  # became leader after an hour-ahead one
        wait.trigger_many([(("c", 1), Applied(1, None))])
        proposed[0][1](1, None)
        await first
        await asyncio.sleep(0)
        [stamps_first, stamps_later] = [
            [r[0].timestamp_ms for r in decode_item(data, 1, 1)] for data, _ in proposed
        ]
        assert all(abs(s - before) < 60_000 for s in stamps_first)  # left before: as stamped
        assert all(before + HOUR_MS - 60_000 < s < before + HOUR_MS + 60_000 for s in stamps_later)
        wait.trigger_many([(("c", s), Applied(s, None)) for s in (2, 3)])
        proposed[1][1](2, None)
        for f in later:
            await f
        await asyncio.sleep(0)
        # the next item, stamped after the takeover, is as its requests were stamped
        nxt = asyncio.ensure_future(commit.propose([Entry("set", b"n")], 5.0))
        await asyncio.sleep(0)
        assert len(proposed) == 3
        [stamp_next] = [r[0].timestamp_ms for r in decode_item(proposed[-1][0], 4, 1)]
        assert before + HOUR_MS - 60_000 < stamp_next
        assert records_pb2.RaftItem.FromString(proposed[-1][0][4:]).timestamp_ms == 0
        wait.trigger_many([(("c", 4), Applied(4, None))])
        proposed[-1][1](4, None)
        await nxt

    asyncio.run(main())
