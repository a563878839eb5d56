"""The pieces of seeding from an etcd 3.4 snapshot that one process and two share
(:mod:`nameserver.etcd_seed`, :mod:`nameserver.etcd_seed_split`): what a seeding wrote, the
records after the keys', the live keys of a newest-record dict, the progress lines.

Imported by a command's whole run: no state machine, no :mod:`raftlog`, no gRPC.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import time
from collections.abc import Callable, Iterable
from typing import cast

from nameserver.kv.records import (
    COMPACT_KEY,
    REVISION,
    REVISION_FLOOR,
    REVISION_KEY,
    Compaction,
    StoreRevision,
)
from nameserver.leases.records import Lease as MlLease
from nameserver.leases.records import lease_key
from protos import records_pb2
from protos.etcdserverpb.kv_pb2 import KeyValue
from snapshots import etcdfmt

Record = tuple[str, bytes, bytes]

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

    @staticmethod
    def of(etcd: etcdfmt.EtcdImage, revision: int, keys: int) -> Seeded:
        return Seeded(
            revision, keys, len(etcd.leases), len(etcd.users), len(etcd.roles), etcd.auth_enabled
        )


def kv_record_encoder() -> Callable[[KeyValue], bytes]:
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


def other_records(
    etcd: etcdfmt.EtcdImage, revision: int, now_ms: int | None, offset_revisions: bool = False
) -> list[Record]:
    """The records after the keys': the store's revision counter (unless
    ``offset_revisions``), the compaction, leases, users, roles and auth state."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[Record] = []
    if not offset_revisions:
        # etcd's store revision, and 1 at the least (an empty etcd store's): the store counts
        # etcd's way from the image on, whatever entries come before its first key change
        counter = StoreRevision(max(revision, REVISION_FLOOR))
        out.append((REVISION, REVISION_KEY, counter.to_record()))
    if etcd.finished_compact_revision:
        out.append(("mvcc", COMPACT_KEY, Compaction(etcd.finished_compact_revision).to_record()))
    for le in etcd.leases:
        left = le.remaining_ttl if 0 < le.remaining_ttl <= le.ttl else le.ttl
        lease = MlLease(le.id, le.ttl, revision, now - (le.ttl - left) * 1000)
        out.append(("lease", lease_key(le.id), lease.to_record()))
    if etcd.users or etcd.roles or etcd.auth_enabled or etcd.auth_revision:
        out += _auth_records(etcd)
    return out


def _auth_records(etcd: etcdfmt.EtcdImage) -> list[Record]:
    """The users', roles' and auth state's records (imported here: most files have none)."""
    from nameserver.auth.records import AuthState
    from nameserver.auth.records import Permission as AuthPermission
    from nameserver.auth.records import Role as AuthRole
    from nameserver.auth.records import User as AuthUser

    out: list[Record] = []
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


def live_records(latest: dict[bytes, bytes | None]) -> Iterable[Record]:
    """``("kv", key, value)`` of every key of ``latest`` that is not a tombstone (None), in
    its order: made as the writer takes them (no list of a million tuples)."""
    values = latest.values()
    live = itertools.compress(
        zip(itertools.repeat("kv"), latest.keys(), values),
        map(operator.is_not, values, itertools.repeat(None)),
    )
    return cast(Iterable[Record], live)


def live_count(latest: dict[bytes, bytes | None]) -> int:
    """How many keys of ``latest`` are not tombstones."""
    return len(latest) - operator.countOf(latest.values(), None)


def progress_of(say: Callable[[str], None], total: int) -> Callable[[int], None]:
    """The writer's progress (records written so far) as a line about once a second."""
    last = [time.monotonic(), 0]  # when the last line was said, and its count

    def written(n: int) -> None:
        now = time.monotonic()
        if n != last[1] and (now - last[0] >= 1.0 or n == total):
            last[0], last[1] = now, n
            say(f"wrote {n}/{total} records")

    return written


def say_counts(say: Callable[[str], None], seeded: Seeded) -> None:
    say(
        f"revision {seeded.revision}: {seeded.keys} keys, {seeded.leases} leases, "
        f"{seeded.users} users, {seeded.roles} roles; writing the snapshot"
    )
