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
  and broker name, KV config items); keys and values in :mod:`nameserver.routing.records`.
  Clusters are derived from the broker records, not stored.

The keys attached to a lease are not part of the lease record: they are an index
of the kv sub-image (``KvImage.by_lease``), derived from ``KeyValue.lease`` and kept
by :class:`KvDelta` on every put and delete, so change-log replay and snapshots
rebuild it from the kv records alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from nameserver.cluster.records import Member, MembersImage
from nameserver.kv.records import KeyValue, KvDelta, KvImage
from nameserver.leases.records import Lease, LeaseDelta, LeasesImage
from nameserver.offsets.records import CommittedOffset, OffsetDelta, OffsetsImage
from nameserver.quotas.records import Quota, QuotaDelta, QuotasImage
from nameserver.replica_groups.records import ReplicaGroup, ReplicaGroupDelta, ReplicaGroupsImage
from nameserver.routing.records import (
    ROUTING_TYPES,
    Broker,
    KvConfig,
    TopicQueue,
    key_of_broker,
    key_of_kvconfig,
    key_of_topic,
)
from nameserver.state.mapdelta import Journal, MapDelta, RecordsDelta, RecordsImage

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


@dataclass(frozen=True, slots=True)
class Provenance:
    """How far the image got: the last offset (and its term) built into it."""

    last_offset: int = 0
    last_term: int = 0


@dataclass(frozen=True, slots=True)
class MetadataImage:
    provenance: Provenance = Provenance()
    kv: KvImage = KvImage()  # noqa: RUF009 (frozen, immutable)
    members: MembersImage = MembersImage()  # noqa: RUF009 (frozen, immutable)
    leases: LeasesImage = LeasesImage()  # noqa: RUF009 (frozen, immutable)
    offsets: OffsetsImage = OffsetsImage()  # noqa: RUF009 (frozen, immutable)
    quotas: QuotasImage = QuotasImage()  # noqa: RUF009 (frozen, immutable)
    replica_groups: ReplicaGroupsImage = ReplicaGroupsImage()  # noqa: RUF009 (frozen, immutable)
    brokers: RecordsImage[Broker] = RecordsImage()  # noqa: RUF009 (frozen, immutable)
    topics: RecordsImage[TopicQueue] = RecordsImage()  # noqa: RUF009 (frozen, immutable)
    kvconfig: RecordsImage[KvConfig] = RecordsImage()  # noqa: RUF009 (frozen, immutable)

    @property
    def revision(self) -> int:
        return self.provenance.last_offset

    @staticmethod
    def empty() -> MetadataImage:
        return MetadataImage()


#: How MetadataDelta makes each sub-delta from its image.
_SUB_DELTAS: dict[str, Callable[[MetadataImage], KvDelta | MapDelta[Any, Any]]] = {
    "kv": lambda image: KvDelta(image.kv),
    "leases": lambda image: LeaseDelta(image.leases),
    "offsets": lambda image: OffsetDelta(image.offsets),
    "quotas": lambda image: QuotaDelta(image.quotas),
    "replica_groups": lambda image: ReplicaGroupDelta(image.replica_groups),
    "brokers": lambda image: RecordsDelta(image.brokers, key_of_broker, Broker.size),
    "topics": lambda image: RecordsDelta(image.topics, key_of_topic, TopicQueue.size),
    "kvconfig": lambda image: RecordsDelta(image.kvconfig, key_of_kvconfig, KvConfig.size),
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
