"""``etcdctl snapshot save`` from a metaledger node gives etcd 3.4's format, checked by the
real binaries (one metaledger node and one etcd at a time, each stopped by PID).

A metaledger node takes puts, overwrites, a delete, a lease with keys and a txn of two puts;
``etcdctl snapshot save`` against it writes a file that ``etcdctl snapshot status`` reads
(hash, revision, total keys as our reader computes them), and ``etcdctl snapshot restore``
turns into a data dir where a real etcd 3.4 serves every key with its create and mod
revisions, version and lease at metaledger's revision, and the lease with its keys. Then
users and roles and auth on: a second snapshot restores into an etcd that has auth on
(a request without a user is refused) and holds the users (password hashes as metaledger
stored them) and the role. ``metaledger snapshot save`` still writes metaledger's own format.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snapshots import inspect
from snapshots.etcdfmt import read_bolt, read_etcd_snapshot, snapshot_status, split_snapshot_hash
from tests.etcd_harness import EtcdServer, etcdctl, etcdctl_restore
from tests.etcd_harness import etcdctl_json as _json
from tests.etcd_harness import etcdctl_ok as _ok
from tests.etcd_harness import kv_fields as _kvs
from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("etcd") is None or shutil.which("etcdctl") is None,
        reason="etcd 3.4 and etcdctl are not installed",
    ),
]

CLI = (sys.executable, "-m", "nameserver.cli")


def test_etcdctl_saves_restores_and_etcd_serves_a_metaledger_snapshot(tmp_path: Path) -> None:
    node = Cluster(tmp_path / "ml", n=1)
    try:
        node.wait_ready(20)
        ep = node.endpoints[0]
        wait_until(  # the node's own member record is in: no entry but ours from here on
            lambda: _json(ep, "member", "list")["members"][0].get("clientURLs"),
            30,
            "the node's member record",
        )
        for args in (("a", "1"), ("a", "2"), ("b", "x"), ("c", "y")):
            _ok(ep, "put", *args)
        _ok(ep, "del", "c")
        lease_id = int(_json(ep, "lease", "grant", "600")["ID"])
        _ok(ep, "put", f"--lease={lease_id:x}", "l1", "v")
        _ok(ep, "put", f"--lease={lease_id:x}", "l2", "w")
        _ok(ep, "txn", stdin="\nput t1 one\nput t2 two\n\n\n")
        before = _json(ep, "get", "", "--prefix")
        snap = tmp_path / "ml.db"
        _ok(ep, "snapshot", "save", str(snap))
        status = json.loads(_ok(ep, "snapshot", "status", str(snap), "-w", "json"))

        # users, roles, auth on: a second snapshot
        _ok(ep, "role", "add", "r1")
        _ok(ep, "role", "grant-permission", "r1", "readwrite", "/p", "/q")
        _ok(ep, "user", "add", "root:pw")
        _ok(ep, "user", "grant-role", "root", "root")
        _ok(ep, "user", "add", "u1:pw")
        _ok(ep, "user", "grant-role", "u1", "r1")
        _ok(ep, "auth", "enable")
        authed = tmp_path / "ml-auth.db"
        _ok(ep, "snapshot", "save", str(authed), user="root:pw")

        # metaledger's own snapshot is still there for its own records
        own = tmp_path / "own.snap"
        saved = subprocess.run(
            [*CLI, "snapshot", "save", str(own), "--endpoints", ep, "--user", "root:pw"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert saved.returncode == 0, saved.stderr
        assert inspect(str(own), verify=True).counts["kv"] == len(before["kvs"])
    finally:
        node.close()

    data = snap.read_bytes()
    assert split_snapshot_hash(data)[1], "the stream ends with etcd's SHA-256 trailer"
    ours = snapshot_status(data)
    assert status == {
        "hash": ours.hash,
        "revision": ours.revision,
        "totalKey": ours.total_key,
        "totalSize": ours.total_size,
    }
    revision = int(before["header"]["revision"])
    assert read_etcd_snapshot(data).revision == revision

    client, peer = etcdctl_restore(snap, tmp_path / "etcd")
    with EtcdServer(tmp_path / "etcd", ports=(client, peer)) as etcd:
        etcd.wait_ready()
        got = _json(etcd.endpoint, "get", "", "--prefix")
        ttl = _json(etcd.endpoint, "lease", "timetolive", f"{lease_id:x}", "--keys")
        put = _json(etcd.endpoint, "put", "after", "x")
    assert _kvs(got) == _kvs(before) and len(_kvs(got)) == 6
    assert int(got["header"]["revision"]) == revision
    assert int(put["header"]["revision"]) == revision + 1
    assert int(ttl["granted-ttl"]) == 600 and 0 < int(ttl["ttl"]) <= 600
    assert sorted(base64.b64decode(k) for k in ttl["keys"]) == [b"l1", b"l2"]
    t1, t2 = _kvs(got)[b"t1"], _kvs(got)[b"t2"]
    assert t1[2] == t2[2], "one txn, one revision"

    client, peer = etcdctl_restore(authed, tmp_path / "etcd-auth")
    with EtcdServer(tmp_path / "etcd-auth", ports=(client, peer)) as etcd:
        # etcd cannot check metaledger's password hashes (scrypt, not bcrypt): auth is on,
        # a request without a user is refused; the users and role are in its backend
        refused = wait_until(
            lambda: "user name is empty" in etcdctl(etcd.endpoint, "get", "a").stderr,
            30,
            lambda: f"etcd with auth on never refused an anonymous get:\n{etcd.log_tail()}",
        )
    assert refused
    tree = read_bolt((tmp_path / "etcd-auth" / "data" / "member" / "snap" / "db").read_bytes())
    assert set(tree[b"authUsers"]) == {b"root", b"u1"}
    assert set(tree[b"authRoles"]) == {b"r1"}
    auth = tree[b"auth"]
    assert isinstance(auth, dict) and auth[b"authEnabled"] == b"\x01"
