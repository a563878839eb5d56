"""Properties of snapshots.etcdfmt: bucket trees and etcd images round trip through bbolt
files, and damaged files raise only the package's own error."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.etcdserverpb import kv_pb2
from snapshots.etcdfmt import (
    EtcdFormatError,
    EtcdImage,
    KeyRevision,
    Lease,
    Member,
    Permission,
    Role,
    Tree,
    User,
    read_bolt,
    read_etcd_latest,
    read_etcd_snapshot,
    snapshot_status,
    write_bolt,
    write_etcd_db,
    write_etcd_snapshot,
)

_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# values up to a few pages, so leaves split, branches form and single elements overflow
_big = st.builds(
    lambda pattern, times: pattern * times,
    st.binary(min_size=1, max_size=3),
    st.integers(300, 4000),
)
_values = st.one_of(st.binary(max_size=40), _big)
_trees: st.SearchStrategy[Tree] = st.recursive(
    st.dictionaries(st.binary(min_size=1, max_size=30), _values, max_size=60),
    lambda inner: st.dictionaries(
        st.binary(min_size=1, max_size=30), st.one_of(_values, inner), max_size=8
    ),
    max_leaves=100,
)
_databases = st.dictionaries(st.binary(min_size=1, max_size=20), _trees, max_size=6)


@_settings
@given(_databases)
def test_any_bucket_tree_round_trips_through_a_bbolt_file(tree: Tree) -> None:
    assert read_bolt(write_bolt(tree)) == tree


@_settings
@given(st.integers(min_value=1, max_value=3000), st.integers(min_value=0, max_value=2**16))
def test_many_small_keys_round_trip(n: int, seed: int) -> None:
    tree: Tree = {
        b"key": {seed.to_bytes(4, "big") + i.to_bytes(4, "big"): b"v" * (i % 97) for i in range(n)}
    }
    assert read_bolt(write_bolt(tree)) == tree


_i63 = st.integers(min_value=0, max_value=2**63 - 1)
_small = st.integers(min_value=0, max_value=2**40)
_text = st.text(max_size=20)


@st.composite
def _images(draw: st.DrawFn) -> EtcdImage:
    revs = sorted(draw(st.sets(st.tuples(st.integers(1, 2**40), st.integers(0, 5)), max_size=80)))
    keys = []
    for main, sub in revs:
        key = draw(st.binary(min_size=1, max_size=24))
        if draw(st.booleans()) and draw(st.booleans()):
            keys.append(KeyRevision(main, sub, key, tombstone=True))
        else:
            value = draw(st.binary(max_size=300))
            create, version, lease = draw(_small), draw(_small), draw(_small)
            keys.append(KeyRevision(main, sub, key, value, create, main, version, lease))
    leases = tuple(
        Lease(i, draw(_small), draw(_small)) for i in sorted(draw(st.sets(st.integers(1, 2**62))))
    )
    member_ids = sorted(
        draw(st.sets(st.integers(1, 2**64 - 1), max_size=5)), key=lambda i: f"{i:x}"
    )
    members = tuple(
        Member(
            i,
            tuple(draw(st.lists(_text, max_size=3))),
            draw(_text),
            tuple(draw(st.lists(_text, max_size=2))),
        )
        for i in member_ids
    )
    removed = tuple(
        sorted(draw(st.sets(st.integers(1, 2**64 - 1), max_size=3)), key=lambda i: f"{i:x}")
    )
    users = tuple(
        User(
            name,
            draw(st.binary(max_size=60)),
            tuple(draw(st.lists(_text, max_size=3))),
            draw(st.booleans()),
        )
        for name in sorted(draw(st.sets(st.binary(min_size=1, max_size=16), max_size=4)))
    )
    perms = st.builds(Permission, st.integers(0, 2), st.binary(max_size=10), st.binary(max_size=10))
    roles = tuple(
        Role(name, tuple(draw(st.lists(perms, max_size=3))))
        for name in sorted(draw(st.sets(st.binary(min_size=1, max_size=16), max_size=4)))
    )
    return EtcdImage(
        keys=tuple(keys),
        consistent_index=draw(_i63),
        scheduled_compact_revision=draw(st.none() | _small),
        finished_compact_revision=draw(st.none() | _small),
        leases=leases,
        members=members,
        removed_member_ids=removed,
        cluster_version=draw(st.none() | _text),
        auth_enabled=draw(st.booleans()),
        auth_revision=draw(_i63),
        users=users,
        roles=roles,
    )


@_settings
@given(_images())
def test_any_etcd_image_round_trips_through_a_snapshot(image: EtcdImage) -> None:
    snap = write_etcd_snapshot(image)
    assert read_etcd_snapshot(snap) == image
    status = snapshot_status(snap)
    assert status.revision == max((k.main for k in image.keys), default=0)
    assert status.total_size == len(snap) - 32


@_settings
@given(_images(), st.data())
def test_damage_raises_only_the_packages_error(image: EtcdImage, data: st.DataObject) -> None:
    db = bytearray(write_etcd_db(image))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(db) - 1))
        db[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(db)))
    try:
        read_etcd_snapshot(bytes(db[:cut]) if data.draw(st.booleans()) else bytes(db))
    except EtcdFormatError as e:
        assert "\n" not in str(e)


def _latest_outcome(data: bytes) -> object:
    try:
        image, latest, revision = read_etcd_latest(data, kv_pb2.KeyValue.SerializeToString)
    except EtcdFormatError as e:
        return str(e)
    return image, [(k, v) for k, v in latest.items() if v is not None], revision


def _full_outcome(data: bytes) -> object:
    """What read_etcd_latest must give, from read_etcd_snapshot's whole image."""
    try:
        image = read_etcd_snapshot(data)
    except EtcdFormatError as e:
        return str(e)
    latest: dict[bytes, KeyRevision] = {}
    for r in sorted(image.keys, key=lambda r: (r.main, r.sub)):
        latest[r.key] = r
    live = [
        (
            k,
            kv_pb2.KeyValue(
                key=k,
                value=r.value,
                create_revision=r.create_revision,
                mod_revision=r.mod_revision,
                version=r.version,
                lease=r.lease,
            ).SerializeToString(),
        )
        for k, r in latest.items()
        if not r.tombstone
    ]
    return dataclasses.replace(image, keys=()), live, image.revision


@_settings
@given(_images(), st.data())
def test_the_newest_records_read_as_the_whole_image_has_them(
    image: EtcdImage, data: st.DataObject
) -> None:
    """read_etcd_latest (seeding) against read_etcd_snapshot: the same image without its
    keys, every live key's newest record in the same order, the same revision; on a damaged
    file the same error."""
    db = bytearray(write_etcd_db(image))
    assert _latest_outcome(bytes(db)) == _full_outcome(bytes(db))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(db) - 1))
        db[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(db)))
    damaged = bytes(db[:cut]) if data.draw(st.booleans()) else bytes(db)
    assert _latest_outcome(damaged) == _full_outcome(damaged)
