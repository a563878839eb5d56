"""The compaction job over change-log segments written by a real 3-node cluster gives the
same per-type counts and content hashes as the server's own snapshot at that offset
(DESIGN.md §4: record-level replay is shared, so no state-machine rules are needed)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from nameserver.client import Client
from snapshots import SnapshotInfo, SnapshotMeta, compact_local, inspect
from snapshots.compaction import compact_spark
from tests.harness import Cluster

pytestmark = pytest.mark.spark


def test_spark_compaction_of_a_real_clusters_log_matches_its_snapshot(
    spark: SparkSession, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path / "cluster", n=3)
    try:
        cluster.wait_ready(30)
        cluster.wait_announced(30)
        rng = random.Random(7)
        with Client(cluster.endpoints, timeout_s=10) as client:
            for i in range(600):  # puts, overwrites and deletes over 150 keys
                key = f"compact/{rng.randrange(150):03d}"
                if rng.random() < 0.15:
                    client.delete(key)
                else:
                    client.put(key, f"v{i}")
            server_snapshot = tmp_path / "server.snap"
            client.snapshot(str(server_snapshot))
        info = inspect(server_snapshot, verify=True)
        leader = cluster.wait_ready(10)
        segments = cluster.data_dir(leader) / "log"
        cluster.stop(leader)  # SIGTERM: the segments are flushed and closed
        out = tmp_path / "spark.snap"
        result = compact_spark(
            segments, info.last_offset, out, info.cluster_id, spark=spark, progress=False
        )
        assert result.last_offset == info.last_offset
        assert dict(result.counts) == dict(info.counts)
        assert dict(result.hashes) == dict(info.hashes)
        local = compact_local(
            segments, None, info.last_offset, tmp_path / "local.snap", result_meta(info)
        )
        assert dict(local.hashes) == dict(info.hashes)
    finally:
        cluster.close()


def result_meta(info: SnapshotInfo) -> SnapshotMeta:
    return SnapshotMeta(
        cluster_id=info.cluster_id, last_offset=info.last_offset, last_term=info.last_term
    )
