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
from typing import Any

import pytest

from nameserver.leases.expiry import LeaseKeeper
from raftlog.clock import LAG_SLACK_MS, lag_beyond_slack
from tests.unit.nameserver.leases.test_leader_clock import TTL_MS, FakeLog, FakeState, one_lease
from tests.unit.nameserver.leases.test_leases import T0, refresh

HOUR_MS = 3_600_000
G = T0 + 2 * HOUR_MS  # the old leader's time (an hour either way stays positive)


def lagged_keeper(d: Any, log: FakeLog, now: list[int], lag: list[int]) -> LeaseKeeper:
    state: Any = FakeState(d.image)
    rlog: Any = log
    return LeaseKeeper(
        rlog,
        state,
        2000,
        1.0,
        clock_ms=lambda: now[0],
        stamp_lag=(lambda: lag[0], lambda v: lag.__setitem__(0, v)),
    )


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
    k.state.image = d.image
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
