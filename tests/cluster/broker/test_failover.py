"""Failover without loss (issue 17): a master killed with SIGKILL under a continuous producer.

Three real replicas (SYNC_MASTER, totalReplicas 3, inSyncReplicas 2) on a real metaledger
node; the scenario and what it asserts are in ``failover_support`` (a new master from the
in-sync set within seconds, nothing acknowledged lost, duplicates counted, consumer offsets
never lower, the old master back as a slave with its tail cut, byte-identical logs). The
``cluster`` test kills once; the ``slow`` one loops, a different kill point each time, and
kills each group's master three times in a row (the next kill hits the replica elected
last, with the one that rejoined last in its in-sync set), two groups at once.
"""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.broker.failover_support import FAILOVER_DEADLINE_S, Result, run_failover
from tests.harness import running_cluster


def failover(
    root: Path, endpoints: list[str], group: str, points: list[int], seed: int
) -> list[Result]:
    coro = run_failover(root, endpoints, group, points, random.Random(seed))
    results = asyncio.run(asyncio.wait_for(coro, 120 * len(points)))
    for r in results:
        print(r.line())
    return results


@pytest.mark.cluster
def test_failover_without_loss(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    kill_after = random.Random(seed).randrange(20, 600)
    print(f"seed {seed}")
    with running_cluster(tmp_path / "ml", n=1) as node:
        (r,) = failover(tmp_path, node.endpoints, "fo-group", [kill_after], seed)
    assert r.acked > kill_after and r.failover_s < FAILOVER_DEADLINE_S


@pytest.mark.slow
def test_failover_loop_with_a_different_kill_point_each_time(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    points = random.Random(seed).sample(range(0, 1500), 6)
    print(f"seed {seed}, kill points {points}")
    with running_cluster(tmp_path / "ml", n=1) as node, ThreadPoolExecutor(2) as pool:
        # the two groups at once, each on a thread of its own (a loop, a producer, 3 replicas)
        runs = []
        for i in range(2):
            root = tmp_path / f"group{i}"
            root.mkdir()
            group_points = points[3 * i : 3 * i + 3]
            args = (root, node.endpoints, f"fo-loop-{i}", group_points, seed + i)
            runs.append(pool.submit(failover, *args))
        results: list[Result] = [r for run in runs for r in run.result()]
    times = sorted(r.failover_s for r in results)
    print(
        f"failover p50 {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s;"
        f" duplicates {[r.duplicates for r in results]}; tails cut {[r.cut_bytes for r in results]}"
    )
    assert [r.kill_after for r in results] == points
    assert len({(r.old_id, r.new_id) for r in results}) > 1, "more than one master was killed"
