"""nameserver.etcd_snapshot: metaledger's image to etcd 3.4's backend and back.

An etcd image (with past revisions, a tombstone, a txn's two puts at one revision, a lease,
users and a role, auth on) seeds records; the image built from them goes back out as etcd's
backend with every live key's revisions, version and lease, the lease's TTL, the users'
hashes and roles, at the same revision (the compaction revision at it: past revisions are
not carried); its bytes read back to the same image.
"""

from __future__ import annotations

from nameserver.auth.passwords import check_password, hash_password
from nameserver.etcd_snapshot import etcd_snapshot_bytes, from_etcd_image, to_etcd_image
from nameserver.kinds import REGISTRY
from nameserver.kv.records import StoreRevision
from nameserver.state.machine import image_from_records
from snapshots.etcdfmt import (
    EtcdImage,
    KeyRevision,
    Lease,
    Permission,
    Role,
    User,
    read_etcd_snapshot,
    split_snapshot_hash,
)

LEASE = 0x3A
NOW_MS = 1_700_000_000_000
ETCD = EtcdImage(
    keys=(
        KeyRevision(2, 0, b"a", b"1", 2, 2, 1),
        KeyRevision(3, 0, b"a", b"2", 2, 3, 2),
        KeyRevision(4, 0, b"c", b"y", 4, 4, 1),
        KeyRevision(5, 0, b"c", tombstone=True),
        KeyRevision(7, 0, b"l1", b"v", 7, 7, 1, LEASE),
        KeyRevision(9, 0, b"t1", b"one", 9, 9, 1),
        KeyRevision(9, 1, b"t0", b"two", 9, 9, 1),
    ),
    consistent_index=20,
    scheduled_compact_revision=2,
    finished_compact_revision=2,
    leases=(Lease(LEASE, 600, 300),),
    cluster_version="3.4.0",
    auth_enabled=True,
    auth_revision=3,
    users=(
        User(b"root", b"$2a$10$hcdACcgYXN6.sLnoAwc2BOLxWw8t2lo6nUqIWoDAJ3bA.uRONIrB.", ("root",)),
        User(b"u1", b"$2a$10$AoEFW6N7bjtP0lEnC/A4p.4BEXdWROHkkJF.RKJVqkWao/6X3JxbO", ("r1",)),
    ),
    roles=(Role(b"r1", (Permission(2, b"/p", b"/q"),)),),
)


def _live(image: EtcdImage) -> dict[bytes, tuple[bytes, int, int, int, int]]:
    return {
        k: (r.value, r.create_revision, r.mod_revision, r.version, r.lease)
        for k, r in image.live_keys().items()
    }


def test_an_etcd_image_seeds_an_image_that_goes_back_out_the_same() -> None:
    records = from_etcd_image(ETCD, NOW_MS)
    image = image_from_records(records, ETCD.revision, 0, REGISTRY)
    assert image.revision == 9
    assert image.auth.enabled and image.auth.revision == 3
    lease = image.leases.get(LEASE)
    assert lease is not None and lease.ttl_s == 600
    assert lease.deadline_ms == NOW_MS + 300_000  # the time it had left

    out = to_etcd_image(image, NOW_MS)
    assert _live(out) == _live(ETCD)
    assert len(out.keys) == len(out.live_keys()), "the current revision of each key only"
    # one revision's keys get sub-revisions 0, 1, ... (in key order)
    assert [(r.main, r.sub, r.key) for r in out.keys if r.main == 9] == [
        (9, 0, b"t0"),
        (9, 1, b"t1"),
    ]
    assert out.revision == 9
    assert out.finished_compact_revision == out.scheduled_compact_revision == 9
    assert out.consistent_index == 9
    assert out.leases == (Lease(LEASE, 600, 300),)
    assert out.users == ETCD.users and out.roles == ETCD.roles
    assert out.auth_enabled and out.auth_revision == 3
    assert out.cluster_version == "3.4.0"

    data = etcd_snapshot_bytes(image)
    assert split_snapshot_hash(data)[1]
    back = read_etcd_snapshot(data)
    assert _live(back) == _live(ETCD) and back.revision == 9
    assert (back.users, back.roles, back.auth_enabled) == (ETCD.users, ETCD.roles, True)


def test_an_empty_image_is_an_empty_etcd_backend() -> None:
    image = image_from_records([], 0, 0, REGISTRY)
    out = read_etcd_snapshot(etcd_snapshot_bytes(image))
    assert out.keys == () and out.revision == 0 and not out.auth_enabled
    # nothing but the store's revision counter, at an empty etcd store's revision
    assert from_etcd_image(out) == [("revision", b"store", StoreRevision(1).to_record())]
    assert from_etcd_image(out, offset_revisions=True) == []


def test_users_from_etcd_log_in_with_their_etcd_passwords() -> None:
    """etcd's bcrypt hashes (both users' password is "pw") verify; scrypt ones as before."""
    root = ETCD.users[0].password
    assert check_password(root, "pw") and not check_password(root, "PW")
    assert not check_password(b"$2a$10$not-a-hash", "pw")
    assert check_password(hash_password("x", cost=4), "x")


def test_the_reused_kv_record_encodes_each_key_as_a_new_message_would() -> None:
    """One KvRecord filled key after key: a field that goes back to zero or empty is left
    out again, as a fresh message leaves it out."""
    from nameserver.etcd_seed_records import kv_record_encoder
    from protos import records_pb2
    from protos.etcdserverpb import kv_pb2

    encode = kv_record_encoder()
    fields = [
        dict(key=b"a", value=b"v" * 300, create_revision=2**40, mod_revision=7, version=3, lease=9),
        dict(key=b"b"),
        dict(key=b"c", value=b"x", lease=-1, version=2**63 - 1),
        dict(key=b"d", create_revision=1),
    ]
    for f in fields:
        expected = records_pb2.KvRecord(**f).SerializeToString()  # type: ignore[arg-type]
        assert encode(kv_pb2.KeyValue(**f)) == expected  # type: ignore[arg-type]
