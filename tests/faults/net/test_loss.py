"""20 % packet loss between the members of a 3-node cluster (each in a network namespace
of its own, tests/faults/net/), held 18 s, with a client on every node throughout.

What must hold: no key's history is non-linearizable, and no stretch longer than 2.5 s
goes without an acknowledged write. A peer connection's retransmission timeout used to
double under the loss (1-4 s, ``ss -ti``), and every Raft message written after a lost
segment waited behind it: the cluster went 2.0-4.9 s without an acknowledged write, with
an election now and then. Peer sockets now send a lost segment again within a second
(raftlog.native.transport.set_peer_socket_options): 0.4-1.3 s on the same seeds. The loss
is random, so a run of the old code passes now and then (seed 7, 10 s held: twice in
four); the socket options themselves are checked in
tests/unit/raftlog/native/test_peer_deadlines.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.net.netns import unavailable_reason
from tests.faults.net.run import run_once

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.timeout(300),
]


def test_packet_loss_between_members_never_stops_writes_for_long(tmp_path: Path) -> None:
    # seed 7: the side-by-side campaign's 4.89 s without an acknowledged write
    result = run_once(tmp_path, seed=7, faults=["loss"], fault_s=18.0, healed_s=3.0, gap_s=2.5)
    assert result.ops > 300, result.summary()
    assert not result.problems(), result.summary()
    assert result.longest_gap_s < 2.5, result.summary()
