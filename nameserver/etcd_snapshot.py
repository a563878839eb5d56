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
or off, the compaction revision. Members are not carried (the new cluster's members are its
own); past revisions in the file are not kept (the new image's history starts at its
revision).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from nameserver.auth.records import AuthState
from nameserver.auth.records import Permission as AuthPermission
from nameserver.auth.records import Role as AuthRole
from nameserver.auth.records import User as AuthUser
from nameserver.kv.records import COMPACT_KEY, Compaction
from nameserver.leases.records import Lease as MlLease
from nameserver.leases.records import lease_key
from nameserver.state.image import MetadataImage
from nameserver.state.snapshotting import check_new_data_dir, seed_data_dir_from_records
from protos import records_pb2
from protos.etcdserverpb.kv_pb2 import KeyValue
from raftlog.log import gc_paused
from snapshots import SnapshotMeta, etcdfmt

#: etcd's cluster version for the API level metaledger speaks (StatusResponse.version)
CLUSTER_VERSION = "3.4.0"

Record = tuple[str, bytes, bytes]


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


def from_etcd_image(etcd: etcdfmt.EtcdImage, now_ms: int | None = None) -> list[Record]:
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
    return out + _other_records(etcd, etcd.revision, now_ms)


def _kv_record_encoder() -> Callable[[KeyValue], bytes]:
    """A function turning an mvccpb.KeyValue into the value of a ``kv`` record. It fills one
    KvRecord over and over (every field each time; cheaper than a new message per key), so
    each function is for one thread."""
    record = records_pb2.KvRecord()

    def encode(kv: KeyValue) -> bytes:
        record.key = kv.key
        record.value = kv.value
        record.create_revision = kv.create_revision
        record.mod_revision = kv.mod_revision
        record.version = kv.version
        record.lease = kv.lease
        return record.SerializeToString()

    return encode


def _other_records(etcd: etcdfmt.EtcdImage, revision: int, now_ms: int | None) -> list[Record]:
    """The records after the keys': the compaction, leases, users, roles and auth state."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[Record] = []
    if etcd.finished_compact_revision:
        out.append(("mvcc", COMPACT_KEY, Compaction(etcd.finished_compact_revision).to_record()))
    for le in etcd.leases:
        left = le.remaining_ttl if 0 < le.remaining_ttl <= le.ttl else le.ttl
        lease = MlLease(le.id, le.ttl, revision, now - (le.ttl - left) * 1000)
        out.append(("lease", lease_key(le.id), lease.to_record()))
    for u in etcd.users:
        user = AuthUser(u.name.decode(), u.password, tuple(u.roles), u.no_password)
        out.append(("auth", user.key, user.to_record()))
    for etcd_role in etcd.roles:
        perms = tuple(
            AuthPermission(p.perm_type, p.key, p.range_end) for p in etcd_role.permissions
        )
        role = AuthRole(etcd_role.name.decode(), perms)
        out.append(("auth", role.key, role.to_record()))
    if etcd.auth_enabled or etcd.auth_revision:
        state = AuthState(etcd.auth_enabled, etcd.auth_revision)
        out.append(("auth", state.key, state.to_record()))
    return out


#: the cluster id written into a snapshot seeded from etcd (etcd's backend holds none)
SEEDED_CLUSTER_ID = "0" * 16


@dataclasses.dataclass(frozen=True)
class Seeded:
    """What ``seed_from_etcd`` wrote: the revision (the snapshot's last offset) and counts."""

    revision: int
    keys: int
    leases: int
    users: int
    roles: int
    auth_enabled: bool


def seed_from_etcd(
    etcd_file: str, data_dir: str, progress: Callable[[str], None] | None = None
) -> Seeded:
    """Seed a new, empty data dir from an etcd 3.4 snapshot (or ``member/snap/db``) file, as
    ``metaledger snapshot restore`` seeds one from metaledger's own snapshot.

    The file is read and checked whole before anything is written (``EtcdFormatError``: one
    line naming what is wrong and where; ``OSError``; ``SnapshotError`` for a data dir in
    use); a failure while writing removes what it wrote (the data dir too, if it was new).
    ``progress`` gets a line per stage and, while writing, about one a second."""
    # a million records that form no cycles: the collector would rescan them over and over
    with gc_paused():
        return _seed(etcd_file, data_dir, progress or (lambda _line: None))


def _seed(etcd_file: str, data_dir: str, say: Callable[[str], None]) -> Seeded:
    check_new_data_dir(data_dir)
    data = Path(etcd_file).read_bytes()
    say(f"read {len(data)} bytes from {etcd_file}; checking etcd's layout")
    etcd, latest, revision = etcdfmt.read_etcd_latest_kv(data, _kv_record_encoder())
    del data
    records: list[Record] = [
        ("kv", key, value) for key, value in latest.items() if value is not None
    ]
    keys = len(records)
    del latest
    records += _other_records(etcd, revision, None)
    seeded = Seeded(
        revision,
        keys,
        len(etcd.leases),
        len(etcd.users),
        len(etcd.roles),
        etcd.auth_enabled,
    )
    say(
        f"revision {seeded.revision}: {seeded.keys} keys, {seeded.leases} leases, "
        f"{seeded.users} users, {seeded.roles} roles; writing the snapshot"
    )
    total = len(records)
    last = [time.monotonic()]

    def written(n: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or n == total:
            last[0] = now
            say(f"wrote {n}/{total} records")

    made = [
        p
        for p in (data_dir, *(os.path.join(data_dir, d) for d in ("snap", "raft")))
        if not os.path.exists(p)
    ]
    try:
        meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=revision, last_term=0)
        seed_data_dir_from_records(data_dir, meta, records, written)
    except BaseException:
        for path in made:  # what this call made goes again (a data dir it made, whole)
            shutil.rmtree(path, ignore_errors=True)
        raise
    say(f"seeded {data_dir}")
    return seeded
