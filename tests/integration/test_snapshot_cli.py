"""`metaledger snapshot save|list|inspect|restore` end to end: a snapshot saved from a live
cluster seeds a new cluster that starts from it, keeps its data, and numbers new writes
after the snapshot's offset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protos.etcdserverpb import rpc_pb2
from snapshots import snapshot_name
from snapshots.compaction import log_end
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.integration


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nameserver.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_save_list_inspect_restore_round_trip(cluster: Cluster, tmp_path: Path) -> None:
    endpoints = ",".join(cluster.endpoints)
    leader = cluster.wait_ready(20)
    kv = cluster.stub(leader)
    for i in range(50):
        last = kv.Put(rpc_pb2.PutRequest(key=b"snap/%02d" % i, value=b"v%d" % i), timeout=10)

    saved = cli(
        "snapshot", "save", str(tmp_path / "s.snap"), "--endpoints", endpoints, "-w", "json"
    )
    assert saved.returncode == 0, saved.stderr
    info = json.loads(saved.stdout)
    assert info["counts"]["kv"] == 50 and info["last_offset"] > 50

    inspected = cli("snapshot", "inspect", str(tmp_path / "s.snap"), "--verify", "-w", "json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["hashes"] == info["hashes"]

    listed = cli("snapshot", "list", "--data-dir", str(cluster.data_dir(leader)), "-w", "json")
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout)["snapshots"], list)

    # a new cluster, every member seeded from the same file
    fresh = Cluster(tmp_path / "restored", n=3, start=False)
    try:
        for i in range(3):
            done = cli(
                "snapshot",
                "restore",
                str(tmp_path / "s.snap"),
                "--data-dir",
                str(fresh.data_dir(i)),
            )
            assert done.returncode == 0, done.stderr
        again = cli(
            "snapshot", "restore", str(tmp_path / "s.snap"), "--data-dir", str(fresh.data_dir(0))
        )
        assert again.returncode != 0 and "not empty" in again.stderr
        for i in range(3):
            fresh.start(i)
        new_leader = fresh.wait_ready(30)
        stub = fresh.stub(new_leader)
        got = stub.Range(rpc_pb2.RangeRequest(key=b"snap/", range_end=b"snap0"), timeout=10)
        assert [kv.value for kv in got.kvs] == [b"v%d" % i for i in range(50)]
        put = stub.Put(rpc_pb2.PutRequest(key=b"after", value=b"x"), timeout=10)
        # the restored store goes on from the snapshot's revision (etcd's count: the new
        # members' own records moved the offset, not the revision)
        assert put.header.revision == last.header.revision + 1
        wait_until(
            lambda: all(
                fresh.stub(i)
                .Range(rpc_pb2.RangeRequest(key=b"after", serializable=True), timeout=5)
                .count
                == 1
                for i in range(3)
            ),
            20,
            "every restored member applies new writes",
        )
        _compact_a_restored_members_log(fresh.data_dir(0), tmp_path, info)
    finally:
        fresh.close()


def _compact_a_restored_members_log(data_dir: Path, tmp_path: Path, saved: dict[str, Any]) -> None:
    """`metaledger compact` on a live member's data dir: its log starts after the snapshot
    it was seeded from, so the snapshot is needed as the base (the error names it); with it,
    the cluster id and term need no flags; an --upto past the log is refused."""
    end = log_end(data_dir / "log")
    assert end.last_offset is not None and end.last_offset > saved["last_offset"]
    out = tmp_path / "c.snap"
    argv = ["compact", "--segments", str(data_dir), "--out", str(out), "--engine", "local"]
    alone = cli(*argv, "--upto", str(end.last_offset))
    assert alone.returncode == 2 and not out.exists()
    base = data_dir.resolve() / "snap" / snapshot_name(saved["last_offset"])
    assert alone.stderr.splitlines()[-1].endswith(f"give --base-snapshot {base}")
    past = cli(*argv, "--upto", str(end.last_offset + 1000), "--base-snapshot", str(base))
    assert past.returncode == 2 and not out.exists()
    assert "is past the end of the change log" in past.stderr  # a live log: it may have grown
    done = cli(*argv, "--upto", str(end.last_offset), "--base-snapshot", str(base), "-w", "json")
    assert done.returncode == 0, done.stderr
    assert "reading its change log in" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["cluster_id"] == saved["cluster_id"] and doc["last_offset"] == end.last_offset
    assert doc["counts"]["kv"] == 51  # the 50 restored keys and the one written after
