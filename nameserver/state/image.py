"""The metadata image: immutable, one sub-image per record kind (as Kafka's
``MetadataImage``).

Readers take ``state.image`` (one reference, no lock) and see one consistent
offset. The apply thread builds a :class:`MetadataDelta` on top of the current
image and publishes ``delta.build()``, which shares every untouched sub-image.

Which sub-images there are is the registry's (:mod:`nameserver.state.registry`): an
image has one attribute per :class:`~nameserver.state.registry.RecordKind` (its
``field``), and ``nameserver/kinds.py`` lists the kinds. The server's kinds, by record
type (the ``type`` of change-log effects), with their modules:

* ``kv``     -- etcd key-value pairs (:mod:`nameserver.kv.records`), value = ``records.KvRecord``
* ``member`` -- cluster members and their client URLs (:mod:`nameserver.cluster.records`)
* ``lease``  -- leases, key = the lease id as 8 bytes big-endian (:mod:`nameserver.leases.records`)
* ``offset`` -- replicator offsets, key = job, NUL, partition (:mod:`nameserver.offsets.records`)
* ``quota``  -- quota per record type, key = the type's name (:mod:`nameserver.quotas.records`)
* ``replica_group`` -- replica groups, key = the broker name
  (:mod:`nameserver.replica_groups.records`)
* ``broker``, ``topic``, ``kvconfig`` -- RocketMQ route data (brokers, queue data per topic
  and broker name, KV config items); keys and values in :mod:`nameserver.routing.records`.
  Clusters are derived from the broker records, not stored.
* ``mvcc``, ``revision`` -- the kv store's compaction revision and its revision counter
  (:mod:`nameserver.kv.records`, :mod:`nameserver.kv.revision`)
* ``alarm`` -- members' raised alarms (etcd's NOSPACE, CORRUPT), key = member id (8 bytes
  big-endian) and alarm type (1 byte) (:mod:`nameserver.cluster.records`)

The keys attached to a lease are not part of the lease record: they are an index
of the kv sub-image (``KvImage.by_lease``), derived from ``KeyValue.lease`` and kept
by :class:`~nameserver.kv.records.KvDelta` on every put and delete, so change-log replay
and snapshots rebuild it from the kv records alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nameserver.state.mapdelta import Journal, Journaled
from nameserver.state.registry import Registry

if TYPE_CHECKING:
    from nameserver.auth.records import AuthDelta, AuthImage
    from nameserver.cluster.records import AlarmsDelta, AlarmsImage, MembersDelta, MembersImage
    from nameserver.kv.records import (
        KvDelta,
        KvImage,
        MvccDelta,
        MvccImage,
        RevisionDelta,
        RevisionImage,
    )
    from nameserver.leases.records import LeaseDelta, LeasesImage
    from nameserver.offsets.records import OffsetDelta, OffsetsImage
    from nameserver.quotas.records import QuotaDelta, QuotasImage
    from nameserver.replica_groups.records import ReplicaGroupDelta, ReplicaGroupsImage
    from nameserver.routing.records import Broker, KvConfig, TopicQueue
    from nameserver.state.mapdelta import RecordsDelta, RecordsImage


@dataclass(frozen=True, slots=True)
class Provenance:
    """How far the image got: the last offset (and its term) built into it."""

    last_offset: int = 0
    last_term: int = 0


_NO_PROVENANCE = Provenance()


class MetadataImage:
    """One immutable image: ``provenance``, ``registry`` and one sub-image per kind.

    The sub-images are plain instance attributes named by each kind's ``field`` (one dict
    lookup to read, as a slot was); the annotations below only type the server's kinds
    for mypy, a kind needs none (:meth:`sub` reads any). Never mutated once made.
    """

    provenance: Provenance
    registry: Registry
    # typed views of the server's kinds (nameserver/kinds.py); set from the registry
    kv: KvImage
    members: MembersImage
    leases: LeasesImage
    offsets: OffsetsImage
    quotas: QuotasImage
    replica_groups: ReplicaGroupsImage
    brokers: RecordsImage[Broker]
    topics: RecordsImage[TopicQueue]
    kvconfig: RecordsImage[KvConfig]
    alarms: AlarmsImage
    mvcc: MvccImage
    auth: AuthImage
    store_rev: RevisionImage

    def __init__(
        self, registry: Registry, provenance: Provenance = _NO_PROVENANCE, **subs: Any
    ) -> None:
        """An image of ``registry``'s kinds (the server's is :data:`nameserver.kinds.REGISTRY`):
        each empty unless given by field name in ``subs``."""
        attrs = self.__dict__
        attrs.update(registry.empty_subs)
        for name, sub in subs.items():
            if name not in registry.by_field:
                raise TypeError(f"MetadataImage has no sub-image {name!r}")
            attrs[name] = sub
        attrs["provenance"] = provenance
        attrs["registry"] = registry

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MetadataImage is immutable (setting {name!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MetadataImage({self.provenance}, {sorted(self.registry.by_field)})"

    @property
    def revision(self) -> int:
        """The store revision (etcd's): the registry's counter when the image has one, else
        the last offset (:mod:`nameserver.kv.revision`)."""
        counter = self.registry.revision
        if counter is not None:
            revision = counter[1](self.__dict__[counter[0]])
            if revision >= 0:
                return revision
        return self.provenance.last_offset

    @property
    def offset(self) -> int:
        """The last log offset built into the image (what the image's own records and
        route reads are stamped with; the store revision may stay behind it)."""
        return self.provenance.last_offset

    def sub(self, field: str) -> Any:
        """The sub-image of the kind whose field is ``field``."""
        return self.__dict__[field]

    def replace(self, provenance: Provenance | None = None, **subs: Any) -> MetadataImage:
        """This image with other sub-images (by field) or provenance; shares the rest."""
        new = object.__new__(MetadataImage)
        attrs = new.__dict__
        attrs.update(self.__dict__)
        for name, sub in subs.items():
            if name not in self.registry.by_field:
                raise TypeError(f"MetadataImage has no sub-image {name!r}")
            attrs[name] = sub
        if provenance is not None:
            attrs["provenance"] = provenance
        return new

    @staticmethod
    def empty(registry: Registry) -> MetadataImage:
        return MetadataImage(registry)


class MetadataDelta(Journaled):
    """Changes on top of one image; :meth:`build` makes the next image.

    Each sub-delta is made on first use, by the kind's ``delta`` (an apply group of puts
    touches only ``kv``): making and building all of them per group was a third of the
    apply cost of a one-put group. All sub-deltas share one undo :class:`Journal`, so a
    request's changes roll back whole.
    """

    # typed views of the server's kinds, made on first use by __getattr__ (then plain
    # instance attributes); a kind needs none (:meth:`sub` makes any)
    kv: KvDelta
    members: MembersDelta
    leases: LeaseDelta
    offsets: OffsetDelta
    quotas: QuotaDelta
    replica_groups: ReplicaGroupDelta
    brokers: RecordsDelta[Broker]
    topics: RecordsDelta[TopicQueue]
    kvconfig: RecordsDelta[KvConfig]
    alarms: AlarmsDelta
    mvcc: MvccDelta
    auth: AuthDelta
    store_rev: RevisionDelta

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.registry = image.registry
        self.provenance = image.provenance
        self._journal = Journal()
        self._made: list[str] = []  # fields whose sub-delta exists, in the order made

    def __getattr__(self, name: str) -> Any:
        # only called for a missing attribute: a sub-delta not made yet (no lock, no
        # descriptor on later reads, unlike functools.cached_property)
        kind = self.registry.by_field.get(name) if name[0] != "_" else None
        if kind is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        delta = kind.delta(self.image.__dict__[name])
        delta._journal = self._journal
        self.__dict__[name] = delta
        self._made.append(name)
        return delta

    def sub(self, field: str) -> Any:
        """The sub-delta of the kind whose field is ``field`` (made on first use)."""
        return getattr(self, field)

    def made(self, field: str) -> Any:
        """The sub-delta of ``field`` if something made it already, else None (to read
        without making one)."""
        return self.__dict__.get(field)

    def counted_revision(self) -> int:
        """The registry's revision counter as this delta holds it now, -1 while the store
        counts by offset (or has no counter): what a domain records beside an offset to
        place it among store revisions (:mod:`nameserver.kv.revision`)."""
        counter = self.registry.revision
        if counter is None:
            return -1
        field, read = counter
        sub = self.__dict__.get(field)
        return read(self.image.__dict__[field] if sub is None else sub)

    def replay(self, type_: str, key: bytes, value: bytes, delete: bool) -> None:
        """Turn one change-log record into change (used by snapshots and replay)."""
        kind = self.registry.kind(type_)
        records = getattr(self, kind.field)
        if delete:
            records.delete(kind.key_of(key))
        else:
            record = kind.decode(value)
            records.put(record)
            if kind.replayed is not None:
                kind.replayed(self, record)

    def build(self) -> MetadataImage:
        image = self.image
        if not self._made and self.provenance is image.provenance:
            return image
        made = self.__dict__
        return image.replace(self.provenance, **{f: made[f].build() for f in self._made})
