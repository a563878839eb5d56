"""snapshots.etcdfmt against a real etcd 3.4, both ways (one etcd at a time, stopped by PID).

Reading: a real etcd takes puts, overwrites, a delete, a lease with keys, a compaction, a
user with a role (auth left off) and a txn of two puts; ``etcdctl snapshot save`` writes the file, and the module
must read every live key with its revisions, version and lease, the lease, the member, the
cluster version, the user and the role as etcdctl reports them.

Writing: a file the module writes is turned into a data dir by ``etcdctl snapshot restore``,
and a real etcd on it serves every key (and an older revision), the lease with its keys, and
the users and role with auth on (a request without a user is refused, u1 reads its range only).
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from snapshots.etcdfmt import (
    EtcdImage,
    KeyRevision,
    Lease,
    Member,
    Permission,
    Role,
    User,
    read_bolt,
    read_etcd_snapshot,
    snapshot_status,
    split_snapshot_hash,
    write_etcd_snapshot,
)
from tests.etcd_harness import EtcdServer, etcdctl, etcdctl_restore
from tests.etcd_harness import etcdctl_json as _json
from tests.etcd_harness import etcdctl_ok as _ok
from tests.etcd_harness import kv_fields as _kvs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("etcd") is None or shutil.which("etcdctl") is None,
        reason="etcd 3.4 and etcdctl are not installed",
    ),
]


def _image_kvs(image: EtcdImage) -> dict[bytes, tuple[bytes, int, int, int, int]]:
    return {
        k: (r.value, r.create_revision, r.mod_revision, r.version, r.lease)
        for k, r in image.live_keys().items()
    }


def test_module_reads_what_a_real_etcd_snapshot_holds(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as etcd:
        etcd.wait_ready()
        ep = etcd.endpoint
        for args in (("a", "1"), ("a", "2"), ("b", "x"), ("c", "y")):
            _ok(ep, "put", *args)
        _ok(ep, "del", "c")
        lease_id = int(_json(ep, "lease", "grant", "600")["ID"])
        _ok(ep, "put", f"--lease={lease_id:x}", "l1", "v")
        _ok(ep, "put", f"--lease={lease_id:x}", "l2", "w")
        _ok(ep, "put", "d", "z")
        _ok(ep, "compact", "4")
        _ok(ep, "role", "add", "r1")
        _ok(ep, "role", "grant-permission", "r1", "readwrite", "/p", "/q")
        _ok(ep, "user", "add", "u1:pw")
        _ok(ep, "user", "grant-role", "u1", "r1")
        _ok(ep, "put", "e", "last")
        txn = etcdctl(ep, "txn", stdin="\nput t1 one\nput t2 two\n\n\n")
        assert txn.returncode == 0, txn.stderr  # one revision, subs 0 and 1
        snap = tmp_path / "snap.db"
        _ok(ep, "snapshot", "save", str(snap))
        got = _json(ep, "get", "", "--prefix")
        leases = _json(ep, "lease", "list")
        ttl = _json(ep, "lease", "timetolive", f"{lease_id:x}", "--keys")
        members = _json(ep, "member", "list")["members"]
    data = snap.read_bytes()
    assert split_snapshot_hash(data)[1], "etcdctl snapshot save keeps the SHA-256 trailer"
    image = read_etcd_snapshot(data)

    assert _image_kvs(image) == _kvs(got)
    assert image.revision == int(got["header"]["revision"])
    assert image.finished_compact_revision == image.scheduled_compact_revision == 4
    assert min(r.main for r in image.keys) > 2  # a=1 at revision 2 went with the compaction
    newest = max(r.main for r in image.keys)
    assert [(r.sub, r.key) for r in image.keys if r.main == newest] == [(0, b"t1"), (1, b"t2")]
    assert [le.id for le in image.leases] == [int(x["id"]) for x in leases["leases"]]
    assert [(le.id, le.ttl) for le in image.leases] == [(lease_id, int(ttl["granted-ttl"]))]
    attached = sorted(k for k, r in image.live_keys().items() if r.lease == lease_id)
    assert attached == sorted(base64.b64decode(k) for k in ttl["keys"])
    assert [(m.id, m.name, m.peer_urls, m.client_urls, m.is_learner) for m in image.members] == [
        (
            int(m["ID"]),
            m["name"],
            tuple(m["peerURLs"]),
            tuple(m["clientURLs"]),
            bool(m.get("isLearner", False)),
        )
        for m in members
    ]
    assert image.cluster_version == "3.4.0"
    assert not image.auth_enabled
    assert [(u.name, u.roles) for u in image.users] == [(b"u1", ("r1",))]
    assert image.users[0].password.startswith(b"$2a$")  # bcrypt, as etcd stores it
    assert image.roles == (Role(b"r1", (Permission(2, b"/p", b"/q"),)),)
    # etcd 3.4 keeps only these in meta; it writes no authEnabled until auth is switched
    tree = read_bolt(split_snapshot_hash(data)[0])
    assert set(tree[b"meta"]) == {
        b"consistent_index",
        b"scheduledCompactRev",
        b"finishedCompactRev",
    }
    assert set(tree[b"auth"]) == {b"authRevision"}
    assert tree[b"alarm"] == {}

    status = json.loads(_ok(ep, "snapshot", "status", str(snap), "-w", "json"))
    ours = snapshot_status(data)
    assert status == {
        "hash": ours.hash,
        "revision": ours.revision,
        "totalKey": ours.total_key,
        "totalSize": ours.total_size,
    }


LEASE = 0x3A
IMAGE = EtcdImage(
    keys=(
        KeyRevision(2, 0, b"a", b"1", 2, 2, 1),
        KeyRevision(3, 0, b"a", b"2", 2, 3, 2),
        KeyRevision(4, 0, b"b", b"x", 4, 4, 1),
        KeyRevision(5, 0, b"c", b"y", 5, 5, 1),
        KeyRevision(6, 0, b"c", tombstone=True),
        KeyRevision(7, 0, b"l1", b"v", 7, 7, 1, LEASE),
        KeyRevision(8, 0, b"l2", b"w", 8, 8, 1, LEASE),
        KeyRevision(9, 0, b"d", b"z", 9, 9, 1),
        KeyRevision(9, 1, b"f", b"same txn", 9, 9, 1),
        KeyRevision(10, 0, b"/pa", b"in r1", 10, 10, 1),
    ),
    consistent_index=20,
    scheduled_compact_revision=2,
    finished_compact_revision=2,
    leases=(Lease(LEASE, 600),),
    # restore replaces the members; this one must not survive it
    members=(Member(0x1234, ("http://127.0.0.1:9",), "old"),),
    cluster_version="3.4.0",
    auth_enabled=True,
    auth_revision=3,
    users=(  # both passwords are "pw", hashed by a real etcd 3.4
        User(b"root", b"$2a$10$hcdACcgYXN6.sLnoAwc2BOLxWw8t2lo6nUqIWoDAJ3bA.uRONIrB.", ("root",)),
        User(b"u1", b"$2a$10$AoEFW6N7bjtP0lEnC/A4p.4BEXdWROHkkJF.RKJVqkWao/6X3JxbO", ("r1",)),
    ),
    roles=(Role(b"r1", (Permission(2, b"/p", b"/q"),)),),
)


def test_real_etcd_serves_a_snapshot_the_module_wrote(tmp_path: Path) -> None:
    snap = tmp_path / "ours.db"
    snap.write_bytes(write_etcd_snapshot(IMAGE))
    root = tmp_path / "etcd"
    client, peer = etcdctl_restore(snap, root)
    peer_url = f"http://127.0.0.1:{peer}"
    with EtcdServer(root, ports=(client, peer)) as etcd:
        etcd.wait_ready(flags=["--user=root:pw"])
        ep = etcd.endpoint
        admin = "root:pw"
        got = _json(ep, "get", "", "--prefix", user=admin)
        old = _json(ep, "get", "a", "--rev=2", user=admin)
        ttl = _json(ep, "lease", "timetolive", f"{LEASE:x}", "--keys", user=admin)
        user = _ok(ep, "user", "get", "u1", user=admin)
        role = _ok(ep, "role", "get", "r1", user=admin)
        members = _json(ep, "member", "list", user=admin)["members"]
        # auth is on as the image says: no user is refused, u1 reads [/p, /q) only
        anonymous = etcdctl(ep, "get", "a")
        u1_in = _json(ep, "get", "/pa", user="u1:pw")
        u1_out = etcdctl(ep, "get", "a", flags=["--user=u1:pw"])
    assert anonymous.returncode != 0 and "user name is empty" in anonymous.stderr
    assert _kvs(u1_in) == {b"/pa": (b"in r1", 10, 10, 1, 0)}
    assert u1_out.returncode != 0 and "permission denied" in u1_out.stderr
    assert _kvs(got) == _image_kvs(IMAGE)
    assert int(got["header"]["revision"]) == IMAGE.revision == 10
    assert _kvs(old) == {b"a": (b"1", 2, 2, 1, 0)}
    assert int(ttl["granted-ttl"]) == 600
    assert sorted(base64.b64decode(k) for k in ttl["keys"]) == [b"l1", b"l2"]
    assert "Roles: r1" in user
    assert "[/p, /q)" in role
    assert [(m["name"], m["peerURLs"]) for m in members] == [("e0", [peer_url])]
