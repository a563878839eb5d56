"""snapshots.etcdfmt: bbolt files in etcd 3.4's layout, and the faults the reader names."""

from __future__ import annotations

import hashlib
import struct

import pytest

from protos.etcdserverpb import kv_pb2
from snapshots.etcdfmt import (
    BoltFormatError,
    EtcdImage,
    EtcdLayoutError,
    KeyRevision,
    Lease,
    Member,
    Permission,
    Role,
    SnapshotHashError,
    Tree,
    User,
    image_to_buckets,
    read_bolt,
    read_etcd_snapshot,
    revision_bytes,
    snapshot_status,
    split_snapshot_hash,
    write_bolt,
    write_etcd_db,
    write_etcd_snapshot,
)
from snapshots.etcdfmt._bolt import PAGE_SIZE, fnv64a


def _image(n: int = 50) -> EtcdImage:
    keys = [
        KeyRevision(
            i,
            0,
            b"k%03d" % i,
            b"v%d" % i,
            create_revision=i,
            mod_revision=i,
            version=1,
            lease=7 * (i % 2),
        )
        for i in range(2, n + 2)
    ]
    keys.append(KeyRevision(n + 2, 0, b"k002", tombstone=True))
    return EtcdImage(
        keys=tuple(keys),
        consistent_index=n + 10,
        scheduled_compact_revision=1,
        finished_compact_revision=1,
        leases=(Lease(7, 60, 42),),
        members=(
            Member(
                0x8E9E05C52164694D, ("http://127.0.0.1:2380",), "m0", ("http://127.0.0.1:2379",)
            ),
        ),
        removed_member_ids=(0x1234,),
        cluster_version="3.4.0",
        auth_enabled=True,
        auth_revision=5,
        users=(User(b"root", b"$2a$10$hash", ("root",)), User(b"tls", no_password=True)),
        roles=(Role(b"reader", (Permission(0, b"a", b"b"), Permission(2, b"x"))), Role(b"root")),
    )


def test_image_round_trips_through_a_snapshot() -> None:
    image = _image()
    snap = write_etcd_snapshot(image)
    assert len(snap) % 512 == 32
    assert split_snapshot_hash(snap) == (snap[:-32], True)
    assert read_etcd_snapshot(snap) == image
    assert read_etcd_snapshot(write_etcd_db(image)) == image  # a bare db file reads too


def test_the_buckets_are_etcds() -> None:
    buckets = image_to_buckets(_image(3))
    assert set(buckets) == {
        b"key",
        b"meta",
        b"lease",
        b"alarm",
        b"members",
        b"members_removed",
        b"cluster",
        b"auth",
        b"authUsers",
        b"authRoles",
    }
    key = buckets[b"key"]
    assert isinstance(key, dict)
    rev = b"\0" * 7 + b"\x02_" + b"\0" * 8
    assert rev == revision_bytes(2, 0)
    kv = kv_pb2.KeyValue.FromString(key[rev])  # type: ignore[arg-type]
    assert (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version) == (
        b"k002",
        b"v2",
        2,
        2,
        1,
    )
    tombstone = key[revision_bytes(5, 0, True)]
    assert isinstance(tombstone, bytes)
    assert kv_pb2.KeyValue.FromString(tombstone) == kv_pb2.KeyValue(key=b"k002")
    assert buckets[b"meta"] == {
        b"consistent_index": struct.pack(">Q", 13),
        b"scheduledCompactRev": revision_bytes(1, 0),
        b"finishedCompactRev": revision_bytes(1, 0),
    }
    assert buckets[b"members"] == {
        b"8e9e05c52164694d": b'{"id":10276657743932975437,"peerURLs":["http://127.0.0.1:2380"],'
        b'"name":"m0","clientURLs":["http://127.0.0.1:2379"]}'
    }
    assert buckets[b"members_removed"] == {b"1234": b"removed"}
    assert buckets[b"cluster"] == {b"clusterVersion": b"3.4.0"}
    assert buckets[b"auth"] == {b"authEnabled": b"\x01", b"authRevision": struct.pack(">Q", 5)}


def test_live_keys_and_revision() -> None:
    image = _image(5)
    live = image.live_keys()
    assert sorted(live) == [b"k003", b"k004", b"k005", b"k006"]  # k002 was deleted at 7
    assert image.revision == 7


def test_status_matches_what_etcdctl_reports_for_a_known_file() -> None:
    # etcdctl 3.4.23 `snapshot status -w json` on this very file printed these numbers
    status = snapshot_status(write_etcd_snapshot(_image()))
    assert (status.hash, status.revision, status.total_key, status.total_size) == (
        2203736908,
        52,
        64,
        20480,
    )
    assert status.total_size == len(write_etcd_db(_image()))


def test_large_buckets_split_into_branch_and_overflow_pages() -> None:
    tree = {
        b"key": {revision_bytes(i, 0): b"x" * (i % 700) for i in range(1, 5000)},
        b"big": {b"one": b"y" * (3 * PAGE_SIZE), b"nested": {b"a": b"b", b"deeper": {b"c": b""}}},
        b"empty": {},
    }
    data = write_bolt(tree)  # type: ignore[arg-type]
    assert len(data) % PAGE_SIZE == 0
    assert read_bolt(data) == tree


def _meta_fields(data: bytes, page: int) -> tuple[int, ...]:
    return struct.unpack_from("<IIIIQQQQQ", data, page * PAGE_SIZE + 16)


def _with_meta(data: bytes, page: int, **changes: int) -> bytes:
    names = ["magic", "version", "page_size", "flags", "root", "seq", "freelist", "pgid", "txid"]
    fields = dict(zip(names, _meta_fields(data, page), strict=True)) | changes
    body = struct.pack("<IIIIQQQQQ", *fields.values())
    meta = body + struct.pack("<Q", fnv64a(body))
    at = page * PAGE_SIZE + 16
    return data[:at] + meta + data[at + len(meta) :]


def test_a_damaged_newer_meta_falls_back_to_the_older() -> None:
    data = write_etcd_db(_image())
    damaged = bytearray(data)
    damaged[PAGE_SIZE + 20] ^= 0xFF  # meta 1 (the newer) fails its checksum
    assert read_etcd_snapshot(bytes(damaged)) == _image()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: b"SQLite format 3\0".ljust(len(d), b"\0"), "no valid meta page.*bad magic"),
        (lambda d: _with_meta(_with_meta(d, 0, version=3), 1, version=3), "bbolt version 3"),
        (lambda d: d[: len(d) - PAGE_SIZE // 2], "truncated"),
        (lambda d: _with_meta(d, 1, root=1), "page 1: page id out of range"),
        (lambda d: _with_meta(d, 1, root=99999), "page 99999"),
    ],
)
def test_a_file_that_is_not_bbolt_is_refused_naming_the_fault(damage, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BoltFormatError, match=message) as caught:
        read_etcd_snapshot(damage(write_etcd_db(_image())))
    assert "\n" not in str(caught.value)


def test_a_page_referenced_twice_is_refused() -> None:
    data = write_bolt({b"a": {b"x": b"y" * 2000, b"z": b"w" * 2000, b"q": b"r" * 2000}})
    with pytest.raises(BoltFormatError, match="page 2 is referenced twice"):
        read_bolt(_with_meta(data, 1, root=2))  # the root points at the freelist's page


def test_a_broken_trailer_is_refused() -> None:
    snap = bytearray(write_etcd_snapshot(_image()))
    snap[-1] ^= 1
    with pytest.raises(SnapshotHashError, match="SHA-256"):
        read_etcd_snapshot(bytes(snap))
    db = write_etcd_db(_image())
    assert hashlib.sha256(db).digest() == write_etcd_snapshot(_image())[-32:]


def test_seeding_reads_while_the_trailer_is_checked_and_a_broken_one_is_the_error() -> None:
    """The seeding read (the SHA-256 on a thread while the database is read) gives the
    trailer's error first, as the plain read does, for a good database and for a damaged
    one."""
    from snapshots.etcdfmt import read_etcd_latest_kv

    snap = bytearray(write_etcd_snapshot(_image()))
    snap[-1] ^= 1
    with pytest.raises(SnapshotHashError, match="SHA-256"):
        read_etcd_latest_kv(bytes(snap), lambda kv: kv.SerializeToString())
    snap[:4096] = b"\xff" * 4096  # the meta pages too: no database either
    with pytest.raises(SnapshotHashError, match="SHA-256"):
        read_etcd_latest_kv(bytes(snap), lambda kv: kv.SerializeToString())
    good = write_etcd_snapshot(_image())
    _, latest, _ = read_etcd_latest_kv(good, lambda kv: kv.SerializeToString())
    assert latest


def _tree_with(bucket: bytes, key: bytes, value: bytes) -> bytes:
    tree = image_to_buckets(_image(3))
    sub = tree.setdefault(bucket, {})
    assert isinstance(sub, dict)
    sub[key] = value
    return write_bolt(tree)


@pytest.mark.parametrize(
    ("bucket", "key", "value", "message"),
    [
        (b"meta", b"term", b"\0" * 8, "bucket 'meta' key b'term': written by etcd 3.5 or later"),
        (b"key", b"not-a-revision", b"", "bucket 'key' key b'not-a-revision': not a revision"),
        (b"key", revision_bytes(9, 0), b"\xff\xff", "bucket 'key'.*not a mvccpb.KeyValue"),
        (b"lease", struct.pack(">Q", 8), b"\x08\x07", "lease id 7 differs from its key"),
        (b"members", b"10", b"{", "bucket 'members' key b'10': not a member record"),
        (b"unknown", b"a", b"b", "bucket 'unknown': not a bucket etcd 3.4 writes"),
    ],
)
def test_a_bbolt_file_not_in_etcd_34s_layout_is_refused(
    bucket: bytes, key: bytes, value: bytes, message: str
) -> None:
    with pytest.raises(EtcdLayoutError, match=message):
        read_etcd_snapshot(_tree_with(bucket, key, value))


def test_a_file_without_the_key_bucket_is_not_an_etcd_backend() -> None:
    with pytest.raises(EtcdLayoutError, match="bucket 'key': missing"):
        read_etcd_snapshot(write_bolt({b"meta": {}}))


def test_buckets_nested_too_deep_are_refused() -> None:
    tree: Tree = {b"leaf": b"x"}
    for _ in range(70):
        tree = {b"b": tree}
    with pytest.raises(BoltFormatError, match="nested more than 64 deep"):
        read_bolt(write_bolt(tree))


def test_keys_larger_than_a_page_make_a_tree_that_ends() -> None:
    """A node keeps two keys at least, as bbolt's: with every key over a page, each branch
    level still halves (it once grew a page per key forever and ate the node's memory)."""
    tree = {
        b"users": {bytes([65 + i]) * 30_000: b"u" for i in range(40)},
        b"big": {b"k": b"v" * 100_000, b"l": b"w"},
    }
    data = write_bolt(tree)
    assert read_bolt(data) == tree
    assert len(data) < 3 * 40 * 30_000  # a page run per key, a few branch pages


@pytest.mark.parametrize(
    ("tree", "says"),
    [
        ({b"b": {b"k" * 32_769: b"v"}}, "a key of 32769 bytes"),
        ({b"b": {b"": b"v"}}, "a key of 0 bytes"),
        ({b"b": {b"n": {b"k" * 40_000: b""}}}, "bucket /b/n"),
    ],
)
def test_what_bbolt_cannot_hold_is_refused_naming_it(tree: Tree, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        write_bolt(tree)
