"""The metadata image: immutable, one sub-image per record type (STYLE.md 7).

Readers take ``state.image`` (one reference, no lock) and see one consistent
offset. The apply thread builds a :class:`MetadataDelta` on top of the current
image and publishes ``delta.build()``, which shares every untouched sub-image.

Record types (the ``type`` of change-log effects):

* ``kv``     -- etcd key-value pairs, value = ``records.KvRecord``
* ``member`` -- cluster members and their client URLs, value = ``records.MemberRecord``
* ``lease``  -- leases, key = the lease id as 8 bytes big-endian, value = ``records.LeaseRecord``

The keys attached to a lease are not part of the lease record: they are an index
of the kv sub-image (``KvImage.by_lease``), derived from ``KeyValue.lease`` and kept
by :class:`KvDelta` on every put and delete, so change-log replay and snapshots
rebuild it from the kv records alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver._sortedmap import PersistentSortedMap
from protos import records_pb2

#: Record types this image knows; an effect of any other type is an error.
RECORD_TYPES = ("kv", "member", "lease")


class UnknownRecordType(ValueError):
    pass


_MISSING = object()


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0

    def to_record(self) -> bytes:
        data: bytes = records_pb2.KvRecord(
            key=self.key,
            value=self.value,
            create_revision=self.create_revision,
            mod_revision=self.mod_revision,
            version=self.version,
            lease=self.lease,
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> KeyValue:
        r = records_pb2.KvRecord.FromString(data)
        return KeyValue(r.key, r.value, r.create_revision, r.mod_revision, r.version, r.lease)


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    member_id: int
    peer_url: str
    client_urls: tuple[str, ...]

    def to_record(self) -> bytes:
        data: bytes = records_pb2.MemberRecord(
            id=self.id,
            member_id=self.member_id,
            peer_url=self.peer_url,
            client_urls=list(self.client_urls),
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Member:
        r = records_pb2.MemberRecord.FromString(data)
        return Member(r.id, r.member_id, r.peer_url, tuple(r.client_urls))


def lease_key(lease_id: int) -> bytes:
    """The change-log key of a lease: its id as 8 bytes big-endian."""
    return lease_id.to_bytes(8, "big", signed=True)


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease. ``granted_offset`` (the grant's offset) is its fencing token;
    ``last_refresh_ms`` is the last keepalive checkpointed into the log (the grant's
    timestamp at first). Its deadline is ``last_refresh_ms + ttl_s * 1000``."""

    id: int
    ttl_s: int
    granted_offset: int
    last_refresh_ms: int

    @property
    def deadline_ms(self) -> int:
        return self.last_refresh_ms + self.ttl_s * 1000

    def to_record(self) -> bytes:
        data: bytes = records_pb2.LeaseRecord(
            id=self.id,
            ttl_s=self.ttl_s,
            granted_offset=self.granted_offset,
            last_refresh_ms=self.last_refresh_ms,
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Lease:
        r = records_pb2.LeaseRecord.FromString(data)
        return Lease(r.id, r.ttl_s, r.granted_offset, r.last_refresh_ms)


@dataclass(frozen=True, slots=True)
class Provenance:
    """How far the image got: the last offset (and its term) built into it."""

    last_offset: int = 0
    last_term: int = 0


_NO_KEYS: frozenset[bytes] = frozenset()


@dataclass(frozen=True, slots=True)
class KvImage:
    data: PersistentSortedMap[KeyValue] = field(default_factory=PersistentSortedMap.empty)
    #: lease id -> the keys attached to it (derived from ``KeyValue.lease``)
    by_lease: Mapping[int, frozenset[bytes]] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def from_sorted_items(items: list[tuple[bytes, KeyValue]]) -> KvImage:
        index: dict[int, set[bytes]] = {}
        for key, kv in items:
            if kv.lease:
                index.setdefault(kv.lease, set()).add(key)
        return KvImage(
            PersistentSortedMap.from_sorted_items(items),
            MappingProxyType({k: frozenset(v) for k, v in index.items()}),
        )

    def keys_of_lease(self, lease_id: int) -> frozenset[bytes]:
        return self.by_lease.get(lease_id, _NO_KEYS)

    def get(self, key: bytes) -> KeyValue | None:
        return self.data.get(key)

    def range(self, key: bytes, range_end: bytes | None) -> Iterator[KeyValue]:
        for _, kv in self.data.range(key, range_end):
            yield kv

    def __len__(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class MembersImage:
    members: Mapping[str, Member] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class LeasesImage:
    leases: Mapping[int, Lease] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, lease_id: int) -> Lease | None:
        return self.leases.get(lease_id)

    def __len__(self) -> int:
        return len(self.leases)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    provenance: Provenance = Provenance()
    kv: KvImage = KvImage()
    members: MembersImage = MembersImage()
    leases: LeasesImage = LeasesImage()

    @property
    def revision(self) -> int:
        return self.provenance.last_offset

    @staticmethod
    def empty() -> MetadataImage:
        return MetadataImage()


class KvDelta:
    """Pending kv changes over a base image; reads see the pending changes."""

    def __init__(self, base: KvImage) -> None:
        self.base = base
        self.changes: dict[bytes, KeyValue | None] = {}  # None = deleted
        #: lease id -> its attached keys as this delta will publish them (copied on first touch)
        self.lease_keys: dict[int, set[bytes]] = {}
        self._undo: list[tuple[bytes, object]] | None = None

    def begin(self) -> None:
        """Start recording an undo log, so one entry's changes can be rolled back."""
        self._undo = []

    def commit(self) -> None:
        self._undo = None

    def rollback(self) -> None:
        undo, self._undo = self._undo or [], None
        for key, old in reversed(undo):
            current = self.changes.get(key, self.base.get(key))
            if old is _MISSING:
                self.changes.pop(key, None)
            else:
                self.changes[key] = old  # type: ignore[assignment]
            self._reindex(key, current, self.get(key))

    def _remember(self, key: bytes) -> None:
        if self._undo is not None:
            self._undo.append((key, self.changes.get(key, _MISSING)))

    def _keys_of(self, lease_id: int) -> set[bytes]:
        keys = self.lease_keys.get(lease_id)
        if keys is None:
            keys = self.lease_keys[lease_id] = set(self.base.keys_of_lease(lease_id))
        return keys

    def _reindex(self, key: bytes, old: KeyValue | None, new: KeyValue | None) -> None:
        """Keep the lease -> keys index in step with a change of ``key``."""
        old_lease = old.lease if old is not None else 0
        new_lease = new.lease if new is not None else 0
        if old_lease == new_lease:
            return
        if old_lease:
            self._keys_of(old_lease).discard(key)
        if new_lease:
            self._keys_of(new_lease).add(key)

    def keys_of_lease(self, lease_id: int) -> frozenset[bytes]:
        if lease_id in self.lease_keys:
            return frozenset(self.lease_keys[lease_id])
        return self.base.keys_of_lease(lease_id)

    def get(self, key: bytes) -> KeyValue | None:
        if key in self.changes:
            return self.changes[key]
        return self.base.get(key)

    def range(self, key: bytes, range_end: bytes | None) -> list[KeyValue]:
        """Keys in [key, range_end) (etcd semantics) as the delta would publish them."""
        if not self.changes:
            return list(self.base.range(key, range_end))
        if range_end is None:
            kv = self.get(key)
            return [kv] if kv is not None else []
        merged: dict[bytes, KeyValue | None] = {
            k: v for k, v in self.base.data.range(key, range_end)
        }
        open_end = range_end == b"\x00"
        for k, v in self.changes.items():
            if k >= key and (open_end or k < range_end):
                merged[k] = v
        return [merged[k] for k in sorted(merged) if merged[k] is not None]  # type: ignore[misc]

    def put(self, kv: KeyValue) -> None:
        self._reindex(kv.key, self.get(kv.key), kv)
        self._remember(kv.key)
        self.changes[kv.key] = kv

    def delete(self, key: bytes) -> None:
        self._reindex(key, self.get(key), None)
        self._remember(key)
        self.changes[key] = None

    def build(self) -> KvImage:
        if not self.changes:
            return self.base
        puts = {k: v for k, v in self.changes.items() if v is not None}
        deletes = [k for k, v in self.changes.items() if v is None]
        by_lease = self.base.by_lease
        if self.lease_keys:
            merged = dict(by_lease)
            for lease_id, keys in self.lease_keys.items():
                if keys:
                    merged[lease_id] = frozenset(keys)
                else:
                    merged.pop(lease_id, None)
            by_lease = MappingProxyType(merged)
        return KvImage(self.base.data.update(puts, deletes), by_lease)


class LeaseDelta:
    """Pending lease changes over a base image, with an undo log like :class:`KvDelta`."""

    def __init__(self, base: LeasesImage) -> None:
        self.base = base
        self.changes: dict[int, Lease | None] = {}  # None = gone
        self._undo: list[tuple[int, object]] | None = None

    def begin(self) -> None:
        self._undo = []

    def commit(self) -> None:
        self._undo = None

    def rollback(self) -> None:
        undo, self._undo = self._undo or [], None
        for lease_id, old in reversed(undo):
            if old is _MISSING:
                self.changes.pop(lease_id, None)
            else:
                self.changes[lease_id] = old  # type: ignore[assignment]

    def _remember(self, lease_id: int) -> None:
        if self._undo is not None:
            self._undo.append((lease_id, self.changes.get(lease_id, _MISSING)))

    def get(self, lease_id: int) -> Lease | None:
        if lease_id in self.changes:
            return self.changes[lease_id]
        return self.base.get(lease_id)

    def put(self, lease: Lease) -> None:
        self._remember(lease.id)
        self.changes[lease.id] = lease

    def delete(self, lease_id: int) -> None:
        self._remember(lease_id)
        self.changes[lease_id] = None

    def build(self) -> LeasesImage:
        if not self.changes:
            return self.base
        merged = dict(self.base.leases)
        for lease_id, lease in self.changes.items():
            if lease is None:
                merged.pop(lease_id, None)
            else:
                merged[lease_id] = lease
        return LeasesImage(MappingProxyType(merged))


class MetadataDelta:
    """Changes on top of one image; :meth:`build` makes the next image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.kv = KvDelta(image.kv)
        self._members: dict[str, Member | None] = {}
        self.leases = LeaseDelta(image.leases)
        self.provenance = image.provenance

    def member(self, member_id: str) -> Member | None:
        if member_id in self._members:
            return self._members[member_id]
        return self.image.members.members.get(member_id)

    def put_member(self, member: Member) -> None:
        self._members[member.id] = member

    def remove_member(self, member_id: str) -> None:
        self._members[member_id] = None

    def replay(self, type_: str, key: bytes, value: bytes, delete: bool) -> None:
        """Turn one change-log record into change (used by snapshots and replay)."""
        if type_ == "kv":
            if delete:
                self.kv.delete(key)
            else:
                self.kv.put(KeyValue.from_record(value))
        elif type_ == "member":
            mid = key.decode()
            if delete:
                self._members[mid] = None
            else:
                self._members[mid] = Member.from_record(value)
        elif type_ == "lease":
            if delete:
                self.leases.delete(int.from_bytes(key, "big", signed=True))
            else:
                self.leases.put(Lease.from_record(value))
        else:
            raise UnknownRecordType(f"unknown record type {type_!r}")

    def build(self) -> MetadataImage:
        members = self.image.members
        if self._members:
            merged = dict(members.members)
            for k, v in self._members.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            members = MembersImage(MappingProxyType(merged))
        return MetadataImage(
            provenance=self.provenance,
            kv=self.kv.build(),
            members=members,
            leases=self.leases.build(),
        )
