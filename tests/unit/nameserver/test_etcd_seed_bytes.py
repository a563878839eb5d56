"""Seeding from an etcd snapshot writes the same snapshot file, byte for byte, as it did
before its reading and writing were made faster: a small image with every kind of key
record (plain, leased, empty and long values, a key deleted, a key deleted and put again,
two records of one revision), leases, users, roles and auth, seeded at a fixed clock, against
the SHA-256 of the file the earlier code wrote. Seeded with ``offset_revisions`` that is the
file from before the seeded image carried the store's revision counter, byte for byte; by
default the same with the counter's record (one more record, other counts and hashes). Both
in one process and in two (each a run of the key bucket's pages), and the compiled and the
Python build (CI runs both)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from nameserver import etcd_seed
from nameserver.etcd_seed import seed_from_etcd
from snapshots import etcdfmt as fmt

#: the SHA-256 of the snapshot file the seeding wrote before (same image, same clock), and
#: the seeding's with the store's revision counter (the default since)
GOLDEN = {
    True: "c085378eebcc2d197d03bbb893451907478178fc3a945555086f2e9ddda57807",
    False: "56bda0123b800f10795b8f65341d3c45504a6e4562efe51d2837a1fbb84673cb",
}
NOW = 1_700_000_000.0


def _image() -> fmt.EtcdImage:
    keys = [
        fmt.KeyRevision(
            i + 2, 0, b"k/%05d" % i, b"v" * (i % 300), i + 2, i + 2, 1, 7 * (i % 5 == 0)
        )
        for i in range(2000)
    ]
    n = 2002
    keys += [
        fmt.KeyRevision(n, 0, b"k/00007", tombstone=True),  # deleted
        fmt.KeyRevision(n + 1, 0, b"k/00009", tombstone=True),  # deleted, then put again
        fmt.KeyRevision(n + 2, 0, b"k/00009", b"again", n + 2, n + 2, 1),
        fmt.KeyRevision(n + 3, 0, b"empty", b"", n + 3, n + 3, 1),
        fmt.KeyRevision(n + 4, 0, b"long", b"x" * 20000, n + 4, n + 4, 1),
        fmt.KeyRevision(n + 5, 0, b"txn/a", b"1", n + 5, n + 5, 1),  # one revision, two keys
        fmt.KeyRevision(n + 5, 1, b"txn/b", b"2", n + 5, n + 5, 1),
        fmt.KeyRevision(n + 6, 0, b"k/00001", b"newer", 3, n + 6, 2),  # a second version
    ]
    return fmt.EtcdImage(
        keys=tuple(keys),
        consistent_index=n + 6,
        scheduled_compact_revision=100,
        finished_compact_revision=100,
        leases=(fmt.Lease(7, 60, 30), fmt.Lease(8, 10)),
        cluster_version="3.4.0",
        auth_enabled=True,
        auth_revision=4,
        users=(fmt.User(b"root", b"$2a$hash", ("root",)), fmt.User(b"u", b"", ("r",), True)),
        roles=(fmt.Role(b"r", (fmt.Permission(2, b"a", b"b"),)), fmt.Role(b"root")),
    )


@pytest.mark.parametrize("offset_revisions", [True, False])
@pytest.mark.parametrize("split", [False, True])
def test_seeding_writes_the_file_it_wrote_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: bool, offset_revisions: bool
) -> None:
    path = tmp_path / "etcd.db"
    path.write_bytes(fmt.write_etcd_snapshot(_image()))
    monkeypatch.setattr(time, "time", lambda: NOW)
    monkeypatch.setattr(etcd_seed, "SPLIT_RECORDS", 1 if split else 10**9)
    monkeypatch.setattr(etcd_seed, "_split_pays", lambda: True)
    seeded = seed_from_etcd(str(path), str(tmp_path / "d"), offset_revisions=offset_revisions)
    assert seeded.keys == 2000 - 1 + 4
    (snap,) = (tmp_path / "d" / "snap").iterdir()
    assert hashlib.sha256(snap.read_bytes()).hexdigest() == GOLDEN[offset_revisions]
