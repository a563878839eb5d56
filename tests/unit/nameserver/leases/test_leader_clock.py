"""Time enters the lease log from the leader only (nameserver/leases/expiry.py).

A follower whose clock lags stamped the keepalive checkpoints it proposed with that clock:
the leader counted the leases refreshed earlier than they were and expired them early (the
clock fault test, a follower at half speed). Now a checkpoint carries no time of its own,
apply counts it at the entry's timestamp (the leader stamps what a follower forwards), and
each node counts the log's times on its own clock through the skew it measured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from nameserver.leases.expiry import LeaseKeeper
from nameserver.state.image import MetadataImage
from protos import records_pb2
from raftlog import Entry
from tests.unit.nameserver.leases.test_leases import T0, Driver, grant, refresh

TTL_MS = 5000


class FakeLog:
    """What a keeper asks of the replicated log: its role, the last stamp applied, and
    proposals (recorded)."""

    def __init__(self, role: str = "follower", term: int = 1) -> None:
        self.status = SimpleNamespace(role=role, term=term)
        self.last_stamp_ms = 0
        self.proposed: list[Sequence[Entry]] = []

    def engine_status(self) -> Any:
        return self.status

    async def propose(self, entries: Sequence[Entry], timeout_s: float) -> Any:
        self.proposed.append(entries)
        return SimpleNamespace(result=[])


class FakeState:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image


def keeper_on(image: MetadataImage, log: FakeLog, now: list[int]) -> LeaseKeeper:
    state: Any = FakeState(image)
    rlog: Any = log
    return LeaseKeeper(rlog, state, 2000, 1.0, clock_ms=lambda: now[0])


def one_lease(at: int = T0) -> Driver:
    d = Driver()
    d.apply(grant(1, TTL_MS // 1000, at=at))
    return d


def test_a_follower_s_checkpoint_carries_no_time_of_its_own() -> None:
    """The rule: whatever a follower's clock says, its proposal carries no deadline."""
    d = one_lease()
    log = FakeLog("follower")
    now = [T0 - 60_000]  # this follower's clock is a minute behind the leader's
    k = keeper_on(d.image, log, now)
    lease = d.image.leases.get(1)
    assert lease is not None
    k.observe_stamp(T0)  # the grant, stamped by the leader, applied here
    assert k.keep_alive(lease) == 5
    asyncio.run(k.checkpoint())
    [[entry]] = log.proposed
    op = records_pb2.LeaseOperation.FromString(entry.value)
    assert [cp.id for cp in op.refresh.checkpoints] == [1]
    assert all(cp.refreshed_ms == 0 for cp in op.refresh.checkpoints)


def test_a_checkpoint_counts_at_the_leader_s_stamp_and_revives_a_lease_not_yet_expired() -> None:
    d = one_lease()
    # appended (and stamped) by the leader at T0 + 3000
    assert d.apply(refresh(T0 + 3000, (1, 0))) == [1]
    assert d.image.leases.get(1).last_refresh_ms == T0 + 3000  # type: ignore[union-attr]
    # an older stamp (a leader whose clock is behind the previous one) does not go back
    assert d.apply(refresh(T0 + 2000, (1, 0))) == []
    assert d.image.leases.get(1).last_refresh_ms == T0 + 3000  # type: ignore[union-attr]
    # past its deadline but not expired: a holder was told it lives, so it lives on
    assert d.apply(refresh(T0 + 9000, (1, 0))) == [1]
    assert d.image.leases.get(1).last_refresh_ms == T0 + 9000  # type: ignore[union-attr]


def test_an_old_log_s_checkpoint_applies_as_it_did() -> None:
    d = one_lease()
    assert d.apply(refresh(T0 + 3000, (1, T0 + 2000))) == [1]  # the proposer's clock
    assert d.image.leases.get(1).last_refresh_ms == T0 + 2000  # type: ignore[union-attr]
    assert d.apply(refresh(T0 + 9000, (1, T0 + 8000))) == []  # past its deadline: no revival


def test_a_follower_counts_the_leader_s_stamps_on_its_own_clock() -> None:
    """A follower 60 s behind (or ahead) answers keepalives and TTLs as the leader would."""
    for skew in (-60_000, 60_000):
        d = one_lease()
        now = [T0 + skew]
        k = keeper_on(d.image, FakeLog("follower"), now)
        k.lead()  # a duty round: notes the grant's stamp against this clock
        lease = d.image.leases.get(1)
        assert lease is not None
        k.observe_stamp(T0)
        now[0] = T0 + skew + 4000
        assert k.remaining_ttl_s(lease) == 1
        now[0] = T0 + skew + 5000
        assert k.remaining_ttl_s(lease) == 0
        assert k.keep_alive(lease) == 0  # past the deadline as the leader counts it


def test_a_new_leader_counts_its_predecessor_s_stamps_on_its_own_clock() -> None:
    d = one_lease()
    log = FakeLog("follower")
    # this node's clock runs 30 s ahead of the old leader's: it saw the grant's stamp at
    # T0 + 30_000 + 100 (100 ms after it was made)
    now = [T0 + 30_100]
    k = keeper_on(d.image, log, now)
    log.last_stamp_ms = T0
    assert k.lead() is None
    assert k.skew_ms == 30_100
    log.status = SimpleNamespace(role="leader", term=2)
    now[0] = T0 + 32_000
    assert k.lead() == T0 + 32_000
    # the old leader's deadline T0 + 5000 is T0 + 35_100 here (+ a new leader's grace)
    assert k.due_for_expiry(T0 + 35_000 + 2000) == []
    assert k.due_for_expiry(T0 + 35_100 + 2000) == [1]


def test_a_new_leader_never_gives_more_than_a_full_ttl_from_its_start() -> None:
    d = one_lease()
    log = FakeLog("follower")
    now = [T0 + 3_600_000]  # restarted an hour later: the stamp it replayed is old
    k = keeper_on(d.image, log, now)
    log.last_stamp_ms = T0
    k.lead()
    log.status = SimpleNamespace(role="leader", term=2)
    since = k.lead()
    assert since == T0 + 3_600_000
    assert k.due_for_expiry(since + TTL_MS - 1) == []
    assert k.due_for_expiry(since + TTL_MS) == [1]  # a full TTL from its start, no more


def test_a_leader_s_own_stamps_need_no_moving() -> None:
    d = one_lease()
    log = FakeLog("leader")
    now = [T0 - 500]
    k = keeper_on(d.image, log, now)
    assert k.lead() == T0 - 500
    d.apply(refresh(T0 + 1000, (1, 0)))  # stamped by this leader
    k.state.image = d.image
    assert k.due_for_expiry(T0 + 1000 + TTL_MS - 1) == []
    assert k.due_for_expiry(T0 + 1000 + TTL_MS) == [1]


def test_the_remaining_ttl_reported_leaves_out_how_late_a_log_refresh_may_count() -> None:
    """Expiry waits for a checkpoint's lateness (late, never early); the TTL a node reports
    is what is left for sure, and at least 1 while the lease lives."""
    d = one_lease()
    now = [T0]
    k = keeper_on(d.image, FakeLog("leader"), now)
    assert k.lead() == T0
    lease = d.image.leases.get(1)
    assert lease is not None
    now[0] = T0 + 1000
    assert k.remaining_ms(lease) == 4000
    assert k.remaining_ttl_s(lease) == 4  # 4000 - REPORT_SLACK_MS, rounded up
    now[0] = T0 + 4900
    assert k.remaining_ttl_s(lease) == 1  # still alive: never 0
    now[0] = T0 + 5000
    assert k.remaining_ttl_s(lease) == 0
    now[0] = T0 + 1000
    assert k.keep_alive(lease) == 5  # a keepalive received here is exact
    assert k.remaining_ttl_s(lease) == 5
