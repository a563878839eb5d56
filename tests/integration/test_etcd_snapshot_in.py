"""``metaledger snapshot restore --from-etcd``: a real etcd 3.4's snapshot seeds metaledger.

A real etcd takes puts over several revisions, deletes, a txn, a lease with keys, users and a
role, and auth on; ``etcdctl snapshot save`` writes the file; ``metaledger snapshot restore
--from-etcd`` seeds a new data dir from it (progress on stderr); the node started on it
answers ``etcdctl get --prefix -w json`` as etcd did, field for field (every kv's key,
create and mod revisions, version, value and lease, and the header's revision: exactly
etcd's, once the member record the node writes on its first start is in: the seeded store
counts etcd's way from its first entry, so that record never moves it, wherever it lands),
keeps the lease with its TTL and keys, and its users log in with the passwords they had in
etcd (etcd's bcrypt hashes came along) with the permissions their role gives. Three members
each seeded from the same file, as ``etcdctl snapshot restore`` users seed an etcd cluster,
answer etcd's revision on every member once all three member records are in, and a put
moves it by one.

Files that are not an etcd 3.4 snapshot (not bbolt, truncated, a page changed, a hash that
does not match, etcd 3.5's layout) are refused with one line naming what is wrong and where,
exit 1, and no data dir is left behind.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from snapshots.etcdfmt import read_bolt, split_snapshot_hash, write_bolt
from tests.etcd_harness import EtcdServer, etcdctl
from tests.etcd_harness import etcdctl_json as _json
from tests.etcd_harness import etcdctl_ok as _ok
from tests.harness import Cluster, wait_until

CLI = (sys.executable, "-m", "nameserver.cli")
DATA = Path(__file__).resolve().parents[1] / "unit" / "snapshots" / "data"

ADMIN = "root:rootpw"
pytestmark = pytest.mark.integration


def _fields(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every kv of ``get -w json`` with etcd's fields (absent ones as etcd leaves them out)."""
    keys = ("key", "create_revision", "mod_revision", "version", "value", "lease")
    return [{k: kv.get(k) for k in keys} for kv in doc.get("kvs", ())]


def restore(etcd_file: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *CLI,
            "snapshot",
            "restore",
            "--from-etcd",
            str(etcd_file),
            "--data-dir",
            str(data_dir),
            "-w",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class EtcdSnapshot:
    """A real etcd's snapshot file and what etcd answered ``get "" --prefix`` at it."""

    def __init__(self, path: Path, want: dict[str, Any], lease_id: int) -> None:
        self.path, self.want, self.lease_id = path, want, lease_id

    @property
    def revision(self) -> int:
        return int(self.want["header"]["revision"])


@pytest.fixture(scope="module")
def etcd_snapshot(tmp_path_factory: pytest.TempPathFactory) -> EtcdSnapshot:
    if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
        pytest.skip("etcd 3.4 and etcdctl are not installed")
    tmp_path = tmp_path_factory.mktemp("etcd")
    with EtcdServer(tmp_path / "etcd") as etcd:
        etcd.wait_ready()
        ep = etcd.endpoint
        for args in (("a", "1"), ("a", "2"), ("a", "3"), ("b", "x"), ("c", "y"), ("d", "z")):
            _ok(ep, "put", *args)
        _ok(ep, "del", "c")
        _ok(ep, "txn", stdin="\nput t1 one\nput t2 two\ndel d\n\n\n")
        lease_id = int(_json(ep, "lease", "grant", "900")["ID"])
        _ok(ep, "put", f"--lease={lease_id:x}", "l1", "v")
        _ok(ep, "put", f"--lease={lease_id:x}", "l2", "w")
        _ok(ep, "put", "/p/in", "role's")
        _ok(ep, "role", "add", "r1")
        _ok(ep, "role", "grant-permission", "r1", "readwrite", "/p/", "/p0")
        _ok(ep, "user", "add", "root:rootpw")
        _ok(ep, "user", "grant-role", "root", "root")
        _ok(ep, "user", "add", "u1:u1pw")
        _ok(ep, "user", "grant-role", "u1", "r1")
        _ok(ep, "auth", "enable")
        snap = tmp_path / "etcd.db"
        _ok(ep, "snapshot", "save", str(snap), user=ADMIN)
        want = _json(ep, "get", "", "--prefix", user=ADMIN)
    return EtcdSnapshot(snap, want, lease_id)


def _member_records_in(endpoint: str, n: int) -> bool:
    """Whether ``endpoint``'s member list has ``n`` members, each with its client URLs (the
    member record each node writes on its first start: a log entry)."""
    members = _json(endpoint, "member", "list", user=ADMIN)["members"]
    return len(members) == n and all(m.get("clientURLs") for m in members)


def test_an_etcd_snapshot_seeds_metaledger_field_for_field(
    tmp_path: Path, etcd_snapshot: EtcdSnapshot
) -> None:
    snap, want, lease_id = etcd_snapshot.path, etcd_snapshot.want, etcd_snapshot.lease_id
    node = Cluster(tmp_path / "ml", n=1, start=False)
    try:
        done = restore(snap, node.data_dir(0))
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["revision"] == etcd_snapshot.revision
        assert (doc["keys"], doc["leases"], doc["users"], doc["roles"]) == (7, 1, 2, 1)
        assert doc["keys"] == len(want["kvs"])
        assert doc["revisions"] == "etcd"
        assert "wrote" in done.stderr and "keys" in done.stderr  # progress on stderr
        node.start(0)
        node.wait_ready(30)
        ml = node.endpoints[0]
        # the node writes its own member record once (a log entry that changes no key)
        wait_until(lambda: _member_records_in(ml, 1), 30, "the node's member record")
        got = _json(ml, "get", "", "--prefix", user=ADMIN)
        ttl = _json(ml, "lease", "timetolive", f"{lease_id:x}", "--keys", user=ADMIN)
        u1_in = _json(ml, "get", "/p/in", user="u1:u1pw")
        u1_out = etcdctl(ml, "get", "a", flags=["--user=u1:u1pw"])
        wrong = etcdctl(ml, "get", "a", flags=["--user=u1:nope"])
    finally:
        node.close()
    assert _fields(got) == _fields(want)
    # exactly etcd's revision at the snapshot: the member record did not move it
    assert int(got["header"]["revision"]) == etcd_snapshot.revision
    assert int(ttl["granted-ttl"]) == 900 and 0 < int(ttl["ttl"]) <= 900
    assert sorted(base64.b64decode(k) for k in ttl["keys"]) == [b"l1", b"l2"]
    assert [base64.b64decode(kv["value"]) for kv in u1_in["kvs"]] == [b"role's"]
    assert u1_out.returncode != 0 and "permission denied" in u1_out.stderr
    assert wrong.returncode != 0 and "authentication failed" in wrong.stderr


def test_three_members_seeded_from_one_etcd_snapshot_serve_etcds_revision(
    tmp_path: Path, etcd_snapshot: EtcdSnapshot
) -> None:
    want, revision = etcd_snapshot.want, etcd_snapshot.revision
    cluster = Cluster(tmp_path / "ml3", n=3, start=False)
    try:
        for i in range(cluster.n):  # every member from the same file
            done = restore(etcd_snapshot.path, cluster.data_dir(i))
            assert done.returncode == 0, done.stderr
        for i in range(cluster.n):
            cluster.start(i)
        cluster.wait_ready(60)
        for ep in cluster.endpoints:  # every member's record in, as each member applied it
            wait_until(partial(_member_records_in, ep, 3), 30, f"3 member records at {ep}")
        got = [_json(ep, "get", "", "--prefix", user=ADMIN) for ep in cluster.endpoints]
        _ok(cluster.endpoints[1], "put", "after", "seed", user=ADMIN)
        after = [_json(ep, "get", "after", user=ADMIN) for ep in cluster.endpoints]
    finally:
        cluster.close()
    for i, doc in enumerate(got):
        assert _fields(doc) == _fields(want), f"member {i}"
        assert int(doc["header"]["revision"]) == revision, f"member {i}"
    for i, doc in enumerate(after):  # a put moves it by one, on every member
        assert int(doc["header"]["revision"]) == revision + 1, f"member {i}"
        (kv,) = doc["kvs"]
        assert int(kv["create_revision"]) == int(kv["mod_revision"]) == revision + 1


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what the one line must say)."""
    good = (DATA / "etcd-3.4.23-snapshot.db").read_bytes()
    db, _ = split_snapshot_hash(good)
    files: dict[str, tuple[bytes, str]] = {
        "not bbolt": (b"SQLite format 3\x00" + bytes(8192), "magic"),
        "truncated": (db[: len(db) // 2], "page"),
        "hash": (db[:-1] + bytes([db[-1] ^ 1]) + good[len(db) :], "SHA-256"),
    }
    tree = read_bolt(db)
    meta = tree[b"meta"]
    assert isinstance(meta, dict)
    tree[b"meta"] = {**meta, b"term": (5).to_bytes(8, "big")}
    files["etcd 3.5"] = (write_bolt(tree), "3.5")
    out = {}
    for i, (name, (data, says)) in enumerate(files.items()):
        path = tmp_path / f"bad{i}.db"
        path.write_bytes(data)
        out[name] = (path, says)
    return out


def test_files_that_are_not_an_etcd_34_snapshot_are_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    for name, (path, says) in _bad_files(tmp_path).items():
        data_dir = tmp_path / f"dd-{path.stem}"
        done = restore(path, data_dir)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (name, done.stderr)
        assert lines and lines[-1].startswith(f"metaledger: snapshot restore: {path}: "), name
        assert says in lines[-1], (name, lines[-1])
        assert not [ln for ln in lines if "Traceback" in ln], (name, done.stderr)
        assert not data_dir.exists(), f"{name}: a data dir was left behind"
    # a data dir in use is refused before the file is read, and left as it was
    used = tmp_path / "used"
    (used / "snap").mkdir(parents=True)
    (used / "snap" / "x").write_text("mine")
    done = restore(DATA / "etcd-3.4.23-snapshot.db", used)
    assert done.returncode == 1 and "not empty" in done.stderr
    assert [p.name for p in used.rglob("*")] == ["snap", "x"]
