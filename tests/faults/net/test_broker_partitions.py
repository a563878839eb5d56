"""Network partitions against a quorum-write broker group, each replica and the metaledger
node in a network namespace of its own (tests/faults/net/broker_run.py): the master
isolated, one replica split off, a bridge, one-way drops, packet loss and delay, each held
6 s and healed 6 s (``TEST_FAULT_S``, ``TEST_HEALED_S`` of tests/faults/net/run.py), with a
producer on the bridge that reaches every replica throughout.

What must hold: every acknowledged message is stored at the queue offset its answer gave,
nothing appears that was not sent or with another body, queues have no gaps and keep send
order, and every acknowledgement came from the master metaledger named for the epoch that
wrote it (tests/faults/net/broker_checker.py); after every heal a send is acknowledged
within 5 s and the in-sync set is whole again within 10 s; no stretch longer than 5 s goes
without an acknowledged send. The campaign: ``python -m tests.faults.net.run --workload
broker``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.net.broker_nemesis import FAULTS
from tests.faults.net.broker_run import run_broker_once
from tests.faults.net.netns import unavailable_reason
from tests.faults.net.run import TEST_FAULT_S, TEST_HEALED_S

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.timeout(600),
]


def test_every_nemesis_keeps_the_total_queue_and_one_master_per_epoch(tmp_path: Path) -> None:
    result = run_broker_once(
        tmp_path, seed=7, faults=sorted(FAULTS), fault_s=TEST_FAULT_S, healed_s=TEST_HEALED_S
    )
    assert result.acked > 500, result.summary()
    assert len(result.masters) >= 2, f"no failover happened: {result.summary()}"
    assert not result.problems(), result.summary()
