"""A node's image in etcd 3.4's snapshot format, and back (:mod:`snapshots.etcdfmt` does the
bytes; this maps metaledger's records to etcd's backend and etcd's backend to records).

Leaving (``Maintenance.Snapshot``, so ``etcdctl snapshot save``): every key at its current
revision (``key`` bucket: create and mod revisions, version, lease), the leases with their
TTLs and the time they have left, the members, the cluster version, auth (enabled, users
with their password hashes, roles) and the consistent index. The image holds the current
revision of every key, not its past ones: the snapshot says so as etcd says it of a
compacted store, with the compaction revision at the image's revision (a restored etcd
serves the current revision and above, and answers "required revision has been compacted"
below it). Routes, replicator offsets, replica groups, quotas and alarms have no place in
etcd's backend: they travel only in metaledger's own snapshot.

Arriving (``metaledger snapshot restore --from-etcd``): the records of a new image at the
etcd snapshot's revision: every live key (newest version, revisions and version kept), the
leases (TTL and time left), users (password hashes as etcd stored them) and roles, auth on
or off, the compaction revision, and the store's revision counter at the snapshot's revision
(:mod:`nameserver.kv.revision`): the seeded store counts etcd's way from its first entry, so
no entry after it moves the revision unless it changes keys (the members' own records, which
a node writes on its first start, included), as in etcd, whose member records never move it.
``offset_revisions`` leaves the counter out: the store then counts by log offset until a
leader switches it (``serve --offset-revisions``: never). Members are not carried (the new
cluster's members are its own); past revisions in the file are not kept (the new image's
history starts at its revision). :mod:`nameserver.etcd_seed` writes them into a new data dir.
"""

from __future__ import annotations

import itertools
import operator
import time

from nameserver.etcd_seed import seed_from_etcd
from nameserver.etcd_seed_records import SEEDED_CLUSTER_ID, Record, Seeded, other_records
from nameserver.leases.records import Lease as MlLease
from nameserver.state.image import MetadataImage
from protos import records_pb2
from snapshots import etcdfmt

__all__ = [
    "CLUSTER_VERSION",
    "SEEDED_CLUSTER_ID",
    "Seeded",
    "etcd_snapshot_bytes",
    "from_etcd_image",
    "seed_from_etcd",
    "to_etcd_image",
]

#: etcd's cluster version for the API level metaledger speaks (StatusResponse.version)
CLUSTER_VERSION = "3.4.0"


def _keys(image: MetadataImage) -> tuple[etcdfmt.KeyRevision, ...]:
    """Every key's current version as a ``key`` bucket record, sub-revisions numbered in
    key order among the keys one revision changed (one txn's puts share its revision)."""
    by_rev = sorted(image.kv.data.values(), key=lambda kv: (kv.mod_revision, kv.key))
    out = []
    for _, group in itertools.groupby(by_rev, key=lambda kv: kv.mod_revision):
        for sub, kv in enumerate(group):
            out.append(
                etcdfmt.KeyRevision(
                    kv.mod_revision,
                    sub,
                    kv.key,
                    kv.value,
                    kv.create_revision,
                    kv.mod_revision,
                    kv.version,
                    kv.lease,
                )
            )
    return tuple(out)


def _remaining_s(lease: MlLease, now_ms: int) -> int:
    """Whole seconds a lease has left (at least 1: it is alive in the image)."""
    return max(1, min(lease.ttl_s, -(-(lease.deadline_ms - now_ms) // 1000)))


def to_etcd_image(image: MetadataImage, now_ms: int | None = None) -> etcdfmt.EtcdImage:
    """What etcd 3.4's backend would hold for ``image`` (see the module doc)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    revision = image.revision
    leases = tuple(
        etcdfmt.Lease(le.id, le.ttl_s, _remaining_s(le, now))
        for le in sorted(image.leases.leases.values(), key=lambda le: le.id & (2**64 - 1))
    )
    members = tuple(
        sorted(
            (
                etcdfmt.Member(m.member_id, (m.peer_url,), m.id, tuple(m.client_urls))
                for m in image.members.members.values()
            ),
            key=lambda m: f"{m.id:x}",
        )
    )
    auth = image.auth
    users = tuple(
        etcdfmt.User(u.name.encode(), u.password_hash, tuple(u.roles), u.no_password)
        for _, u in sorted(auth.users.items())
    )
    roles = tuple(
        etcdfmt.Role(
            r.name.encode(),
            tuple(etcdfmt.Permission(p.perm_type, p.key, p.range_end) for p in r.permissions),
        )
        for _, r in sorted(auth.roles.items())
    )
    compacted = revision if revision > 0 else None
    return etcdfmt.EtcdImage(
        keys=_keys(image),
        consistent_index=revision,
        scheduled_compact_revision=compacted,
        finished_compact_revision=compacted,
        leases=leases,
        members=members,
        cluster_version=CLUSTER_VERSION,
        auth_enabled=auth.enabled,
        auth_revision=auth.revision,
        users=users,
        roles=roles,
    )


def etcd_snapshot_bytes(image: MetadataImage) -> bytes:
    """``image`` as ``Maintenance.Snapshot`` streams it in etcd's format (database, SHA-256)."""
    return etcdfmt.write_etcd_snapshot(to_etcd_image(image))


def from_etcd_image(
    etcd: etcdfmt.EtcdImage, now_ms: int | None = None, offset_revisions: bool = False
) -> list[Record]:
    """The records of a new image seeded from an etcd 3.4 backend (see the module doc); its
    revision (the snapshot's last offset) is ``etcd.revision``."""
    by_revision = operator.itemgetter(0, 1)  # (main, sub)
    records = etcd.keys
    revisions = list(map(by_revision, records))
    if not all(map(operator.le, revisions, itertools.islice(revisions, 1, None))):
        records = tuple(sorted(records, key=by_revision))  # (a read file is in order)
    del revisions
    latest = {r[2]: r for r in records}  # r.key: the newest record of each key wins
    kv_record = records_pb2.KvRecord
    out: list[Record] = [
        (
            "kv",
            key,
            kv_record(
                key=key,
                value=value,
                create_revision=create,
                mod_revision=mod,
                version=version,
                lease=lease,
            ).SerializeToString(),
        )
        # a KeyRevision unpacked whole (cheaper than its fields one by one)
        for key, (_, _, _, value, create, mod, version, lease, tombstone) in latest.items()
        if not tombstone
    ]
    return out + other_records(etcd, etcd.revision, now_ms, offset_revisions)
