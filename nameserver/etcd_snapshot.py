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
history starts at its revision).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import os
import pickle
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn, cast

from nameserver.auth.records import AuthState
from nameserver.auth.records import Permission as AuthPermission
from nameserver.auth.records import Role as AuthRole
from nameserver.auth.records import User as AuthUser
from nameserver.kv.records import COMPACT_KEY, REVISION_KEY, Compaction, StoreRevision
from nameserver.kv.revision import FLOOR, REVISION
from nameserver.leases.records import Lease as MlLease
from nameserver.leases.records import lease_key
from nameserver.state.forked import error_message, exit_child
from nameserver.state.image import MetadataImage
from nameserver.state.snapshotting import (
    check_new_data_dir,
    seed_data_dir_from_frames,
    seed_data_dir_from_records,
)
from protos import records_pb2
from protos.etcdserverpb.kv_pb2 import KeyValue
from raftlog.log import gc_paused
from snapshots import RecordDigest, SnapshotError, SnapshotMeta, encode_frames, etcdfmt

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
    return out + _other_records(etcd, etcd.revision, now_ms, offset_revisions)


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


def _other_records(
    etcd: etcdfmt.EtcdImage, revision: int, now_ms: int | None, offset_revisions: bool
) -> list[Record]:
    """The records after the keys': the store's revision counter (unless
    ``offset_revisions``), the compaction, leases, users, roles and auth state."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[Record] = []
    if not offset_revisions:
        # etcd's store revision, and 1 at the least (an empty etcd store's): the store counts
        # etcd's way from the image on, whatever entries come before its first key change
        counter = StoreRevision(max(revision, FLOOR))
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
    counts revisions etcd's way from the start unless ``offset_revisions`` (module doc)."""
    # a million records that form no cycles: the collector would rescan them over and over
    with gc_paused():
        return _seed(etcd_file, data_dir, progress or (lambda _line: None), offset_revisions)


def _seed(
    etcd_file: str, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded:
    check_new_data_dir(data_dir)
    data = Path(etcd_file).read_bytes()
    say(f"read {len(data)} bytes from {etcd_file}; checking etcd's layout")
    etcd, latest, revision = etcdfmt.read_etcd_latest_kv(data, _kv_record_encoder())
    del data
    others = _other_records(etcd, revision, None, offset_revisions)
    values = latest.values()
    keys = len(latest) - operator.countOf(values, None)  # less the tombstones
    # ("kv", key, value) of every key that is not a tombstone, then the others: made as the
    # writer takes them (no list of a million tuples)
    live = itertools.compress(
        zip(itertools.repeat("kv"), latest.keys(), values),
        map(operator.is_not, values, itertools.repeat(None)),
    )
    records = itertools.chain(cast(Iterable[Record], live), others)
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
    total = keys + len(others)
    last = [time.monotonic(), 0]  # when the last line was said, and its count

    def written(n: int) -> None:
        now = time.monotonic()
        if n != last[1] and (now - last[0] >= 1.0 or n == total):
            last[0], last[1] = now, n
            say(f"wrote {n}/{total} records")

    made = [
        p
        for p in (data_dir, *(os.path.join(data_dir, d) for d in ("snap", "raft")))
        if not os.path.exists(p)
    ]
    try:
        meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=revision, last_term=0)
        if total >= SPLIT_RECORDS and hasattr(os, "fork") and _spare_cpu():
            _write_split(data_dir, meta, list(records), written, say)
        else:
            seed_data_dir_from_records(data_dir, meta, records, written)
    except BaseException:
        for path in made:  # what this call made goes again (a data dir it made, whole)
            shutil.rmtree(path, ignore_errors=True)
        raise
    say(f"seeded {data_dir}")
    return seeded


#: from this many records on (and with a second CPU to spare, see _spare_cpu), a forked
#: child encodes the second half of the snapshot's frames while this process encodes the
#: first: the encoding's wall time halves, its CPU grows by the pages the two processes copy
#: on write (a fork of a large heap costs tens of ms)
SPLIT_RECORDS = 100_000


def _spare_cpu() -> bool:
    """Whether a second CPU is idle enough for the child: more than one CPU to run on, and a
    load average (the last minute's, this process included) half a CPU below their count.
    On a busy machine the child's copied pages cost CPU that the overlap does not give back:
    1M keys on 2 CPUs at load 9, 2.8-2.9 s of CPU and 6.5-8.6 s wall in one process against
    3.3-3.5 s and 8.7-12.3 s in two."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not cpus or cpus < 2:
        return False
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average: assume the CPUs are free
        return True
    return load < cpus - 0.5


def _write_split(
    data_dir: str,
    meta: SnapshotMeta,
    records: list[Record],
    written: Callable[[int], None],
    say: Callable[[str], None],
) -> None:
    """Seed ``data_dir`` with ``records`` (the same file ``seed_data_dir_from_records`` writes
    but for its time stamp), their frames encoded in two halves at once: the second by a
    forked child (the machine's other core) into an unnamed temp file in ``data_dir``."""
    os.makedirs(data_dir, exist_ok=True)
    half = len(records) // 2
    say(f"encoding {len(records)} records in two processes")
    child = _ChildEncoder(meta.last_offset, records, half, data_dir)
    try:
        digest = RecordDigest()
        head = list(encode_frames(meta.last_offset, itertools.islice(records, half), digest))
        tail, tail_digest = child.result()
    finally:
        child.close()
    digest.merge(tail_digest)
    frames = [*head, (tail, len(records))]
    seed_data_dir_from_frames(data_dir, meta.with_digest(digest), frames, digest, written)


class _ChildEncoder:
    """``encode_frames`` of ``records[start:]`` (numbered from ``start`` + 1) in a forked
    child, into an unnamed temp file in ``directory``; :meth:`result` waits for it."""

    def __init__(self, offset: int, records: list[Record], start: int, directory: str) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)
        self._pid = 0
        try:
            read_fd, write_fd = os.pipe()
        except BaseException:
            self._file.close()
            raise
        try:
            pid = os.fork()
        except BaseException:
            for fd in (read_fd, write_fd):
                os.close(fd)
            self._file.close()
            raise
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            os.close(read_fd)
            _encode_in_child(offset, records[start:], start + 1, self._file.fileno(), write_fd)
        os.close(write_fd)
        self._pid = pid
        self._read_fd = read_fd

    def result(self) -> tuple[bytes, RecordDigest]:
        """The child's frames and their digest; SnapshotError if it failed (its error)."""
        with os.fdopen(self._read_fd, "rb") as pipe:
            message = pipe.read()  # until the child exits
        _, status = os.waitpid(self._pid, 0)
        self._pid = 0
        if status != 0 or not message.startswith(b"ok:"):
            why = message.decode(errors="replace") or f"exit {os.waitstatus_to_exitcode(status)}"
            raise SnapshotError(f"encoding records in a child process failed: {why}")
        digest = pickle.loads(message[3:])
        assert isinstance(digest, RecordDigest)
        self._file.seek(0)
        return self._file.read(), digest

    def close(self) -> None:
        """The temp file goes; a child not waited for yet is killed (this one, by its pid)."""
        if self._pid:
            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            os.close(self._read_fd)
            self._pid = 0
        self._file.close()


def _encode_in_child(
    offset: int, records: list[Record], first_sub: int, out_fd: int, message_fd: int
) -> NoReturn:  # pragma: no cover - runs in the child
    """The child's whole life: the frames to ``out_fd``, ``ok:`` and the pickled digest (or
    the error) to ``message_fd``, then ``os._exit`` (no handler of the parent runs twice)."""
    status = 1
    try:
        digest = RecordDigest()
        with open(out_fd, "wb", closefd=False) as out:
            for chunk, _ in encode_frames(offset, records, digest, first_sub):
                out.write(chunk)
        message = b"ok:" + pickle.dumps(digest)
        status = 0
    except BaseException as exc:
        message = error_message(exc)
    exit_child(message_fd, message, status)
