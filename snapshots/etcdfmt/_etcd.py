"""etcd 3.4's backend layout inside a bbolt file, and its snapshot trailer, sans-I/O.

Buckets as etcd 3.4 writes them (``mvcc/kvstore.go``, ``lease/lessor.go``,
``etcdserver/api/membership/store.go``, ``auth/store.go``, ``etcdserver/api/v3alarm``)::

    key              revision bytes -> mvccpb.KeyValue
                     (8-byte big-endian main, b"_", 8-byte big-endian sub, b"t" on a
                     tombstone, whose KeyValue carries the key only)
    meta             consistent_index -> 8-byte big-endian (absent until a key is written);
                     scheduledCompactRev and finishedCompactRev -> revision bytes (sub 0)
    lease            8-byte big-endian lease id -> leasepb.Lease
    alarm            (written empty; alarms are not carried)
    members          member id in hex -> JSON {"id", "peerURLs", "isLearner", "name", "clientURLs"}
                     (isLearner only when true)
    members_removed  member id in hex -> b"removed"
    cluster          clusterVersion -> b"3.4.0"
    auth             authRevision -> 8-byte big-endian; authEnabled -> b"\\x01" (on), b"\\x00"
                     (switched off again), absent (never switched on)
    authUsers        user name -> authpb.User (options always present, as ``user add``
                     writes them; the implicit ``root`` role has no authRoles record)
    authRoles        role name -> authpb.Role

A snapshot as ``Maintenance.Snapshot`` streams it is the database file followed by the
SHA-256 of the database (``etcdctl snapshot restore`` checks it when the length is 32 more
than a multiple of 512).

A little over 500 lines: every bucket's layout both ways, read and written in one module so
the two directions cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple, TypeVar, cast

from google.protobuf.message import DecodeError, Message

from protos.etcdserverpb import auth_pb2, kv_pb2, lease_pb2
from snapshots._crc import crc32c
from snapshots.etcdfmt import _bolt, _kvwire, _leafscan
from snapshots.etcdfmt._bolt import EtcdFormatError, Tree, bolt_size, read_bolt, write_bolt

_U64 = struct.Struct(">Q")
_REV = struct.Struct(">QcQ")
HASH_BYTES = hashlib.sha256().digest_size
BUCKETS = (
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
)
# meta keys that etcd 3.5 and later write; a 3.4 backend has none of them
_NEWER_META = {b"term", b"confState", b"storageVersion"}


class EtcdLayoutError(EtcdFormatError):
    """A valid bbolt file that is not etcd 3.4's layout; names the bucket and key."""

    def __init__(self, message: str, bucket: bytes, key: bytes | None = None) -> None:
        where = f"bucket {bucket.decode(errors='replace')!r}" + (
            f" key {key!r}" if key is not None else ""
        )
        super().__init__(f"etcd layout: {where}: {message}")
        self.bucket = bucket
        self.key = key


class SnapshotHashError(EtcdFormatError):
    """The snapshot's trailing SHA-256 does not match the database before it."""


class KeyRevision(NamedTuple):
    """One record of the ``key`` bucket: a key's value as of revision (main, sub). A named
    tuple: a million of them are made when a large snapshot is read (a frozen dataclass
    cost five times as much to make)."""

    main: int
    sub: int
    key: bytes
    value: bytes = b""
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    lease: int = 0
    tombstone: bool = False


@dataclasses.dataclass(frozen=True)
class Lease:
    id: int
    ttl: int
    remaining_ttl: int = 0


@dataclasses.dataclass(frozen=True)
class Member:
    id: int
    peer_urls: tuple[str, ...]
    name: str = ""
    client_urls: tuple[str, ...] = ()
    is_learner: bool = False


@dataclasses.dataclass(frozen=True)
class Permission:
    perm_type: int  # authpb.Permission.Type: READ 0, WRITE 1, READWRITE 2
    key: bytes
    range_end: bytes = b""


@dataclasses.dataclass(frozen=True)
class User:
    name: bytes
    password: bytes = b""  # bcrypt hash, as etcd stores it
    roles: tuple[str, ...] = ()
    no_password: bool = False


@dataclasses.dataclass(frozen=True)
class Role:
    name: bytes
    permissions: tuple[Permission, ...] = ()


@dataclasses.dataclass(frozen=True)
class EtcdImage:
    """What an etcd 3.4 backend holds; the reader returns every sequence in key order."""

    keys: tuple[KeyRevision, ...] = ()  # by (main, sub)
    consistent_index: int = 0
    scheduled_compact_revision: int | None = None
    finished_compact_revision: int | None = None
    leases: tuple[Lease, ...] = ()  # by id
    members: tuple[Member, ...] = ()  # by id in hex, as the bucket sorts them
    removed_member_ids: tuple[int, ...] = ()  # likewise
    cluster_version: str | None = None
    auth_enabled: bool = False
    auth_revision: int = 0
    users: tuple[User, ...] = ()  # by name
    roles: tuple[Role, ...] = ()  # by name

    @property
    def revision(self) -> int:
        """The store's revision: the newest key record's, or the compaction's if later."""
        newest = max(map(_main, self.keys), default=0)
        return max(
            newest, self.finished_compact_revision or 0, self.scheduled_compact_revision or 0
        )

    def live_keys(self) -> dict[bytes, KeyRevision]:
        """The newest record of every key whose newest record is not a tombstone."""
        latest: dict[bytes, KeyRevision] = {}
        for record in sorted(self.keys, key=_by_revision):
            latest[record.key] = record
        return {k: r for k, r in sorted(latest.items()) if not r.tombstone}


_by_revision = operator.itemgetter(0, 1)  # a KeyRevision's (main, sub)
_main = operator.itemgetter(0)


def revision_bytes(main: int, sub: int, tombstone: bool = False) -> bytes:
    return _REV.pack(main, b"_", sub) + (b"t" if tombstone else b"")


def _parse_revision(raw: bytes) -> tuple[int, int, bool]:
    if (
        len(raw) not in (_REV.size, _REV.size + 1)
        or raw[8:9] != b"_"
        or raw[_REV.size :] not in (b"", b"t")
    ):
        raise EtcdLayoutError(
            "not a revision (8-byte main, '_', 8-byte sub, optional 't')", b"key", raw
        )
    main, _, sub = _REV.unpack_from(raw)
    return main, sub, len(raw) > _REV.size


# -- image -> buckets -> file ----------------------------------------------------------------


def _member_json(m: Member) -> bytes:
    doc: dict[str, object] = {"id": m.id, "peerURLs": list(m.peer_urls)}
    if m.is_learner:
        doc["isLearner"] = True
    if m.name:
        doc["name"] = m.name
    if m.client_urls:
        doc["clientURLs"] = list(m.client_urls)
    return json.dumps(doc, separators=(",", ":")).encode()


def image_to_buckets(image: EtcdImage) -> Tree:
    """The bucket tree etcd 3.4 would hold for ``image``."""
    key: Tree = {}
    for r in image.keys:
        kv = kv_pb2.KeyValue(key=r.key)
        if not r.tombstone:
            kv = kv_pb2.KeyValue(
                key=r.key,
                value=r.value,
                create_revision=r.create_revision,
                mod_revision=r.mod_revision,
                version=r.version,
                lease=r.lease,
            )
        key[revision_bytes(r.main, r.sub, r.tombstone)] = kv.SerializeToString()
    # etcd saves the index with the first change to a key; a backend without one has none
    meta: Tree = {}
    if image.consistent_index:
        meta[b"consistent_index"] = _U64.pack(image.consistent_index)
    if image.scheduled_compact_revision is not None:
        meta[b"scheduledCompactRev"] = revision_bytes(image.scheduled_compact_revision, 0)
    if image.finished_compact_revision is not None:
        meta[b"finishedCompactRev"] = revision_bytes(image.finished_compact_revision, 0)
    lease: Tree = {
        _U64.pack(le.id): lease_pb2.Lease(
            ID=le.id, TTL=le.ttl, RemainingTTL=le.remaining_ttl
        ).SerializeToString()
        for le in image.leases
    }
    cluster: Tree = {}
    if image.cluster_version is not None:
        cluster[b"clusterVersion"] = image.cluster_version.encode()
    users: Tree = {}
    for u in image.users:
        user = auth_pb2.User(name=u.name, password=u.password, roles=list(u.roles))
        user.options.SetInParent()  # etcd 3.4's user add always writes the options
        if u.no_password:
            user.options.no_password = True
        users[u.name] = user.SerializeToString()
    roles: Tree = {
        r.name: auth_pb2.Role(
            name=r.name,
            keyPermission=[
                auth_pb2.Permission(permType=p.perm_type, key=p.key, range_end=p.range_end)  # type: ignore[arg-type]
                for p in r.permissions
            ],
        ).SerializeToString()
        for r in image.roles
    }
    # authEnabled appears once auth is switched on (b"\x00" after it is switched off again)
    auth: Tree = {b"authRevision": _U64.pack(image.auth_revision)}
    if image.auth_enabled:
        auth[b"authEnabled"] = b"\x01"
    return {
        b"key": key,
        b"meta": meta,
        b"lease": lease,
        b"alarm": {},
        b"members": {f"{m.id:x}".encode(): _member_json(m) for m in image.members},
        b"members_removed": {f"{i:x}".encode(): b"removed" for i in image.removed_member_ids},
        b"cluster": cluster,
        b"auth": auth,
        b"authUsers": users,
        b"authRoles": roles,
    }


def write_etcd_db(image: EtcdImage) -> bytes:
    """The bbolt file of ``image`` (no trailer): what etcd keeps as ``member/snap/db``."""
    return write_bolt(image_to_buckets(image))


def write_etcd_snapshot(image: EtcdImage) -> bytes:
    """The snapshot as ``Maintenance.Snapshot`` streams it: the database, then its SHA-256."""
    db = write_etcd_db(image)
    return db + hashlib.sha256(db).digest()


# -- file -> buckets -> image ----------------------------------------------------------------

M = TypeVar("M", bound=Message)


def _proto(factory: Callable[[], M], raw: bytes, bucket: bytes, key: bytes) -> M:
    message = factory()
    try:
        message.ParseFromString(raw)
    except DecodeError as e:
        raise EtcdLayoutError(
            f"value is not a {message.DESCRIPTOR.full_name}: {e}", bucket, key
        ) from None
    return message


def _plain(tree: Tree, bucket: bytes) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for k, v in tree.get(bucket, {}).items():  # type: ignore[union-attr]
        if isinstance(v, dict):
            raise EtcdLayoutError("a nested bucket where etcd keeps a value", bucket, k)
        out[k] = v
    return out


def _u64(raw: bytes, bucket: bytes, key: bytes) -> int:
    if len(raw) != _U64.size:
        raise EtcdLayoutError(f"{len(raw)} bytes where an 8-byte integer belongs", bucket, key)
    return int(_U64.unpack(raw)[0])


def _member(raw: bytes, key: bytes) -> Member:
    try:
        doc = json.loads(raw)
        member = Member(
            id=int(doc["id"]),
            peer_urls=tuple(doc.get("peerURLs") or ()),
            name=doc.get("name", ""),
            client_urls=tuple(doc.get("clientURLs") or ()),
            is_learner=bool(doc.get("isLearner", False)),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise EtcdLayoutError(f"not a member record: {e}", b"members", key) from None
    if f"{member.id:x}".encode() != key:
        raise EtcdLayoutError(f"member id {member.id:x} differs from its key", b"members", key)
    return member


def _key_bucket(bucket: Tree | bytes) -> dict[bytes, bytes]:
    """The ``key`` bucket's records as they are, or ``_plain``'s error (a nested bucket)."""
    if isinstance(bucket, dict) and all(map(bytes.__instancecheck__, bucket.values())):
        return cast(dict[bytes, bytes], bucket)
    return _plain({b"key": bucket}, b"key")  # raises, naming the first nested bucket


def _key_records(bucket: Tree | bytes) -> list[KeyRevision]:
    """The ``key`` bucket's records, in its (revision) order. The hot loop of a large read:
    a well-formed revision and record take the inline path; anything else goes through
    ``_plain``, ``_parse_revision`` and ``_proto``, which name the fault."""
    records = _key_bucket(bucket)
    parse = kv_pb2.KeyValue.FromString
    unpack = _REV.unpack
    rev_size = _REV.size
    out: list[KeyRevision] = []
    append = out.append
    for raw_rev, raw in records.items():
        tombstone = False
        if len(raw_rev) == rev_size and raw_rev[8] == 0x5F:
            main, _, sub = unpack(raw_rev)
        else:
            main, sub, tombstone = _parse_revision(raw_rev)
        try:
            kv = parse(raw)
        except DecodeError:
            kv = _proto(kv_pb2.KeyValue, raw, b"key", raw_rev)  # raises the error
        append(
            KeyRevision(
                main,
                sub,
                kv.key,
                kv.value,
                kv.create_revision,
                kv.mod_revision,
                kv.version,
                kv.lease,
                tombstone,
            )
        )
    return out


def _check_buckets(tree: Tree) -> None:
    for name in tree:
        if name not in BUCKETS:
            raise EtcdLayoutError("not a bucket etcd 3.4 writes", name)
    for name in (b"key", b"meta"):
        if name not in tree:
            raise EtcdLayoutError("missing: not an etcd backend", name)


def buckets_to_image(tree: Tree) -> EtcdImage:
    """Read etcd 3.4's buckets back into an image (raises EtcdLayoutError naming the place)."""
    _check_buckets(tree)
    keys = _key_records(tree.get(b"key", {}))
    meta = _plain(tree, b"meta")
    for k in meta:
        if k in _NEWER_META:
            raise EtcdLayoutError(
                "written by etcd 3.5 or later (this reads etcd 3.4's layout)", b"meta", k
            )
        if k not in (b"consistent_index", b"scheduledCompactRev", b"finishedCompactRev"):
            raise EtcdLayoutError("not a key etcd 3.4 writes", b"meta", k)
    compact = {
        k: _parse_revision(meta[k])[0]
        for k in (b"scheduledCompactRev", b"finishedCompactRev")
        if k in meta
    }
    leases = []
    for k, raw in _plain(tree, b"lease").items():
        le = _proto(lease_pb2.Lease, raw, b"lease", k)
        if _u64(k, b"lease", k) != le.ID & 0xFFFFFFFFFFFFFFFF:
            raise EtcdLayoutError(f"lease id {le.ID} differs from its key", b"lease", k)
        leases.append(Lease(le.ID, le.TTL, le.RemainingTTL))
    removed = []
    for k in _plain(tree, b"members_removed"):
        try:
            removed.append(int(k, 16))
        except ValueError:
            raise EtcdLayoutError("not a member id in hex", b"members_removed", k) from None
    auth = _plain(tree, b"auth")
    users = []
    for k, raw in _plain(tree, b"authUsers").items():
        u = _proto(auth_pb2.User, raw, b"authUsers", k)
        users.append(User(u.name, u.password, tuple(u.roles), u.options.no_password))
    roles = []
    for k, raw in _plain(tree, b"authRoles").items():
        r = _proto(auth_pb2.Role, raw, b"authRoles", k)
        perms = tuple(Permission(p.permType, p.key, p.range_end) for p in r.keyPermission)
        roles.append(Role(r.name, perms))
    version = _plain(tree, b"cluster").get(b"clusterVersion")
    try:
        cluster_version = version.decode() if version is not None else None
    except UnicodeDecodeError:
        raise EtcdLayoutError("not a version string", b"cluster", b"clusterVersion") from None
    return EtcdImage(
        keys=tuple(keys),
        consistent_index=_u64(meta[b"consistent_index"], b"meta", b"consistent_index")
        if b"consistent_index" in meta
        else 0,
        scheduled_compact_revision=compact.get(b"scheduledCompactRev"),
        finished_compact_revision=compact.get(b"finishedCompactRev"),
        leases=tuple(leases),
        members=tuple(_member(raw, k) for k, raw in _plain(tree, b"members").items()),
        removed_member_ids=tuple(removed),
        cluster_version=cluster_version,
        auth_enabled=auth.get(b"authEnabled") == b"\x01",
        auth_revision=_u64(auth[b"authRevision"], b"auth", b"authRevision")
        if b"authRevision" in auth
        else 0,
        users=tuple(users),
        roles=tuple(roles),
    )


def split_snapshot_hash(data: bytes) -> tuple[bytes, bool]:
    """(database, whether a trailer was there); a trailer that does not match raises."""
    db, check = _split_hash_checked_later(data, threaded=False)
    assert isinstance(db, bytes)  # (a view when threaded only)
    check()
    return db, len(db) != len(data)


def _split_hash_checked_later(
    data: bytes, threaded: bool, deferred: bool = False
) -> tuple[bytes | memoryview, Callable[[], None]]:
    """:func:`split_snapshot_hash`'s database, and a function that raises its error if the
    trailer does not match. ``threaded``: the SHA-256 is computed on a thread meanwhile
    (hashlib lets go of the GIL on large inputs: the database is read at the same time);
    the function waits for it. ``deferred``: it is computed by the function, when first
    called, on the caller's thread (in whichever process calls it). Either way the database
    is then a view of ``data`` (``read_bolt`` reads either)."""
    if len(data) % 512 != HASH_BYTES:
        return data, lambda: None
    # threaded or deferred (a seeding's read): the database in place, not a copy of 100s of MB
    db = memoryview(data)[:-HASH_BYTES] if threaded or deferred else data[:-HASH_BYTES]
    digest = data[-HASH_BYTES:]
    got: list[bytes] = []

    def compute() -> None:
        got.append(hashlib.sha256(db).digest())

    thread = threading.Thread(target=compute, name="etcd-snapshot-sha256") if threaded else None
    if thread is not None:
        thread.start()
    elif not deferred:
        compute()

    def check() -> None:
        if thread is not None:
            thread.join()
        elif not got:
            compute()
        if got != [digest]:
            raise SnapshotHashError(
                f"snapshot: the trailing SHA-256 (at byte {len(db)}) does not match the database"
            )

    return db, check


def read_etcd_snapshot(data: bytes) -> EtcdImage:
    """An etcd 3.4 snapshot (with its SHA-256 trailer) or ``db`` file, read into an image."""
    db, _ = split_snapshot_hash(data)
    return buckets_to_image(read_bolt(db))


T = TypeVar("T")


def _latest_key_values(
    bucket: Tree | bytes, convert: Callable[[kv_pb2.KeyValue], T]
) -> tuple[dict[bytes, T | None], int]:
    """:func:`_key_records` for a bucket in its file's (revision) order, keeping only each
    key's newest record: {key: ``convert`` of its mvccpb.KeyValue, or None for a tombstone},
    in the order the keys first appear, and the newest revision's main part. Faults raise as
    there (``convert`` is called on every record that is not a tombstone)."""
    records = _key_bucket(bucket)
    parse = kv_pb2.KeyValue.FromString
    unpack = _REV.unpack
    rev_size = _REV.size
    latest: dict[bytes, T | None] = {}
    newest = 0
    for raw_rev, raw in records.items():
        tombstone = False
        if len(raw_rev) == rev_size and raw_rev[8] == 0x5F:
            main = unpack(raw_rev)[0]
        else:
            main, _, tombstone = _parse_revision(raw_rev)
        try:
            kv = parse(raw)
        except DecodeError:
            kv = _proto(kv_pb2.KeyValue, raw, b"key", raw_rev)  # raises the error
        latest[kv.key] = None if tombstone else convert(kv)
        if main > newest:
            newest = main
    return latest, newest


def read_etcd_latest(
    data: bytes, convert: Callable[[kv_pb2.KeyValue], T]
) -> tuple[EtcdImage, dict[bytes, T | None], int]:
    """:func:`read_etcd_snapshot` for a reader that wants only every key's newest record
    (seeding a new image): the image without its ``keys``; ``convert`` of each key's newest
    mvccpb.KeyValue by key, None where that is a tombstone, in the order of their first
    records (``convert`` turns each record into what the reader keeps, as it is read: a
    million parsed messages would take a few hundred MB); and the revision the image with
    its keys has. The same checks, in the same order, the same errors."""
    return _read_latest(data, lambda bucket: _latest_key_values(bucket, convert))


#: the hand mapping pays compiled only: about 0.4 us a record against protobuf's parse and
#: KvRecord's serialization, 1.3 us; as Python 2.5 us (the Python build reads with protobuf)
KVWIRE_COMPILED = not (_kvwire.__file__ or "").endswith(".py")


def read_etcd_latest_kv(
    data: bytes, convert: Callable[[kv_pb2.KeyValue], bytes]
) -> tuple[EtcdImage, dict[bytes, bytes | None], int]:
    """:func:`read_etcd_latest` for ``convert`` giving a record's ``KvRecord`` bytes (as
    protobuf serializes them): in the compiled build records in the form etcd writes are
    mapped by hand (:mod:`._kvwire`, no message made), the others through ``convert``, and
    the ``key`` bucket's leaf pages are mapped as they are read (:class:`._leafscan.LatestScan`,
    no bucket dict in between); a file that this one pass does not take whole (a fault, a
    nested bucket) is read again the usual way, which names the fault as it always has."""
    if not KVWIRE_COMPILED:
        return read_etcd_latest(data, convert)
    slow = key_record_slow(convert)
    if LATEST_SCAN:
        try:
            return _read_latest_scanned(data, slow)
        except Exception:  # read again the usual way: the same checks and errors, in order
            pass
    return _read_latest(data, lambda bucket: _kvwire.latest_kv_records(_key_bucket(bucket), slow))


def key_record_slow(
    convert: Callable[[kv_pb2.KeyValue], bytes],
) -> Callable[[bytes, bytes], tuple[bytes, bytes | None, int]]:
    """The ``slow`` of :class:`._leafscan.LatestScan` and :func:`._kvwire.latest_kv_records`:
    a ``key`` bucket record (revision bytes, ``mvccpb.KeyValue`` bytes) through protobuf, to
    (its key, ``convert`` of it or None for a tombstone, its revision's main part); raises
    EtcdLayoutError naming a record that does not parse."""

    def slow(raw_rev: bytes, raw: bytes) -> tuple[bytes, bytes | None, int]:
        main, _, tombstone = _parse_revision(raw_rev)
        kv = _proto(kv_pb2.KeyValue, raw, b"key", raw_rev)
        return kv.key, None if tombstone else convert(kv), main

    return slow


def read_etcd_key_pages(
    data: bytes, *, hash_when_checked: bool = False
) -> tuple[EtcdImage, list[tuple[memoryview, int]], Callable[[], None]]:
    """For a reader that reads the ``key`` bucket's leaf pages itself (a seeding in two
    processes, each a run of the pages through :class:`._leafscan.LatestScan`): the image
    without its keys; the bucket's leaf pages in its order, as (a view of the page, its
    element count), checked as bbolt checks pages (in range, each read once) but their
    elements not read; and a function that raises SnapshotHashError if the trailing SHA-256
    does not match (computed on a thread meanwhile: call it before writing anything; with
    ``hash_when_checked``, computed by its first call instead, e.g. in a forked child that
    has a CPU to spare). Raises on any other fault, not always the one
    :func:`read_etcd_latest_kv` names: such a reader reads the file that way then."""
    db, check_hash = _split_hash_checked_later(
        data, threaded=not hash_when_checked, deferred=hash_when_checked
    )
    pages: list[tuple[memoryview, int]] = []
    try:
        tree = read_bolt(db, key_pages=pages)
        _check_buckets(tree)
        image = buckets_to_image(tree)  # its key bucket read empty
    except Exception:
        check_hash()
        raise
    return image, pages, check_hash


#: the one pass over the key bucket's pages pays compiled only (as the leaf loop does)
LATEST_SCAN = _bolt._LEAFSCAN_COMPILED


def _read_latest_scanned(
    data: bytes, slow: Callable[[bytes, bytes], tuple[bytes, bytes | None, int]]
) -> tuple[EtcdImage, dict[bytes, bytes | None], int]:
    """:func:`_read_latest` of :func:`_kvwire.latest_kv_records` with the ``key`` bucket's
    leaf pages taken by :class:`._leafscan.LatestScan` as they are read; raises on any fault
    (``KeyLeafRefused`` where the bucket is not read that way), not always the one
    :func:`_read_latest` names."""
    db, check_hash = _split_hash_checked_later(data, threaded=True)
    try:
        scan = _leafscan.LatestScan(slow)
        tree = read_bolt(db, scan.leaf)
        _check_buckets(tree)
        image = buckets_to_image(tree)  # its key bucket read empty
    except Exception:
        check_hash()
        raise
    check_hash()
    return image, scan.latest, max(scan.newest, image.revision)


def _read_latest(
    data: bytes, scan: Callable[[Tree | bytes], tuple[dict[bytes, T | None], int]]
) -> tuple[EtcdImage, dict[bytes, T | None], int]:
    db, check_hash = _split_hash_checked_later(data, threaded=True)
    try:
        tree = read_bolt(db)
        _check_buckets(tree)
        latest, newest = scan(tree[b"key"])
        image = buckets_to_image({**tree, b"key": {}})
    except Exception:
        check_hash()  # a trailer that does not match is the error, as when checked first
        raise
    check_hash()
    return image, latest, max(newest, image.revision)


@dataclasses.dataclass(frozen=True)
class SnapshotStatus:
    """What ``etcdctl snapshot status`` reports for a file."""

    hash: int
    revision: int
    total_key: int
    total_size: int


def snapshot_status(data: bytes) -> SnapshotStatus:
    """Compute ``etcdctl snapshot status``: crc32c over bucket names, keys and values."""
    db, _ = split_snapshot_hash(data)
    tree = read_bolt(db)
    h = 0
    revision = total = 0
    for name in sorted(tree):
        h = crc32c(name, h)
        bucket = tree[name]
        assert isinstance(bucket, dict)
        for k in sorted(bucket):
            v = bucket[k]
            h = crc32c(k, h)
            h = crc32c(b"" if isinstance(v, dict) else v, h)
            if name == b"key":
                revision = _REV.unpack_from(k)[0] if len(k) >= _REV.size else revision
            total += 1
    return SnapshotStatus(hash=h, revision=revision, total_key=total, total_size=bolt_size(db))
