"""The metadata image: immutable, one sub-image per record type (STYLE.md 7).

Readers take ``state.image`` (one reference, no lock) and see one consistent
offset. The apply thread builds a :class:`MetadataDelta` on top of the current
image and publishes ``delta.build()``, which shares every untouched sub-image.

Record types (the ``type`` of change-log effects):

* ``kv``     -- etcd key-value pairs, value = ``records.KvRecord``
* ``member`` -- cluster members and their client URLs, value = ``records.MemberRecord``
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver._sortedmap import PersistentSortedMap
from protos import records_pb2

#: Record types this image knows; an effect of any other type is an error.
RECORD_TYPES = ("kv", "member")


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


@dataclass(frozen=True, slots=True)
class Provenance:
    """How far the image got: the last offset (and its term) built into it."""

    last_offset: int = 0
    last_term: int = 0


@dataclass(frozen=True, slots=True)
class KvImage:
    data: PersistentSortedMap[KeyValue] = field(default_factory=PersistentSortedMap.empty)

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
class MetadataImage:
    provenance: Provenance = Provenance()
    kv: KvImage = KvImage()
    members: MembersImage = MembersImage()

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
        self._undo: list[tuple[bytes, object]] | None = None

    def begin(self) -> None:
        """Start recording an undo log, so one entry's changes can be rolled back."""
        self._undo = []

    def commit(self) -> None:
        self._undo = None

    def rollback(self) -> None:
        undo, self._undo = self._undo or [], None
        for key, old in reversed(undo):
            if old is _MISSING:
                self.changes.pop(key, None)
            else:
                self.changes[key] = old  # type: ignore[assignment]

    def _remember(self, key: bytes) -> None:
        if self._undo is not None:
            self._undo.append((key, self.changes.get(key, _MISSING)))

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
        self._remember(kv.key)
        self.changes[kv.key] = kv

    def delete(self, key: bytes) -> None:
        self._remember(key)
        self.changes[key] = None

    def build(self) -> KvImage:
        if not self.changes:
            return self.base
        puts = {k: v for k, v in self.changes.items() if v is not None}
        deletes = [k for k, v in self.changes.items() if v is None]
        return KvImage(self.base.data.update(puts, deletes))


class MetadataDelta:
    """Changes on top of one image; :meth:`build` makes the next image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.kv = KvDelta(image.kv)
        self._members: dict[str, Member | None] = {}
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
        return MetadataImage(provenance=self.provenance, kv=self.kv.build(), members=members)
