"""Power cuts: every member's data dir on :mod:`tests.faults.lazyfs`, so SIGKILL plus a cut
drops each write the member did not fsync (and each directory entry whose directory it did
not fsync), as a machine losing power would. Whatever a client saw acknowledged must be
there after the restart, on every member."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshots import makedirs_durable
from tests.faults.inject import Writer, assert_acknowledged_everywhere
from tests.faults.lazymount import LazyMount, fuse_unavailable
from tests.harness import Cluster

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.skipif(fuse_unavailable() is not None, reason=str(fuse_unavailable())),
]


@contextlib.contextmanager
def lazy_cluster(root: Path, n: int = 3) -> Iterator[tuple[Cluster, list[LazyMount]]]:
    """A ready n-node cluster whose data dirs live on lazy mounts (one per member); the
    nodes stop before the mounts go, whatever happened."""
    with contextlib.ExitStack() as stack:
        cluster = Cluster(root / "cluster", n=n, start=False)
        mounts = [stack.enter_context(LazyMount(root / f"lazy{i}")) for i in range(n)]
        for i, m in enumerate(mounts):
            cluster.nodes[i] = dataclasses.replace(cluster.nodes[i], data_dir=m.mnt / "data")
            makedirs_durable(m.mnt / "data")  # the operator's data dir, there before the node
        failed = True
        try:
            for i in range(n):
                cluster.start(i)
            cluster.wait_ready(60)
            yield cluster, mounts
            failed = False
        finally:
            cluster.close(failed=failed)
            if failed:
                for m in mounts:
                    print(m.log_text())


def _cut(cluster: Cluster, mounts: list[LazyMount], members: list[int]) -> None:
    for i in members:
        cluster.kill(i, signal.SIGKILL)
    for i in members:
        mounts[i].cut()
    for i in members:
        cluster.start(i)


@pytest.mark.slow
def test_power_cut_of_every_member_under_load_loses_no_acknowledged_write(
    tmp_path: Path,
) -> None:
    with lazy_cluster(tmp_path) as (cluster, mounts), Writer(cluster, b"cut/") as writer:
        for _round in range(2):
            writer.wait_acked(200, 60)
            _cut(cluster, mounts, [0, 1, 2])
            cluster.wait_ready(60)
            writer.wait_acked(50, 60)
        writer.stop()
        assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])


@pytest.mark.slow
def test_power_cut_of_one_member_under_load_loses_no_acknowledged_write(tmp_path: Path) -> None:
    with lazy_cluster(tmp_path) as (cluster, mounts), Writer(cluster, b"cut1/") as writer:
        writer.wait_acked(200, 60)
        leader = cluster.leader()
        follower = next(i for i in range(3) if i != leader)
        for member in (follower, leader):
            _cut(cluster, mounts, [member])
            cluster.wait_ready(60)
            writer.wait_acked(100, 60)
        writer.stop()
        assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])
