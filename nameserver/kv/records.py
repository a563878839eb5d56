"""The etcd key-value records: :class:`KeyValue`, the kv sub-image and its delta; the kv
store's compaction revision (:class:`Compaction`, the ``mvcc`` record, its sub-image and
delta; the rules are :mod:`nameserver.kv.mvcc`).

The keys attached to a lease are not part of the lease record: they are an index
of the kv sub-image (``KvImage.by_lease``), derived from ``KeyValue.lease`` and kept
by :class:`KvDelta` on every put and delete, so change-log replay and snapshots
rebuild it from the kv records alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from nameserver.state.mapdelta import _MISSING, MapDelta
from nameserver.state.sortedmap import PersistentSortedMap, is_strictly_increasing
from protos import records_pb2


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


#: KeyValue's slot descriptors' setters, in field order (see new_kv)
_SET_KEY, _SET_VALUE, _SET_CREATE, _SET_MOD, _SET_VERSION, _SET_LEASE = (
    getattr(KeyValue, f.name).__set__ for f in fields(KeyValue)
)


def new_kv(
    key: bytes, value: bytes, create_revision: int, mod_revision: int, version: int, lease: int
) -> KeyValue:
    """``KeyValue(...)`` with every field given, at half the cost (the apply path's Put on
    every node): through the slot descriptors, not a frozen ``__init__``'s
    ``object.__setattr__`` per field (:func:`raftlog.entry._entry` does the same)."""
    kv: KeyValue = object.__new__(KeyValue)
    _SET_KEY(kv, key)
    _SET_VALUE(kv, value)
    _SET_CREATE(kv, create_revision)
    _SET_MOD(kv, mod_revision)
    _SET_VERSION(kv, version)
    _SET_LEASE(kv, lease)
    return kv


_NO_KEYS: frozenset[bytes] = frozenset()


def kv_size(kv: KeyValue | None) -> int:
    """What a key counts against the kv byte quota: its key and value."""
    return 0 if kv is None else len(kv.key) + len(kv.value)


@dataclass(frozen=True, slots=True)
class KvImage:
    data: PersistentSortedMap[KeyValue] = field(default_factory=PersistentSortedMap.empty)
    #: lease id -> the keys attached to it (derived from ``KeyValue.lease``)
    by_lease: Mapping[int, frozenset[bytes]] = field(default_factory=lambda: MappingProxyType({}))
    #: sum of key + value lengths (kept incrementally by :class:`KvDelta`, for quotas)
    value_bytes: int = 0

    @staticmethod
    def from_sorted_items(items: list[tuple[bytes, KeyValue]]) -> KvImage:
        index: dict[int, set[bytes]] = {}
        for key, kv in items:
            if kv.lease:
                index.setdefault(kv.lease, set()).add(key)
        return KvImage(
            PersistentSortedMap.from_sorted_items(items),
            MappingProxyType({k: frozenset(v) for k, v in index.items()}),
            sum(kv_size(kv) for _, kv in items),
        )

    @staticmethod
    def from_records(keys: list[bytes], records: list[bytes]) -> KvImage:
        """The kv sub-image of a snapshot's ``kv`` columns (restore's hot loop: 1M keys).

        Same result as :meth:`from_sorted_items` over ``KeyValue.from_record`` of each
        record, sorted (a snapshot written by Spark may be in any order; ours is in key
        order, checked at C speed). Raises ValueError for a key given twice.
        """
        if not is_strictly_increasing(keys):
            order = sorted(range(len(keys)), key=keys.__getitem__)
            keys = [keys[i] for i in order]
            records = [records[i] for i in order]
        parse = records_pb2.KvRecord.FromString
        # A fresh KeyValue is filled through its slot descriptors: the frozen dataclass's
        # __init__ (object.__setattr__ per field) costs twice as much, and nothing else
        # can see the object before it is complete.
        new = object.__new__
        set_key, set_value = _KV_SLOTS[0].__set__, _KV_SLOTS[1].__set__
        set_create, set_mod = _KV_SLOTS[2].__set__, _KV_SLOTS[3].__set__
        set_version, set_lease = _KV_SLOTS[4].__set__, _KV_SLOTS[5].__set__
        values: list[KeyValue] = []
        append = values.append
        index: dict[int, set[bytes]] = {}
        size = 0
        for key, data in zip(keys, records, strict=True):
            r = parse(data)
            kv = new(KeyValue)
            set_key(kv, r.key)
            set_value(kv, r.value)
            set_create(kv, r.create_revision)
            set_mod(kv, r.mod_revision)
            set_version(kv, r.version)
            set_lease(kv, r.lease)
            size += len(kv.key) + len(kv.value)
            if kv.lease:
                index.setdefault(kv.lease, set()).add(key)
            append(kv)
        return KvImage(
            PersistentSortedMap.from_columns(keys, values),
            MappingProxyType({k: frozenset(v) for k, v in index.items()}),
            size,
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


#: KeyValue's slot descriptors in field order (see KvImage.from_records).
_KV_SLOTS = tuple(
    getattr(KeyValue, name)
    for name in ("key", "value", "create_revision", "mod_revision", "version", "lease")
)


class KvDelta(MapDelta[bytes, KeyValue]):
    """Pending kv changes over a base image; reads see the pending changes.

    The undo log, rollback and key/byte totals are :class:`MapDelta`'s; this adds the
    lease -> keys index (kept in :meth:`_account`) and a Put path of its own
    (:meth:`put_over`, the apply path's hottest call: written out, no helper calls).
    """

    def __init__(self, base: KvImage) -> None:
        super().__init__(base.get, kv_size)
        self.base = base
        #: lease id -> its attached keys as this delta will publish them (copied on first touch)
        self.lease_keys: dict[int, set[bytes]] = {}

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

    def _account(self, key: bytes, old: KeyValue | None, new: KeyValue | None) -> None:
        self._reindex(key, old, new)
        super()._account(key, old, new)

    @property
    def key_count(self) -> int:
        return len(self.base) + self.key_delta

    @property
    def byte_count(self) -> int:
        return self.base.value_bytes + self.byte_delta

    def keys_of_lease(self, lease_id: int) -> frozenset[bytes]:
        if lease_id in self.lease_keys:
            return frozenset(self.lease_keys[lease_id])
        return self.base.keys_of_lease(lease_id)

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
        self.put_over(self.get(kv.key), kv)

    def put_over(self, old: KeyValue | None, kv: KeyValue) -> None:
        """:meth:`put` for a caller that has just read ``old = self.get(kv.key)`` (the
        apply path's Put: one lookup instead of two)."""
        key = kv.key
        if (old is not None and old.lease) or kv.lease:
            self._reindex(key, old, kv)
        self.key_delta += old is None
        self.byte_delta += (
            len(key) + len(kv.value) - (0 if old is None else len(old.key) + len(old.value))
        )
        undo = self._journal.entries
        if undo is not None:
            undo.append((self, key, self.changes.get(key, _MISSING)))
        self.changes[key] = kv

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
        return KvImage(
            self.base.data.update(puts, deletes), by_lease, self.base.value_bytes + self.byte_delta
        )


# ------------------------------------------------------------------ mvcc
#: the one key of the ``mvcc`` record type
COMPACT_KEY = b"compact"


@dataclass(frozen=True, slots=True)
class Compaction:
    """The compaction revision of the kv store."""

    revision: int

    def to_record(self) -> bytes:
        data: bytes = records_pb2.MvccCompaction(revision=self.revision).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Compaction:
        return Compaction(records_pb2.MvccCompaction.FromString(data).revision)


@dataclass(frozen=True, slots=True)
class MvccImage:
    compaction: Compaction | None = None

    @property
    def compact_revision(self) -> int:
        """The compaction revision (0: never compacted): nothing below it is readable."""
        return self.compaction.revision if self.compaction is not None else 0

    @property
    def compacted(self) -> int:
        """The compaction revision, -1 when never compacted (etcd's ``compactMainRev``)."""
        return self.compaction.revision if self.compaction is not None else -1

    def get(self, key: bytes) -> Compaction | None:
        return self.compaction if key == COMPACT_KEY else None


class MvccDelta(MapDelta[bytes, Compaction]):
    def __init__(self, base: MvccImage) -> None:
        super().__init__(base.get)
        self.base = base

    def put(self, record: Compaction) -> None:
        self._change(COMPACT_KEY, record)

    @property
    def compacted(self) -> int:
        """The compaction revision, -1 when never compacted (etcd's ``compactMainRev``)."""
        record = self.get(COMPACT_KEY)
        return record.revision if record is not None else -1

    def build(self) -> MvccImage:
        if not self.changes:
            return self.base
        return MvccImage(self.get(COMPACT_KEY))


# ------------------------------------------------------------------ store revision
#: the record type (and change-log effect type) of the store revision
REVISION = "revision"
#: the one key of the ``revision`` record type
REVISION_KEY = b"store"
#: the floor a leader proposes: an empty etcd store's revision
REVISION_FLOOR = 1


@dataclass(frozen=True, slots=True)
class StoreRevision:
    """The kv store's revision counter (etcd's ``currentRev``): moved by a request that
    changes keys only. An image without one counts as before it existed: its store
    revision is its last log offset."""

    revision: int

    def to_record(self) -> bytes:
        """An ``MvccCompaction`` message with the revision (field 1), as protobuf writes it
        (written out: one per request that changes keys)."""
        return b"\x08" + _varint(self.revision) if self.revision else b""

    @staticmethod
    def from_record(data: bytes) -> StoreRevision:
        return StoreRevision(record_revision(data))


def _varint(n: int) -> bytes:
    """A non-negative int as a protobuf varint (here, not raftlog's: importing raftlog for
    it would bring the whole log into ``metaledger snapshot restore --from-etcd``)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def record_revision(data: bytes) -> int:
    """The revision of an encoded :class:`StoreRevision` (read out for the one-field form
    :meth:`StoreRevision.to_record` writes, else by protobuf)."""
    if not data:
        return 0
    if data[0] == 0x08:
        n, shift = 0, 0
        for i in range(1, len(data)):
            byte = data[i]
            n |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if i == len(data) - 1:
                    return n
                break
            shift += 7
    return int(records_pb2.MvccCompaction.FromString(data).revision)


def record_mod_revision(data: bytes) -> int:
    """The ``mod_revision`` (field 4) of an encoded :class:`KeyValue` (a ``KvRecord``),
    read out without decoding the record: its key and value are skipped by their lengths
    (0: none)."""
    i, n = 0, len(data)
    while i < n:
        tag = data[i]
        got, shift = 0, 0
        i += 1
        while True:  # the field's varint (a length, or the value)
            byte = data[i]
            i += 1
            got |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
        if tag == 0x20:
            return got
        if tag & 7 == 2:
            i += got
    return 0


@dataclass(frozen=True, slots=True)
class RevisionImage:
    counter: StoreRevision | None = None

    @property
    def revision(self) -> int:
        """The store revision, -1 while the image counts by log offset (no counter)."""
        return self.counter.revision if self.counter is not None else -1

    def get(self, key: bytes) -> StoreRevision | None:
        return self.counter if key == REVISION_KEY else None


#: StoreRevision's one slot descriptor's setter (see RevisionDelta.count)
_SET_STORE_REVISION = getattr(StoreRevision, fields(StoreRevision)[0].name).__set__


class RevisionDelta(MapDelta[bytes, StoreRevision]):
    def __init__(self, base: RevisionImage) -> None:
        super().__init__(base.get)
        self.base = base

    def put(self, record: StoreRevision) -> None:
        self._change(REVISION_KEY, record)

    def count(self, revision: int) -> StoreRevision:
        """:meth:`put` of the revision a request took (once per request that changes keys:
        written out, as :meth:`KvDelta.put_over`; no keys or bytes to account)."""
        record: StoreRevision = object.__new__(StoreRevision)
        _SET_STORE_REVISION(record, revision)
        undo = self._journal.entries
        if undo is not None:
            undo.append((self, REVISION_KEY, self.changes.get(REVISION_KEY, _MISSING)))
        self.changes[REVISION_KEY] = record
        return record

    @property
    def revision(self) -> int:
        """The store revision as the delta would publish it (-1: counting by offset)."""
        record = self.changes.get(REVISION_KEY, _MISSING)
        if record is _MISSING:
            record = self.base.counter
        return record.revision if isinstance(record, StoreRevision) else -1

    def build(self) -> RevisionImage:
        if not self.changes:
            return self.base
        return RevisionImage(self.get(REVISION_KEY))
