"""Failover without loss (issue 17): a master killed with SIGKILL under a continuous producer.

Three real replicas (SYNC_MASTER, totalReplicas 3, inSyncReplicas 2) on a real metaledger
node; the scenario and what it asserts are in ``failover_support`` (a new master from the
in-sync set within seconds, nothing acknowledged lost, duplicates counted, consumer offsets
never lower, the old master back as a slave with its tail cut and byte-identical logs). The
``cluster`` test kills once; the ``slow`` one loops with a different kill point each time.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from tests.cluster.broker.failover_support import Result, run_failover
from tests.harness import running_cluster


def failover(root: Path, endpoints: list[str], group: str, kill_after: int, seed: int) -> Result:
    coro = run_failover(root, endpoints, group, kill_after, random.Random(seed))
    result = asyncio.run(asyncio.wait_for(coro, 180))
    print(result.line())
    return result


@pytest.mark.cluster
def test_failover_without_loss(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    kill_after = random.Random(seed).randrange(60, 400)
    print(f"seed {seed}")
    with running_cluster(tmp_path / "ml", n=1) as node:
        r = failover(tmp_path, node.endpoints, "fo-group", kill_after, seed)
    assert r.acked > kill_after and r.failover_s < 20


@pytest.mark.slow
def test_failover_loop_with_a_different_kill_point_each_time(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    points = sorted(rng.sample(range(20, 800), 4))
    print(f"seed {seed}, kill points {points}")
    results = []
    with running_cluster(tmp_path / "ml", n=1) as node:
        for i, kill_after in enumerate(points):
            root = tmp_path / f"run{i}"
            root.mkdir()
            results.append(failover(root, node.endpoints, f"fo-loop-{i}", kill_after, seed + i))
    times = sorted(r.failover_s for r in results)
    print(
        f"failover p50 {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s; "
        f"duplicates {[r.duplicates for r in results]}"
    )
    assert len({r.kill_after for r in results}) == len(points)
