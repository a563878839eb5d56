"""Seeding a new data dir from an etcd 3.4 snapshot (``metaledger snapshot restore
--from-etcd``): the records of a new image at the etcd snapshot's revision
(:mod:`nameserver.etcd_snapshot` says what is carried), written as metaledger's snapshot.

This is a command's whole run, so its imports are few: no state machine, no :mod:`raftlog`,
no gRPC. With a second CPU to spare and a large file, the ``key`` bucket is read and its
records framed in two processes (:mod:`nameserver.etcd_seed_split`); otherwise in one.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import mmap
import operator
import os
import shutil
import time
from collections.abc import Callable, Iterable
from typing import cast

from nameserver.auth.records import AuthState
from nameserver.auth.records import Permission as AuthPermission
from nameserver.auth.records import Role as AuthRole
from nameserver.auth.records import User as AuthUser
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
from nameserver.state.seeding import check_new_data_dir, seed_data_dir_from_records
from protos import records_pb2
from protos.etcdserverpb.kv_pb2 import KeyValue
from snapshots import SnapshotMeta, etcdfmt

Record = tuple[str, bytes, bytes]

#: the cluster id written into a snapshot seeded from etcd (etcd's backend holds none)
SEEDED_CLUSTER_ID = "0" * 16

#: from this many key records on (and with a second CPU to spare, see _spare_cpu, in the
#: compiled build), two processes read the key bucket and frame its records, each half of
#: the bucket's pages (:mod:`nameserver.etcd_seed_split`)
SPLIT_RECORDS = 100_000


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


def seed_from_etcd(
    etcd_file: str,
    data_dir: str,
    progress: Callable[[str], None] | None = None,
    offset_revisions: bool = False,
) -> Seeded:
    """Seed a new, empty data dir from an etcd 3.4 snapshot (or ``member/snap/db``) file, as
    ``metaledger snapshot restore`` seeds one from metaledger's own snapshot.

    The file is read and checked whole before anything is written (``EtcdFormatError``: one
    line naming what is wrong and where; ``OSError``; ``SnapshotError`` for a data dir in
    use); a failure while writing removes what it wrote (the data dir too, if it was new).
    ``progress`` gets a line per stage and, while writing, about one a second. The image
    counts revisions etcd's way from the start unless ``offset_revisions``
    (:mod:`nameserver.etcd_snapshot`'s module doc)."""
    # a million records that form no cycles: the collector would rescan them over and over
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _seed(etcd_file, data_dir, progress or (lambda _line: None), offset_revisions)
    finally:
        if was_enabled:
            gc.enable()


def _seed(
    etcd_file: str, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded:
    check_new_data_dir(data_dir)
    data = _map(etcd_file)
    say(f"read {len(data)} bytes from {etcd_file}; checking etcd's layout")
    made = [
        p
        for p in (data_dir, *(os.path.join(data_dir, d) for d in ("snap", "raft")))
        if not os.path.exists(p)
    ]
    try:
        split = _split_pays()
        seeded = _seed_split(data, data_dir, say, offset_revisions) if split else None
        if seeded is None:
            seeded = _seed_one(data, data_dir, say, offset_revisions)
    except BaseException:
        for path in made:  # what this call made goes again (a data dir it made, whole)
            shutil.rmtree(path, ignore_errors=True)
        raise
    say(f"seeded {data_dir}")
    return seeded


def _map(path: str) -> bytes:
    """The file's bytes, mapped (not copied: a large file is read in place, page by page,
    and a forked child shares the pages); an empty file as ``b""``. A map reads as the
    readers here read bytes (``len``, slices, the buffer)."""
    with open(path, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            return b""
        return cast(bytes, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _seed_one(
    data: bytes, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded:
    """Read the file and write the snapshot in this process."""
    etcd, latest, revision = etcdfmt.read_etcd_latest_kv(data, kv_record_encoder())
    del data
    others = other_records(etcd, revision, None, offset_revisions)
    seeded = Seeded.of(etcd, revision, live_count(latest))
    say_counts(say, seeded)
    total = seeded.keys + len(others)
    records = itertools.chain(live_records(latest), others)
    meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=revision, last_term=0)
    seed_data_dir_from_records(data_dir, meta, records, progress_of(say, total))
    return seeded


def _seed_split(
    data: bytes, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded | None:
    """:func:`_seed_one` in two processes, or None where the file is not read that way (too
    few keys, or not a file that way takes whole: the one-process way names its fault)."""
    from nameserver import etcd_seed_split

    return etcd_seed_split.seed(data, data_dir, say, SPLIT_RECORDS, offset_revisions)


def _split_pays() -> bool:
    """Whether to read and frame in two processes: the compiled build (the page scan's
    methods as Python would cost more than the second CPU gives), a fork, and a second CPU
    to spare."""
    return etcdfmt.LATEST_SCAN and hasattr(os, "fork") and _spare_cpu()


def _spare_cpu() -> bool:
    """Whether a second CPU is there for the child: more than one CPU to run on, and a load
    average (the last minute's) below twice their count. The two processes spend about 12 %
    more CPU than one (the parent's look at the child's keys, the fork, the child's frames
    handed over), and still seed faster on a busy machine: 1M keys on 2 CPUs at load 2.2-2.9,
    1.95-2.96 s wall against 2.96-3.65 s in one process; past twice the CPUs the second
    process's CPU is only taken from someone else's."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not cpus or cpus < 2:
        return False
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average: assume the CPUs are free
        return True
    return load < 2 * cpus
