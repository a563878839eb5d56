"""snapshots.etcdfmt reads files a real etcd 3.4.23 wrote (``etcdctl snapshot save``).

``data/etcd-3.4.23-snapshot.db``: puts a=1, a=2, b=x, c=y (revisions 2 to 5), del c (6), a
600 s lease with l1=v and l2=v attached (7, 8), d=z (9), compact 4, role r1 granted
readwrite [/p, /q), user u1 (password pw) with r1, e=last (10); auth left off. The expected
values are what ``etcdctl get "" --prefix -w json``, ``lease timetolive --keys`` and ``member
list`` printed then. ``data/etcd-3.4.23-auth-snapshot.db``: put a=1, user root (pw) with
role root, user np added with ``--no-password``, auth enable, put b=2.
``data/etcd-3.4.23-members-snapshot.db``: no key written; learner 4c7f1f891ac79d8e added and
removed, learner l2 added (never started).
"""

from __future__ import annotations

from pathlib import Path

from snapshots.etcdfmt import (
    Permission,
    Role,
    image_to_buckets,
    read_bolt,
    read_etcd_snapshot,
    snapshot_status,
    split_snapshot_hash,
)

DATA = Path(__file__).parent / "data"
LEASE = 4111120465957601035


def test_every_key_lease_member_user_and_role_of_a_real_snapshot() -> None:
    image = read_etcd_snapshot((DATA / "etcd-3.4.23-snapshot.db").read_bytes())
    live = {
        k: (r.value, r.create_revision, r.mod_revision, r.version, r.lease)
        for k, r in image.live_keys().items()
    }
    assert live == {
        b"a": (b"2", 2, 3, 2, 0),
        b"b": (b"x", 4, 4, 1, 0),
        b"d": (b"z", 9, 9, 1, 0),
        b"e": (b"last", 10, 10, 1, 0),
        b"l1": (b"v", 7, 7, 1, LEASE),
        b"l2": (b"v", 8, 8, 1, LEASE),
    }
    assert [(r.main, r.key, r.tombstone) for r in image.keys if r.key == b"c"] == [
        (5, b"c", False),
        (6, b"c", True),
    ]
    assert min(r.main for r in image.keys) == 3  # a=1 at revision 2 went with the compaction
    assert image.revision == 10
    assert (image.scheduled_compact_revision, image.finished_compact_revision) == (4, 4)
    assert image.consistent_index == 19
    assert [(le.id, le.ttl, le.remaining_ttl) for le in image.leases] == [(LEASE, 600, 0)]
    assert [(m.id, m.name, m.peer_urls, m.client_urls, m.is_learner) for m in image.members] == [
        (
            13668033151171901709,
            "n1",
            ("http://127.0.0.1:23801",),
            ("http://127.0.0.1:23791",),
            False,
        )
    ]
    assert image.removed_member_ids == ()
    assert image.cluster_version == "3.4.0"
    assert (image.auth_enabled, image.auth_revision) == (False, 5)
    assert [(u.name, u.roles, u.no_password) for u in image.users] == [(b"u1", ("r1",), False)]
    assert image.users[0].password.startswith(b"$2a$10$")
    assert image.roles == (Role(b"r1", (Permission(2, b"/p", b"/q"),)),)


def test_a_real_snapshot_with_auth_on() -> None:
    image = read_etcd_snapshot((DATA / "etcd-3.4.23-auth-snapshot.db").read_bytes())
    assert {k: r.value for k, r in image.live_keys().items()} == {b"a": b"1", b"b": b"2"}
    assert (image.auth_enabled, image.auth_revision) == (True, 4)
    assert [(u.name, u.roles, u.no_password, bool(u.password)) for u in image.users] == [
        (b"np", (), True, False),
        (b"root", ("root",), False, True),
    ]
    assert image.roles == ()  # etcd keeps no record of the root role
    assert image.scheduled_compact_revision is image.finished_compact_revision is None


def test_a_real_snapshot_with_a_learner_and_a_removed_member() -> None:
    data = (DATA / "etcd-3.4.23-members-snapshot.db").read_bytes()
    image = read_etcd_snapshot(data)
    assert [(m.id, m.name, m.peer_urls, m.client_urls, m.is_learner) for m in image.members] == [
        (7360570561052700287, "", ("http://127.0.0.1:23824",), (), True),
        (
            15620605431212779891,
            "n1",
            ("http://127.0.0.1:23804",),
            ("http://127.0.0.1:23794",),
            False,
        ),
    ]
    assert image.removed_member_ids == (0x4C7F1F891AC79D8E,)
    assert (image.keys, image.consistent_index, image.revision) == ((), 0, 0)
    assert read_bolt(split_snapshot_hash(data)[0])[b"meta"] == {}  # no key, no index saved
    status = snapshot_status(data)
    # etcdctl 3.4.23 snapshot status -w json: hash 3756805271, revision 0, totalKey 5
    assert (status.hash, status.revision, status.total_key) == (3756805271, 0, 5)


def test_writing_what_was_read_gives_back_etcds_buckets_exactly() -> None:
    for name in (
        "etcd-3.4.23-snapshot.db",
        "etcd-3.4.23-auth-snapshot.db",
        "etcd-3.4.23-members-snapshot.db",
    ):
        data = (DATA / name).read_bytes()
        db, trailer = split_snapshot_hash(data)
        assert trailer, name
        assert image_to_buckets(read_etcd_snapshot(data)) == read_bolt(db), name


def test_status_of_a_real_snapshot_is_what_etcdctl_printed() -> None:
    status = snapshot_status((DATA / "etcd-3.4.23-snapshot.db").read_bytes())
    # etcdctl 3.4.23 snapshot status -w json: hash 965291783, revision 10, totalKey 17
    assert (status.hash, status.revision, status.total_key, status.total_size) == (
        965291783,
        10,
        17,
        20480,
    )
