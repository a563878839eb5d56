"""`metaledger snapshot save|list|inspect|restore` end to end: a snapshot saved from a live
cluster seeds a new cluster that starts from it, keeps its data, and numbers new writes
after the snapshot's offset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from protos.etcdserverpb import rpc_pb2
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
        kv.Put(rpc_pb2.PutRequest(key=b"snap/%02d" % i, value=b"v%d" % i), timeout=10)

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
        assert put.header.revision > info["last_offset"]
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
    finally:
        fresh.close()
