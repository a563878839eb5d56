"""The log's time continues across leaders whose clocks disagree by an hour
(raftlog.clock's stamp lag, nameserver/state/duties.py).

A node started with its clock an hour ahead measured, once it led, its skew from its own
first stamp (0) and expired at once every lease its predecessor had refreshed; a node an
hour behind stamped an hour before its predecessor and no lease of the predecessor's could
expire for an hour (tests/faults/test_clock_start.py). Now a follower sets its stamps back
by its skew beyond a second's slack, measures only while it follows, and answers from the
freshest stamp.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from nameserver.leases.expiry import LeaseKeeper
from raftlog.clock import LAG_SLACK_MS, LogClock, lag_beyond_slack
from tests.unit.nameserver.leases.test_leader_clock import TTL_MS, FakeLog, FakeState, one_lease
from tests.unit.nameserver.leases.test_leases import T0, Driver, grant, refresh

HOUR_MS = 3_600_000
G = T0 + 2 * HOUR_MS  # the old leader's time (an hour either way stays positive)


class ListLag(LogClock):
    """A log clock on ``now[0]`` whose lag is ``lag[0]`` (what the tests read)."""

    def __init__(self, now: list[int], lag: list[int]) -> None:
        self._lag = lag
        saved = lag[0]
        super().__init__(lambda: now[0])  # sets the lag to 0
        lag[0] = saved

    @property
    def lag_ms(self) -> int:
        return self._lag[0]

    @lag_ms.setter
    def lag_ms(self, value: int) -> None:
        self._lag[0] = value


def lagged_keeper(d: Any, log: FakeLog, now: list[int], lag: list[int]) -> LeaseKeeper:
    state: Any = FakeState(d.image)
    rlog: Any = log
    return LeaseKeeper(rlog, state, 2000, 1.0, clock_ms=lambda: now[0], log_clock=ListLag(now, lag))


def test_lag_beyond_slack() -> None:
    assert lag_beyond_slack(0) == 0
    assert lag_beyond_slack(LAG_SLACK_MS) == 0
    assert lag_beyond_slack(-LAG_SLACK_MS) == 0
    assert lag_beyond_slack(HOUR_MS) == HOUR_MS - LAG_SLACK_MS
    assert lag_beyond_slack(-HOUR_MS) == -HOUR_MS  # the log's time never goes back by more


@pytest.mark.parametrize("skew", [HOUR_MS, -HOUR_MS])
def test_a_leader_an_hour_off_continues_the_log_s_time(skew: int) -> None:
    d = one_lease(G)  # granted at G by the old leader
    log = FakeLog("follower")
    now, lag = [G + skew + 100], [0]
    k = lagged_keeper(d, log, now, lag)
    log.last_stamp_ms = G
    assert k.lead() is None
    assert k.skew_ms == skew + 100
    assert lag[0] == lag_beyond_slack(skew + 100)  # what its stamps are set back by
    log.status = SimpleNamespace(role="leader", term=2)
    now[0] = G + skew + 1000
    since = k.lead()
    assert since == now[0]
    own = now[0] - lag[0]  # its first stamp: near the old leader's clock
    assert abs(own - (G + 1000)) <= LAG_SLACK_MS + 100  # + how late it measured
    log.last_stamp_ms = own
    assert k.lead() == since and k.skew_ms == skew + 100  # its own stamp measures nothing
    # the old leader's deadline, on this clock (+ the grace of a new leader): not early,
    # not an hour late
    deadline = G + skew + 100 + TTL_MS + 2000
    assert k.due_for_expiry(deadline - 1) == []
    assert k.due_for_expiry(deadline) == [1]
    # a refresh it stamped counts at its own clock
    d.apply(refresh(own, (1, 0)))
    cast(Any, k.state).image = d.image
    assert k.due_for_expiry(now[0] + TTL_MS - 1) == []
    assert k.due_for_expiry(now[0] + TTL_MS) == [1]


def test_a_follower_answers_from_the_freshest_stamp() -> None:
    """It just stopped leading, or a new leader's first stamp came between duty rounds."""
    d = one_lease()
    log = FakeLog("follower")
    now, lag = [T0 + HOUR_MS], [0]
    k = lagged_keeper(d, log, now, lag)
    assert k.lead() is None  # nothing applied yet: no measurement
    log.last_stamp_ms = T0  # the grant is applied; no duty round since
    lease = d.image.leases.get(1)
    assert lease is not None
    assert k.keep_alive(lease) == TTL_MS // 1000  # not an hour past its deadline
    assert k.skew_ms == 0 and lag == [0]  # kept and passed on by the duty round only
    assert k.lead() is None
    assert k.skew_ms == HOUR_MS and lag == [lag_beyond_slack(HOUR_MS)]


def first_leader_scenario(take_over: bool) -> tuple[Driver, FakeLog, list[int], LeaseKeeper]:
    """n0, an hour ahead, led a new cluster and granted lease 1 at its clock ``G``, 100 ms
    before n1 (this keeper, on the true time) became leader; n1 had measured nothing (no
    duty round came between). With ``take_over`` the engine hands n1 the newest stamp in
    its log on takeover (``on_lead``); without, n1 learns it from the stamp it applies."""
    d = one_lease(G)
    log = FakeLog("follower")
    now = [G - HOUR_MS + 100]
    k = LeaseKeeper(
        cast(Any, log),
        cast(Any, FakeState(d.image)),
        2000,
        1.0,
        lambda: now[0],
        LogClock(lambda: now[0]),
    )
    assert k.lead() is None and k.skew_ms == 0  # nothing applied here yet
    lc = k._log_clock
    assert lc is not None
    log.status = SimpleNamespace(role="leader", term=2)
    if take_over:
        lc.take_over(G)
    k.lead()
    log.last_stamp_ms = G  # the grant is applied now
    lc.applied(G)
    return d, log, now, k


@pytest.mark.parametrize("take_over", [True, False], ids=["on-takeover", "at-first-stamp"])
def test_a_first_leader_an_hour_ahead_hands_over_before_anyone_measured(take_over: bool) -> None:
    d, log, now, k = first_leader_scenario(take_over)
    lc = k._log_clock
    assert lc is not None
    granted_at = G - HOUR_MS  # on this clock (n0's is an hour ahead)
    own = lc.stamp()  # n1's first stamp continues the log's time, an hour ahead of its clock
    assert G <= own <= G + 100 + LAG_SLACK_MS
    since = k.lead()
    assert since is not None
    # the lease n0 granted: not expired at once, nor an hour late
    assert k.due_for_expiry(granted_at + TTL_MS - 1) == []
    assert k.due_for_expiry(since + TTL_MS + 2000) == [1]
    lease = d.image.leases.get(1)
    assert lease is not None
    assert k.keep_alive(lease) == TTL_MS // 1000  # its holder may keep it alive
    # a lease n1 grants now counts from its grant on n1's clock, neither an hour early
    # nor an hour late
    d.apply(grant(2, TTL_MS // 1000, at=own))
    cast(Any, k.state).image = d.image
    log.last_stamp_ms = own
    lc.applied(own)
    assert k.lead() == since
    assert 2 not in k.due_for_expiry(now[0] + TTL_MS - 1)
    assert 2 in k.due_for_expiry(since + TTL_MS + 2000)
    # its stamps keep going forward with its clock
    now[0] += 3000
    assert lc.stamp() == own + 3000


def test_a_follower_of_the_new_leader_counts_the_log_s_time_continued() -> None:
    """n2 measured n0's stamps (-1 h); n1's stamps continue n0's time, so n2's skew holds
    and the lease n1 refreshes is neither expired at once nor an hour late there."""
    d = one_lease(G)
    log = FakeLog("follower")
    now, lag = [G - HOUR_MS + 50], [0]
    k = lagged_keeper(d, log, now, lag)
    log.last_stamp_ms = G
    assert k.lead() is None and k.skew_ms == -HOUR_MS + 50
    n1 = LogClock(lambda: now[0])  # n1's clock reads the true time, as n2's
    now[0] += 1000
    n1.take_over(G)
    at = n1.stamp()  # n1 refreshes lease 1
    d.apply(refresh(at, (1, 0)))
    cast(Any, k.state).image = d.image
    log.last_stamp_ms = at
    lease = d.image.leases.get(1)
    assert lease is not None
    assert k.keep_alive(lease) == TTL_MS // 1000
    assert 0 < k.remaining_ms(lease) <= TTL_MS + 1000
