"""The real ``etcdctl snapshot status`` (etcd 3.4) reads the files snapshots.etcdfmt writes.

Restoring such a file with ``etcdctl snapshot restore`` and serving it with a real etcd, and
reading a file a real etcd saved, are in test_etcdfmt_real_etcd.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from snapshots.etcdfmt import (
    EtcdImage,
    KeyRevision,
    Lease,
    Member,
    User,
    snapshot_status,
    write_etcd_snapshot,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]


def test_etcdctl_snapshot_status_reports_hash_revision_and_key_count(tmp_path: Path) -> None:
    keys = [
        KeyRevision(i, 0, b"key-%05d" % (i % 900), b"value" * (i % 40), i, i, 1, 0)
        for i in range(2, 3002)
    ]
    keys.append(KeyRevision(3002, 0, b"key-00002", tombstone=True))
    image = EtcdImage(
        keys=tuple(keys),
        consistent_index=3010,
        leases=(Lease(0x1234, 30),),
        members=(
            Member(
                0x8E9E05C52164694D, ("http://127.0.0.1:2380",), "m0", ("http://127.0.0.1:2379",)
            ),
        ),
        cluster_version="3.4.0",
        users=(User(b"root", b"$2a$10$x", ("root",)),),
    )
    path = tmp_path / "snap.db"
    path.write_bytes(write_etcd_snapshot(image))
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")} | {
        "ETCDCTL_API": "3"
    }
    out = subprocess.run(
        ["etcdctl", "snapshot", "status", str(path), "-w", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    status = json.loads(out)
    ours = snapshot_status(path.read_bytes())
    # key bucket 3001, meta 1, lease 1, members 1, cluster 1, auth 1 (authRevision; auth is
    # off and never was, so no authEnabled), authUsers 1
    assert status == {
        "hash": ours.hash,
        "revision": 3002,
        "totalKey": 3007,
        "totalSize": ours.total_size,
    }
