"""What both replicator partition tests do to a worker, and the heal after it
(tests/faults/net/test_replicator_partitions.py, test_replicator_rocketmq_partition.py):
cut it off metaledger, isolate it with sends in flight, hold the fault past the lease, heal
and wait until replication goes on and the cut worker's sockets hold nothing more."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from tests.faults.net.netns import Net
from tests.harness import wait_until

#: each cut lasts this long: past the lease's TTL
FAULT_S = 8.0
#: after a heal, the cut-off worker's sockets hold nothing for the broker within this
QUIET_S = 15.0
#: a full isolation cuts the broker first and the rest this much later: the worker has
#: sends in flight (in its socket, unanswered) when it loses everything
ISOLATE_AFTER_S = 0.5

_hold = threading.Event()  # never set: a cut lasts its time while the writes go on


def off_metaledger(net: Net, meta: Sequence[int]) -> Callable[[int], None]:
    """Cut member ``i`` off the metaledger members ``meta`` (it still reaches the rest)."""

    def cut(i: int) -> None:
        for m in meta:
            net.cut(i, m)

    return cut


def isolated(net: Net, broker: int) -> Callable[[int], None]:
    """Cut member ``i`` off ``broker`` first (its sends in flight stay in its socket), off
    everyone :data:`ISOLATE_AFTER_S` later."""

    def cut(i: int) -> None:
        net.cut(i, broker)
        _hold.wait(ISOLATE_AFTER_S)
        net.isolate(i)

    return cut


def heal_at(
    net: Net,
    started: float,
    worker: int,
    broker_addr: str,
    what: str,
    goes_on: Callable[[str], None],
) -> tuple[float, float]:
    """Hold the fault until :data:`FAULT_S` after ``started`` (``time.time()``), heal, wait
    until replication goes on (``goes_on``) and member ``worker``'s sockets hold no byte for
    ``broker_addr`` (what they held would land whenever TCP retransmits it, in another
    worker's term). When it healed (``time.time()``), and the seconds from then until
    replication went on."""
    _hold.wait(max(0.0, started + FAULT_S - time.time()))
    net.heal()
    healed = time.time()
    goes_on(f"replicating after {what}")
    again = time.time() - healed
    wait_until(
        lambda: net.unsent(worker, broker_addr) == 0,
        QUIET_S,
        f"the sockets of the worker {what} still hold bytes for {broker_addr}",
    )
    return healed, again
