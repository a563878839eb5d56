"""A new cluster whose first leader's clock is an hour ahead (libfaketime ``+3600``, the
real-time clock only) grants leases and a lock, then hands its leadership over at once:
no lease expires at once, none outlives its TTL by the hour, the lock keeps one holder.

n0 starts first, alone, and the others after it, so that it is the first leader (a start
where another member won the first election is made again, up to three times). Right after
the cluster agrees on n0 as leader, one round of :func:`tests.faults.test_clock_start.
leases_and_a_lock` runs with the leadership moved to n1 halfway: leases granted and kept
alive through every member, leases granted through every member and left alone (the
leader stamps them an hour ahead), a lock held through n0 and a second client trying for
it through n1; the move comes right after the grants.

Before the log clock (:class:`raftlog.clock.LogClock`), a successor that had not measured
n0's stamps in a duty round stamped on its own clock, an hour behind the log's: leases n0
had granted or refreshed could live an hour, and a lease granted in that moment, compared
with stamps an hour ahead, expired at once (CI saw it; docs/reliability.md). Now a new
leader takes the log's time from the newest stamp in its log when it takes over, and never
stamps below the last stamp applied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import Client
from tests.faults.test_clock_start import leases_and_a_lock, move_leader
from tests.faults.test_clocks import LIBFAKETIME, Leaders
from tests.harness import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.slow]

AHEAD = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "+3600", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
ATTEMPTS = 3


@contextlib.contextmanager
def skewed_first_leader(root: Path) -> Iterator[Cluster]:
    """A new 3-node cluster whose first leader is n0, an hour ahead."""
    for attempt in range(ATTEMPTS):
        c = Cluster(root / f"try{attempt}", start=False)
        try:
            c.node_env[0] = AHEAD
            c.start(0)
            c.wait_bound([0])  # n0 counts its election timeouts before the others start
            c.start(1)
            c.start(2)
            if c.wait_ready(30) != 0:
                c.close()
                continue
            yield c
            c.close()
            return
        except BaseException:
            c.close(failed=True)
            raise
    raise AssertionError(f"n0 was not the first leader in {ATTEMPTS} new clusters")


def test_a_first_leader_an_hour_ahead_hands_over_at_once_and_leases_keep_their_ttl(
    tmp_path: Path,
) -> None:
    with skewed_first_leader(tmp_path) as c, Leaders(c) as leaders:
        leases_and_a_lock(c, lambda: move_leader(c, 1))
        for i in range(c.n):
            with Client([c.endpoints[i]], timeout_s=10) as client:
                client.put(f"skew/after/{i}", "v")
                assert client.get(f"skew/after/{i}").kvs[0].value == b"v"
        c.wait_converged()
    two = {term: ids for term, ids in leaders.by_term.items() if len(ids) > 1}
    assert not two, f"two leaders in one term: {two}"
