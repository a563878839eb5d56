"""A member started with its wall clock an hour off (libfaketime from its first instruction)
in a 3-node cluster: leases expire at their TTL, a lock never has two holders, as a
follower and as the leader, and across the leadership moving to it and away from it.

Node n0 starts under libfaketime ``+3600`` (its real-time clock only; the monotonic clock
is left alone, as on a machine whose clock was set wrong) or ``-3600`` with the monotonic
clock offset too (libfaketime's default: ``CLOCK_MONOTONIC`` then reads the faked
real-time clock, about 1.8e9 s). What the nodes read is :func:`raftlog.clock.wall_ms`:
the real-time clock once at start, then advanced by the monotonic clock.

Two rounds, each with one lease granted and kept alive through every member, one granted
through every member and left to expire, a lock held through n0 and a second client trying
for it through another member all along:

1. n0 follows; halfway the leadership moves to n0;
2. n0 leads; halfway the leadership moves away from it.

What must hold, on the test's own clock (the leader's rate): every lease left alone is gone
no earlier than its TTL after its grant was asked for and no later than
:data:`LATE_S` after that; every lease kept alive lives; the second client never gets the
lock; one leader per term; every member serves writes after.

n0 starts after n1 and n2 have elected a leader and written a key: a member started with
a bad clock joins a running cluster. A new cluster whose first leader is the skewed member
and hands over at once is ``tests/faults/test_clock_first_leader.py`` (a successor that had
not measured its stamps used to stamp on its own clock, an hour from the log's; now it takes
the log's time on takeover: :class:`raftlog.clock.LogClock`).

Before the leader kept the log's time from going back, a leader whose clock was behind
its predecessor's stamped entries an hour before theirs: the leases its predecessor had
refreshed could not expire for an hour (apply refuses an expiry stamped before a lease's
deadline), and a leader that took over from n0 at +1 h had the same problem the other way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nameserver.client import Client, DeadlineExceeded
from nameserver.client.locks import acquire
from tests.faults.test_clocks import LIBFAKETIME, SLEW_ALLOWANCE_S, Leaders, cluster_with_env
from tests.harness import Cluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.slow]

TTL_S = 4
#: how long after its TTL a lease left alone may still be there: the new leader's grace of
#: one election timeout, a checkpoint interval and a duty round, and the test's polling
LATE_S = 4.0
SKEWED = 0


def others_take_a_put(c: Cluster) -> None:
    """A leader among the members started so far, and a key written (a stamped entry)."""
    others = [c.endpoints[i] for i in range(c.n) if i != SKEWED]

    def written() -> bool:
        try:
            with Client(others, timeout_s=5) as client:
                client.put("skew/before", "v")
            return True
        except Exception:
            return False

    wait_until(written, 60, "a leader among the others takes a put")


def move_leader(c: Cluster, to: int) -> None:
    """Move the leadership to member ``to``."""
    with Client(c.endpoints, timeout_s=30) as client:
        target = next(m for m in client.members() if c.peer_url(to) in m.peer_urls)
        client.move_leader(target.member_id)
    wait_until(lambda: c.wait_ready(30) == to, 30, f"n{to} leads")


def leases_and_a_lock(c: Cluster, halfway: Callable[[], None]) -> None:
    """One round (module docstring); ``halfway`` runs once the leases are granted."""
    other = 1
    clients = [Client([ep], timeout_s=10) for ep in c.endpoints]
    try:
        via_skewed, via_other = clients[SKEWED], clients[other]
        lost: list[str] = []
        kept = [cl.lease_grant(TTL_S) for cl in clients]
        with contextlib.ExitStack() as keepers:
            for cl, lease in zip(clients, kept, strict=True):
                keepers.enter_context(cl.keep_alive(lease.id, on_lost=lost.append))
            with via_skewed.lock("skew/lock", ttl_s=TTL_S, on_lost=lost.append) as held:
                waiter = via_other.lease_grant(60)
                unkept = []
                for cl in clients:
                    asked_at = time.monotonic()  # the leader stamps the grant after this
                    unkept.append((cl.lease_grant(TTL_S).id, asked_at))
                halfway()
                gone: dict[int, float] = {}
                deadline = max(at for _, at in unkept) + TTL_S + LATE_S + 1.0
                while len(gone) < len(unkept) and time.monotonic() < deadline:
                    # the second client never gets the lock while the first holds it
                    with pytest.raises(DeadlineExceeded):
                        acquire(via_other, "skew/lock", waiter.id, timeout_s=0.3)
                    for lease_id, _ in unkept:
                        if (
                            lease_id not in gone
                            and via_other.lease_time_to_live(lease_id).ttl_s < 0
                        ):
                            gone[lease_id] = time.monotonic()
                lived = {
                    f"{i:x}": round(gone[i] - at, 2) if i in gone else None for i, at in unkept
                }
                assert all(
                    v is not None and TTL_S - SLEW_ALLOWANCE_S <= v <= TTL_S + LATE_S
                    for v in lived.values()
                ), f"{TTL_S} s leases left alone lived {lived}"
                assert not lost, lost
                for lease_id in [*(lease.id for lease in kept), held.lease_id]:
                    assert via_other.lease_time_to_live(lease_id).ttl_s >= 0, f"{lease_id:x}"
                # the lock's holder is the oldest key under its name (keys name lease ids,
                # which sort by the member that granted them, not by age)
                owners = sorted(
                    via_other.get("skew/lock/", prefix=True).kvs, key=lambda kv: kv.create_revision
                )
                assert [kv.key for kv in owners[:1]] == [held.key], owners
            via_other.lease_revoke(waiter.id)
    finally:
        for cl in clients:
            cl.close()


@pytest.mark.parametrize(
    "faketime",
    [
        {"FAKETIME": "+3600", "FAKETIME_DONT_FAKE_MONOTONIC": "1"},
        {"FAKETIME": "-3600", "FAKETIME_DONT_FAKE_MONOTONIC": "0"},
    ],
    ids=["ahead-1h", "behind-1h-monotonic-too"],
)
def test_a_member_started_an_hour_off_keeps_leases_and_locks(
    tmp_path: Path, faketime: dict[str, str]
) -> None:
    def env(i: int) -> dict[str, str]:
        return {"LD_PRELOAD": str(LIBFAKETIME), **faketime} if i == SKEWED else {}

    with (
        cluster_with_env(tmp_path / "cluster", env, SKEWED, others_take_a_put) as c,
        Leaders(c) as leaders,
    ):
        if c.wait_ready(30) == SKEWED:
            move_leader(c, 1)
        leases_and_a_lock(c, lambda: move_leader(c, SKEWED))
        leases_and_a_lock(c, lambda: move_leader(c, 1))
        for i in range(c.n):
            with Client([c.endpoints[i]], timeout_s=10) as client:
                client.put(f"skew/after/{i}", "v")
                assert client.get(f"skew/after/{i}").kvs[0].value == b"v"
        c.wait_converged()
    two = {term: ids for term, ids in leaders.by_term.items() if len(ids) > 1}
    assert not two, f"two leaders in one term: {two}"
