"""The partition nemesis against etcd 3.4 (``/usr/bin/etcd``) in place of metaledger's
nodes: the same namespaces, the same seed and faults as tests/faults/net/test_partitions.py
(the leader isolated, then a minority split off, 4 s each and 4 s healed), the same
clients and the same checker (``--target etcd`` of ``python -m tests.faults.net.run``).

A cross-check of the harness on a known-good system: etcd 3.4 stayed strictly serializable
under partitions (Jepsen 2020), so a key the checker calls non-linearizable here would be
the checker's or the nemesis's fault, not the system's; and the faults must reach etcd (its
leader changes), and it serves writes again after the heal. etcd's availability is
reported, not held to metaledger's 5 s (without pre-vote, a returning member can cost it
its leader for seconds: in the recorded runs every member served again 2.2-5.2 s after
healing a split or an isolated leader, so a member may not within this test's 4 s).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest

from tests.etcd_harness import ETCD
from tests.faults.net.checker import Op
from tests.faults.net.etcd_run import EtcdNetCluster, fault_rows, judged
from tests.faults.net.netns import unavailable_reason
from tests.faults.net.run import run_once

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.skipif(shutil.which(ETCD) is None, reason=f"{ETCD} is not installed"),
    pytest.mark.timeout(300),
]


def test_etcd_under_the_same_nemesis_passes_the_same_checker(tmp_path: Path) -> None:
    faults = ["isolate-leader", "split"]
    result = run_once(
        tmp_path,
        seed=7,
        faults=faults,
        warmup_s=2.0,
        fault_s=4.0,
        healed_s=4.0,
        cluster_type=EtcdNetCluster,
    )
    rows = fault_rows("etcd", result)
    assert [r["fault"] for r in rows] == faults, rows
    assert result.ops > 300, result.summary()
    assert not judged("etcd", result), result.summary()
    # the cut reached etcd: the old leader, isolated, acknowledged no write from 1.5 s in
    # (the rules go in one by one) to the heal, and had acknowledged writes before it (the
    # other two elect a leader in its place, in 1-2 s on a quiet machine: not asserted,
    # at a load average of 10 on 2 cores it once took more than the 4 s held)
    ops = []
    for i in range(3):
        for line in (tmp_path / f"history-{i}.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line cut short when the client stopped
                ops.append(Op(*json.loads(line)))
    cut = result.phases[0]
    isolated = int(cut.description.rsplit("n", 1)[1])
    mine = [o for o in ops if o.proc == isolated and o.kind == "w" and o.status == "ok"]
    assert [o for o in mine if o.end < cut.start], (cut, result.summary())
    assert not [o for o in mine if cut.start + 1.5 <= o.end <= cut.heal], cut
    healed = result.phases[-1].heal
    assert any(o.kind == "w" and o.status == "ok" and o.start >= healed for o in ops), (
        result.summary()
    )
