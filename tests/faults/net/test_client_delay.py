"""Delay between the clients and every member (tests/faults/net/nemesis.py
``client-delay``: :meth:`tests.faults.net.netns.Net.delay` with ``CLIENTS`` holds what a
client sends in the member's namespace and what the member answers in the bridge's),
50-150 ms each way from the seed, on a 3-node cluster with a client on every node: held 6 s, healed
6 s (``TEST_FAULT_S``, ``TEST_HEALED_S`` of tests/faults/net/run.py).

What must hold: no key's history is non-linearizable (tests/faults/net/checker.py: a
write whose answer came late or not at all may land at any time after it was sent), every
node acknowledges writes again within 5 s of the heal, no stretch longer than 5 s goes
without an acknowledged write, and the delay was there: the operations that completed
while it held took at least a round trip of it.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path

import pytest

from tests.faults.net import checker
from tests.faults.net.netns import unavailable_reason
from tests.faults.net.run import TEST_FAULT_S, TEST_HEALED_S, run_once

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.timeout(300),
]

#: the nemesis's shortest delay less its jitter, each way
SHORTEST_ONE_WAY_S = (50 - 50 // 4) / 1000


def test_delay_between_clients_and_members_keeps_keys_linearizable_and_writes_acknowledged(
    tmp_path: Path,
) -> None:
    result = run_once(
        tmp_path, seed=7, faults=["client-delay"], fault_s=TEST_FAULT_S, healed_s=TEST_HEALED_S
    )
    assert result.ops > 200, result.summary()
    assert not result.problems(), result.summary()
    (phase,) = result.phases
    ops = []
    for path in sorted(tmp_path.glob("history-*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                ops.append(checker.Op(*json.loads(line)))
    held = [
        o.end - o.start
        for o in ops
        if o.status == "ok" and o.start >= phase.start + 0.5 and o.end <= phase.heal
    ]
    assert len(held) > 20, (len(held), result.summary())
    assert statistics.median(held) >= 2 * SHORTEST_ONE_WAY_S, (
        statistics.median(held),
        result.summary(),
    )
