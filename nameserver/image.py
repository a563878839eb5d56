"""The metadata image: immutable, one sub-image per record type (STYLE.md 7).

Readers take ``state.image`` (one reference, no lock) and see one consistent
offset. The apply thread builds a :class:`MetadataDelta` on top of the current
image and publishes ``delta.build()``, which shares every untouched sub-image.

Record types (the ``type`` of change-log effects):

* ``kv``     -- etcd key-value pairs, value = ``records.KvRecord``
* ``member`` -- cluster members and their client URLs, value = ``records.MemberRecord``
* ``lease``  -- leases, key = the lease id as 8 bytes big-endian, value = ``records.LeaseRecord``
* ``offset`` -- replicator offsets, key = job, NUL, partition, value = ``records.OffsetRecord``
* ``quota``  -- quota per record type, key = the type's name, value = ``records.QuotaRecord``
* ``replica_group`` -- replica groups, key = the broker name, value = ``records.ReplicaGroupRecord``
* ``broker``, ``topic``, ``kvconfig`` -- RocketMQ route data (brokers, queue data per topic
  and broker name, KV config items); keys and values in :mod:`nameserver.routing_image`.
  Clusters are derived from the broker records, not stored.

The keys attached to a lease are not part of the lease record: they are an index
of the kv sub-image (``KvImage.by_lease``), derived from ``KeyValue.lease`` and kept
by :class:`KvDelta` on every put and delete, so change-log replay and snapshots
rebuild it from the kv records alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from nameserver._sortedmap import PersistentSortedMap, is_strictly_increasing
from nameserver.routing_image import Broker, KvConfig, TopicQueue
from protos import records_pb2

#: Record types this image knows; an effect of any other type is an error.
RECORD_TYPES = (
    "kv",
    "member",
    "lease",
    "offset",
    "quota",
    "replica_group",
    "broker",
    "topic",
    "kvconfig",
)


class UnknownRecordType(ValueError):
    pass


_MISSING = object()


class Journal:
    """The undo log of one request, shared by the sub-deltas of a :class:`MetadataDelta`:
    one list per request instead of one per sub-delta (begin and commit are per request,
    the apply path's hottest bookkeeping). ``entries`` is None outside a request."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[_Undoable, Any, object]] | None = None

    def begin(self) -> None:
        self.entries = []

    def commit(self) -> None:
        self.entries = None

    def rollback(self) -> None:
        """Undo every change since :meth:`begin`, newest first."""
        entries, self.entries = self.entries or [], None
        for delta, key, old in reversed(entries):
            delta._revert(key, old)


class _Undoable(Protocol):
    def _revert(self, key: Any, old: object) -> None: ...


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


K = TypeVar("K")
V = TypeVar("V")


class MapDelta(Generic[K, V]):
    """Pending changes of one keyed sub-image over its base (``base_get``), with an undo log
    like :class:`KvDelta` and running key and byte totals (``size`` of a value) for quotas."""

    def __init__(
        self, base_get: Callable[[K], V | None], size: Callable[[V], int] = lambda _: 0
    ) -> None:
        self._base_get = base_get
        self._size = size
        self.changes: dict[K, V | None] = {}  # None = gone
        self._journal = Journal()  # MetadataDelta shares one among its sub-deltas
        self.key_delta = 0
        self.byte_delta = 0

    def begin(self) -> None:
        self._journal.begin()

    def commit(self) -> None:
        self._journal.commit()

    def rollback(self) -> None:
        self._journal.rollback()

    def _revert(self, key: K, old: object) -> None:
        current = self.get(key)
        if old is _MISSING:
            self.changes.pop(key, None)
        else:
            self.changes[key] = old  # type: ignore[assignment]
        self._account(current, self.get(key))

    def _account(self, old: V | None, new: V | None) -> None:
        self.key_delta += (new is not None) - (old is not None)
        self.byte_delta += (self._size(new) if new is not None else 0) - (
            self._size(old) if old is not None else 0
        )

    def _change(self, key: K, new: V | None) -> None:
        self._account(self.get(key), new)
        undo = self._journal.entries
        if undo is not None:
            undo.append((self, key, self.changes.get(key, _MISSING)))
        self.changes[key] = new

    def delete(self, key: K) -> None:
        self._change(key, None)

    def get(self, key: K) -> V | None:
        if key in self.changes:
            return self.changes[key]
        return self._base_get(key)

    def merged(self, base: Mapping[K, V]) -> Mapping[K, V]:
        """``base`` with the changes applied (a new read-only mapping)."""
        out = dict(base)
        for key, value in self.changes.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return MappingProxyType(out)


# ------------------------------------------------------------- replicator offsets
def offset_key(job: str, partition: str) -> bytes:
    """The change-log key of a replicator offset: job, a NUL byte, partition (a job name
    holds no NUL, so a job's offsets are the key range ``job + NUL`` onwards)."""
    return job.encode() + b"\x00" + partition.encode()


def job_range(job: str, prefix: bool) -> tuple[bytes, bytes]:
    """The [start, end) key range of one job's offsets, or of every job starting with ``job``
    (``b"\x00"`` as end: no upper bound, etcd's convention)."""
    if not prefix:
        return job.encode() + b"\x00", job.encode() + b"\x01"
    start = job.encode()
    end = bytearray(start)
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return start, b"\x00"
    end[-1] += 1
    return start, bytes(end)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """The committed offset of one (job, partition) and what fenced it (records.OffsetRecord)."""

    job: str
    partition: str
    offset: bytes
    position: int
    version: int
    epoch: int
    lease_id: int
    fencing_token: int
    create_revision: int
    mod_revision: int
    reset_revision: int = 0

    @property
    def key(self) -> bytes:
        return offset_key(self.job, self.partition)

    def size(self) -> int:
        """What it counts against the offset byte quota: its key and offset bytes."""
        return len(self.key) + len(self.offset)

    def to_record(self) -> bytes:
        data: bytes = records_pb2.OffsetRecord(
            job=self.job,
            partition=self.partition,
            offset=self.offset,
            position=self.position,
            version=self.version,
            epoch=self.epoch,
            lease_id=self.lease_id,
            fencing_token=self.fencing_token,
            create_revision=self.create_revision,
            mod_revision=self.mod_revision,
            reset_revision=self.reset_revision,
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> CommittedOffset:
        r = records_pb2.OffsetRecord.FromString(data)
        return CommittedOffset(
            r.job,
            r.partition,
            r.offset,
            r.position,
            r.version,
            r.epoch,
            r.lease_id,
            r.fencing_token,
            r.create_revision,
            r.mod_revision,
            r.reset_revision,
        )


@dataclass(frozen=True, slots=True)
class OffsetsImage:
    data: PersistentSortedMap[CommittedOffset] = field(default_factory=PersistentSortedMap.empty)
    value_bytes: int = 0

    def get(self, key: bytes) -> CommittedOffset | None:
        return self.data.get(key)

    def of_job(self, job: str, prefix: bool = False) -> Iterator[CommittedOffset]:
        start, end = job_range(job, prefix)
        for _, committed in self.data.range(start, end):
            yield committed

    def __len__(self) -> int:
        return len(self.data)


class OffsetDelta(MapDelta[bytes, CommittedOffset]):
    def __init__(self, base: OffsetsImage) -> None:
        super().__init__(base.get, CommittedOffset.size)
        self.base = base

    def put(self, committed: CommittedOffset) -> None:
        self._change(committed.key, committed)

    def build(self) -> OffsetsImage:
        if not self.changes:
            return self.base
        puts = {k: v for k, v in self.changes.items() if v is not None}
        deletes = [k for k, v in self.changes.items() if v is None]
        return OffsetsImage(
            self.base.data.update(puts, deletes), self.base.value_bytes + self.byte_delta
        )


# ------------------------------------------------------------ sorted record maps
@dataclass(frozen=True, slots=True)
class RecordsImage(Generic[V]):
    """A sub-image of records keyed by bytes in order (route data), with its byte total."""

    data: PersistentSortedMap[V] = field(default_factory=PersistentSortedMap.empty)
    value_bytes: int = 0

    def get(self, key: bytes) -> V | None:
        return self.data.get(key)

    def range(self, start: bytes, end: bytes) -> Iterator[V]:
        for _, value in self.data.range(start, end):
            yield value

    def values(self) -> Iterator[V]:
        return self.data.values()

    def __len__(self) -> int:
        return len(self.data)


class RecordsDelta(MapDelta[bytes, V]):
    """Pending changes of a :class:`RecordsImage`; ``key_of`` names a value's key."""

    def __init__(
        self, base: RecordsImage[V], key_of: Callable[[V], bytes], size: Callable[[V], int]
    ) -> None:
        super().__init__(base.get, size)
        self.base = base
        self._key_of = key_of

    def put(self, value: V) -> None:
        self._change(self._key_of(value), value)

    def range(self, start: bytes, end: bytes) -> list[V]:
        """Values with keys in [start, end) as the delta would publish them."""
        merged: dict[bytes, V | None] = dict(self.base.data.range(start, end))
        for k, v in self.changes.items():
            if start <= k < end:
                merged[k] = v
        return [v for _, v in sorted(merged.items()) if v is not None]

    def values(self) -> list[V]:
        """Every value as the delta would publish it (a scan: for rare operations)."""
        if not self.changes:
            return list(self.base.values())
        merged: dict[bytes, V | None] = dict(self.base.data.items())
        merged.update(self.changes)
        return [v for _, v in sorted(merged.items()) if v is not None]

    @property
    def count(self) -> int:
        return len(self.base) + self.key_delta

    @property
    def byte_count(self) -> int:
        return self.base.value_bytes + self.byte_delta

    def build(self) -> RecordsImage[V]:
        if not self.changes:
            return self.base
        puts = {k: v for k, v in self.changes.items() if v is not None}
        deletes = [k for k, v in self.changes.items() if v is None]
        return RecordsImage(self.base.data.update(puts, deletes), self.byte_count)


def records_image(items: list[tuple[bytes, V]], size: Callable[[V], int]) -> RecordsImage[V]:
    """A sub-image from unsorted (key, value) pairs (snapshot load)."""
    items.sort(key=lambda item: item[0])
    return RecordsImage(
        PersistentSortedMap.from_sorted_items(items), sum(size(v) for _, v in items)
    )


# ------------------------------------------------------------------------ quotas
@dataclass(frozen=True, slots=True)
class Quota:
    """Limits of one record type; 0 = unlimited."""

    record_type: str
    max_keys: int = 0
    max_bytes: int = 0

    def to_record(self) -> bytes:
        data: bytes = records_pb2.QuotaRecord(
            record_type=self.record_type, max_keys=self.max_keys, max_bytes=self.max_bytes
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Quota:
        r = records_pb2.QuotaRecord.FromString(data)
        return Quota(r.record_type, r.max_keys, r.max_bytes)


@dataclass(frozen=True, slots=True)
class QuotasImage:
    quotas: Mapping[str, Quota] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, record_type: str) -> Quota | None:
        return self.quotas.get(record_type)


class QuotaDelta(MapDelta[str, Quota]):
    def __init__(self, base: QuotasImage) -> None:
        super().__init__(base.get)
        self.base = base

    def put(self, quota: Quota) -> None:
        self._change(quota.record_type, quota)

    def any(self) -> bool:
        """Whether any type has a quota record as this delta would publish it (a quota
        record always holds a limit: setting the default deletes it)."""
        if not self.changes:
            return bool(self.base.quotas)
        return any(self.get(t) is not None for t in {*self.base.quotas, *self.changes})

    def build(self) -> QuotasImage:
        if not self.changes:
            return self.base
        return QuotasImage(self.merged(self.base.quotas))


# ------------------------------------------------------------------ replica groups
@dataclass(frozen=True, slots=True)
class Replica:
    broker_id: int
    address: str
    heartbeat_timeout_ms: int
    registered_revision: int


@dataclass(frozen=True, slots=True)
class QuorumPolicy:
    """RocketMQ 5's quorum-write settings of a group, with RocketMQ's defaults."""

    total_replicas: int = 1
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    ha_max_gap_not_in_sync: int = 256 * 1024

    def to_pb(self) -> records_pb2.ReplicaGroupPolicy:
        return records_pb2.ReplicaGroupPolicy(
            total_replicas=self.total_replicas,
            in_sync_replicas=self.in_sync_replicas,
            min_in_sync_replicas=self.min_in_sync_replicas,
            enable_auto_in_sync_replicas=self.enable_auto_in_sync_replicas,
            ha_max_gap_not_in_sync=self.ha_max_gap_not_in_sync,
        )

    @staticmethod
    def from_pb(p: Any) -> QuorumPolicy:
        """From ``records.ReplicaGroupPolicy`` or ``metaledger.v1.ReplicaGroupPolicy`` (the
        same fields)."""
        return QuorumPolicy(
            p.total_replicas,
            p.in_sync_replicas,
            p.min_in_sync_replicas,
            p.enable_auto_in_sync_replicas,
            p.ha_max_gap_not_in_sync,
        )


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """One broker name's replica group (``records.ReplicaGroupRecord``). Id sets are sorted
    tuples, so equal groups encode to equal bytes."""

    broker_name: str
    cluster_name: str
    replicas: tuple[Replica, ...] = ()
    alive: tuple[int, ...] = ()
    master_id: int = 0
    master_epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0
    policy: QuorumPolicy = QuorumPolicy()
    next_broker_id: int = 1
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0

    def replica(self, broker_id: int) -> Replica | None:
        for r in self.replicas:
            if r.broker_id == broker_id:
                return r
        return None

    def address_of(self, broker_id: int) -> str:
        r = self.replica(broker_id)
        return r.address if r is not None else ""

    def size(self) -> int:
        """What it counts against the replica_group byte quota: its encoded record."""
        return len(self.broker_name.encode()) + len(self.to_record())

    def to_record(self) -> bytes:
        data: bytes = records_pb2.ReplicaGroupRecord(
            broker_name=self.broker_name,
            cluster_name=self.cluster_name,
            replicas=[
                records_pb2.ReplicaRecord(
                    broker_id=r.broker_id,
                    address=r.address,
                    heartbeat_timeout_ms=r.heartbeat_timeout_ms,
                    registered_revision=r.registered_revision,
                )
                for r in self.replicas
            ],
            alive=list(self.alive),
            master_id=self.master_id,
            master_epoch=self.master_epoch,
            sync_state_set=list(self.sync_state_set),
            sync_state_set_epoch=self.sync_state_set_epoch,
            policy=self.policy.to_pb(),
            next_broker_id=self.next_broker_id,
            create_revision=self.create_revision,
            mod_revision=self.mod_revision,
            version=self.version,
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> ReplicaGroup:
        r = records_pb2.ReplicaGroupRecord.FromString(data)
        return ReplicaGroup(
            r.broker_name,
            r.cluster_name,
            tuple(
                Replica(x.broker_id, x.address, x.heartbeat_timeout_ms, x.registered_revision)
                for x in r.replicas
            ),
            tuple(r.alive),
            r.master_id,
            r.master_epoch,
            tuple(r.sync_state_set),
            r.sync_state_set_epoch,
            QuorumPolicy.from_pb(r.policy),
            r.next_broker_id,
            r.create_revision,
            r.mod_revision,
            r.version,
        )


@dataclass(frozen=True, slots=True)
class ReplicaGroupsImage:
    groups: Mapping[str, ReplicaGroup] = field(default_factory=lambda: MappingProxyType({}))
    value_bytes: int = 0

    def get(self, broker_name: str) -> ReplicaGroup | None:
        return self.groups.get(broker_name)

    def __len__(self) -> int:
        return len(self.groups)


class ReplicaGroupDelta(MapDelta[str, ReplicaGroup]):
    def __init__(self, base: ReplicaGroupsImage) -> None:
        super().__init__(base.get, ReplicaGroup.size)
        self.base = base

    def put(self, group: ReplicaGroup) -> None:
        self._change(group.broker_name, group)

    def build(self) -> ReplicaGroupsImage:
        if not self.changes:
            return self.base
        return ReplicaGroupsImage(
            self.merged(self.base.groups), self.base.value_bytes + self.byte_delta
        )


@dataclass(frozen=True, slots=True)
class MetadataImage:
    provenance: Provenance = Provenance()
    kv: KvImage = KvImage()
    members: MembersImage = MembersImage()
    leases: LeasesImage = LeasesImage()
    offsets: OffsetsImage = OffsetsImage()
    quotas: QuotasImage = QuotasImage()
    replica_groups: ReplicaGroupsImage = ReplicaGroupsImage()
    brokers: RecordsImage[Broker] = RecordsImage()
    topics: RecordsImage[TopicQueue] = RecordsImage()
    kvconfig: RecordsImage[KvConfig] = RecordsImage()

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
        self._journal = Journal()  # MetadataDelta shares one among its sub-deltas
        #: keys and bytes this delta adds to the base (negative: removes), for quotas
        self.key_delta = 0
        self.byte_delta = 0

    def begin(self) -> None:
        """Start recording an undo log, so one entry's changes can be rolled back."""
        self._journal.begin()

    def commit(self) -> None:
        self._journal.commit()

    def rollback(self) -> None:
        self._journal.rollback()

    def _revert(self, key: bytes, old: object) -> None:
        current = self.get(key)
        if old is _MISSING:
            self.changes.pop(key, None)
        else:
            self.changes[key] = old  # type: ignore[assignment]
        new = self.get(key)
        self._reindex(key, current, new)
        self._account(current, new)

    def _remember(self, key: bytes) -> None:
        undo = self._journal.entries
        if undo is not None:
            undo.append((self, key, self.changes.get(key, _MISSING)))

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

    def _account(self, old: KeyValue | None, new: KeyValue | None) -> None:
        self.key_delta += (new is not None) - (old is not None)
        self.byte_delta += kv_size(new) - kv_size(old)

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

    def delete(self, key: bytes) -> None:
        old = self.get(key)
        self._reindex(key, old, None)
        self._account(old, None)
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
        return KvImage(
            self.base.data.update(puts, deletes), by_lease, self.base.value_bytes + self.byte_delta
        )


class LeaseDelta(MapDelta[int, Lease]):
    """Pending lease changes over a base image."""

    def __init__(self, base: LeasesImage) -> None:
        super().__init__(base.get)
        self.base = base

    def put(self, lease: Lease) -> None:
        self._change(lease.id, lease)

    def build(self) -> LeasesImage:
        if not self.changes:
            return self.base
        return LeasesImage(self.merged(self.base.leases))


def _broker_key(b: Broker) -> bytes:
    return b.key


def _topic_key(q: TopicQueue) -> bytes:
    return q.key


def _kvconfig_key(c: KvConfig) -> bytes:
    return c.record_key


#: Route record types: (attribute of the image and delta, decoder of a record value).
ROUTING_TYPES: Mapping[str, tuple[str, Callable[[bytes], Any]]] = {
    "broker": ("brokers", Broker.from_record),
    "topic": ("topics", TopicQueue.from_record),
    "kvconfig": ("kvconfig", KvConfig.from_record),
}


#: How MetadataDelta makes each sub-delta from its image.
_SUB_DELTAS: dict[str, Callable[[MetadataImage], KvDelta | MapDelta[Any, Any]]] = {
    "kv": lambda image: KvDelta(image.kv),
    "leases": lambda image: LeaseDelta(image.leases),
    "offsets": lambda image: OffsetDelta(image.offsets),
    "quotas": lambda image: QuotaDelta(image.quotas),
    "replica_groups": lambda image: ReplicaGroupDelta(image.replica_groups),
    "brokers": lambda image: RecordsDelta(image.brokers, _broker_key, Broker.size),
    "topics": lambda image: RecordsDelta(image.topics, _topic_key, TopicQueue.size),
    "kvconfig": lambda image: RecordsDelta(image.kvconfig, _kvconfig_key, KvConfig.size),
}


class MetadataDelta:
    """Changes on top of one image; :meth:`build` makes the next image.

    Each sub-delta is made on first use (an apply group of puts touches only ``kv``): making
    and building all nine per group was a third of the apply cost of a one-put group.
    """

    # made on first use by __getattr__ (then plain instance attributes)
    kv: KvDelta
    leases: LeaseDelta
    offsets: OffsetDelta
    quotas: QuotaDelta
    replica_groups: ReplicaGroupDelta
    brokers: RecordsDelta[Broker]
    topics: RecordsDelta[TopicQueue]
    kvconfig: RecordsDelta[KvConfig]

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._members: dict[str, Member | None] = {}
        self.provenance = image.provenance
        self._journal = Journal()

    def __getattr__(self, name: str) -> Any:
        # only called for a missing attribute: a sub-delta not made yet (no lock, no
        # descriptor on later reads, unlike functools.cached_property)
        make = _SUB_DELTAS.get(name)
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        delta = make(self.image)
        delta._journal = self._journal
        self.__dict__[name] = delta
        return delta

    def has_quotas(self) -> bool:
        """Whether any type has a quota as this delta would publish it (without making the
        quota sub-delta when nothing touched it)."""
        if "quotas" not in self.__dict__:
            return bool(self.image.quotas.quotas)
        return self.quotas.any()

    def routing_deltas(self) -> tuple[RecordsDelta[Any], ...]:
        return (self.brokers, self.topics, self.kvconfig)

    def begin(self) -> None:
        """Start one request: its changes can be rolled back whole (all-or-nothing)."""
        self._journal.begin()

    def commit(self) -> None:
        self._journal.commit()

    def rollback(self) -> None:
        self._journal.rollback()

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
        elif type_ == "offset":
            if delete:
                self.offsets.delete(key)
            else:
                self.offsets.put(CommittedOffset.from_record(value))
        elif type_ == "quota":
            if delete:
                self.quotas.delete(key.decode())
            else:
                self.quotas.put(Quota.from_record(value))
        elif type_ == "replica_group":
            if delete:
                self.replica_groups.delete(key.decode())
            else:
                self.replica_groups.put(ReplicaGroup.from_record(value))
        elif type_ in ROUTING_TYPES:
            records = getattr(self, ROUTING_TYPES[type_][0])
            if delete:
                records.delete(key)
            else:
                records.put(ROUTING_TYPES[type_][1](value))
        else:
            raise UnknownRecordType(f"unknown record type {type_!r}")

    def build(self) -> MetadataImage:
        image, made = self.image, self.__dict__
        members = image.members
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
            kv=self.kv.build() if "kv" in made else image.kv,
            members=members,
            leases=self.leases.build() if "leases" in made else image.leases,
            offsets=self.offsets.build() if "offsets" in made else image.offsets,
            quotas=self.quotas.build() if "quotas" in made else image.quotas,
            replica_groups=(
                self.replica_groups.build() if "replica_groups" in made else image.replica_groups
            ),
            brokers=self.brokers.build() if "brokers" in made else image.brokers,
            topics=self.topics.build() if "topics" in made else image.topics,
            kvconfig=self.kvconfig.build() if "kvconfig" in made else image.kvconfig,
        )
