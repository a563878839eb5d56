"""The metadata state machine: applies log entries to the image (DESIGN.md §5).

It imports nothing from consensus or gRPC (STYLE.md 4): unit tests drive it
with lists of entries. ``apply`` is deterministic (no clock, no randomness, no
I/O); each entry's changes are all-or-nothing; results are etcd response
messages without headers, or a :class:`~nameserver.errors.Rejected`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from google.protobuf.message import DecodeError

from nameserver.cluster.records import Member
from nameserver.errors import InvalidArgument
from nameserver.kv.apply import delete_range, put, txn
from nameserver.kv.records import KeyValue, KvImage
from nameserver.leases.apply import apply_lease
from nameserver.leases.records import lease_key
from nameserver.offsets.apply import apply_offset
from nameserver.quotas import apply as quotas
from nameserver.replica_groups.apply import apply_replica_group
from nameserver.routing.apply import ROUTING_ENTRY_TYPES, apply_routing
from nameserver.routing.records import ROUTING_TYPES, Broker, KvConfig, TopicQueue
from nameserver.state.image import MetadataDelta, MetadataImage, Provenance
from nameserver.state.mapdelta import records_image
from protos import records_pb2
from raftlog import Effect, Entry
from snapshots import SnapshotColumns


class MetadataStateMachine:
    def __init__(self, image: MetadataImage | None = None) -> None:
        self._image = image or MetadataImage.empty()
        self._delta: MetadataDelta | None = None
        self._applied = (0, 0)  # (offset, term) of the last request applied into the delta

    @property
    def image(self) -> MetadataImage:
        """The current published image; take the reference once per request."""
        return self._image

    @property
    def last_offset(self) -> int:
        return self._image.provenance.last_offset

    # ------------------------------------------------------------------ apply
    def apply(self, offset: int, term: int, entries: Sequence[Entry]) -> tuple[list[Effect], Any]:
        delta = self._delta
        if delta is None:
            delta = self._delta = MetadataDelta(self._image)
        self._applied = (offset, term)  # the delta's provenance, made once at publish
        effects: list[Effect] = []
        delta.begin()
        try:
            # Usage is only worth counting when a limit can apply: a quota is set, or this
            # request sets one (a request with no quota in force can exceed nothing). The
            # answer is the same on every node: quotas are records of the log.
            before = quotas.usage(delta) if _quota_applies(delta, entries) else None
            results = [self._apply_entry(delta, offset, e, effects) for e in entries]
            if before is not None:
                quotas.check(delta, before)
        except DecodeError as exc:
            # e.g. a Txn nested past protobuf's depth limit: the same on every node, a
            # rejection of this request (not a failure of apply)
            delta.rollback()
            raise InvalidArgument(f"etcdserver: request cannot be decoded: {exc}") from None
        except Exception:
            delta.rollback()
            raise
        delta.commit()
        return effects, results[0] if len(results) == 1 else results

    def publish(self) -> None:
        if self._delta is not None:
            self._delta.provenance = Provenance(*self._applied)
            self._image = self._delta.build()
            self._delta = None

    # -------------------------------------------------------------- snapshots
    def capture(self) -> CapturedImage:
        return CapturedImage(self._image)

    def load(
        self, last_offset: int, last_term: int, records: Iterable[tuple[str, bytes, bytes]]
    ) -> list[Effect]:
        new = image_from_records(records, last_offset, last_term)
        effects = diff_images(self._image, new)
        self._delta = None
        self._image = new
        return effects

    def _apply_entry(self, delta: MetadataDelta, rev: int, e: Entry, effects: list[Effect]) -> Any:
        if e.type == "noop":
            return None
        if e.type == "kv":
            op = records_pb2.KvOperation.FromString(e.value)
            which = op.WhichOneof("op")
            if which == "put":
                # the lease sub-delta only when the put names a lease (else it is not read)
                return put(delta.kv, op.put, rev, effects, delta.leases if op.put.lease else None)
            if which == "delete_range":
                return delete_range(delta.kv, op.delete_range, effects)
            raise InvalidArgument("kv entry carries no operation")
        if e.type == "txn":
            req = records_pb2.TxnOperation.FromString(e.value).txn
            return txn(delta.kv, req, rev, effects, delta.leases)
        if e.type == "lease":
            return apply_lease(
                delta, records_pb2.LeaseOperation.FromString(e.value), e, rev, effects
            )
        if e.type == "offset":
            return apply_offset(
                delta, records_pb2.OffsetOperation.FromString(e.value), rev, effects
            )
        if e.type == "replica_group":
            return apply_replica_group(
                delta, records_pb2.ReplicaGroupOperation.FromString(e.value), rev, effects
            )
        if e.type == "quota":
            return quotas.apply_quota(delta, records_pb2.QuotaRecord.FromString(e.value), effects)
        if e.type in ROUTING_ENTRY_TYPES:
            route_op = records_pb2.RoutingOperation.FromString(e.value)
            return apply_routing(delta, route_op, e.type, e.timestamp_ms, rev, effects)
        if e.type == "member":
            if not e.value:  # a removed member
                mid = e.key.decode()
                if delta.member(mid) is not None:
                    delta.remove_member(mid)
                    effects.append(Effect("member", e.key, delete=True))
                return None
            m = Member.from_record(e.value)
            if delta.member(m.id) != m:
                delta.put_member(m)
                effects.append(Effect("member", m.id.encode(), m.to_record()))
            return None
        raise InvalidArgument(f"unknown entry type {e.type!r}")


def _quota_applies(delta: MetadataDelta, entries: Sequence[Entry]) -> bool:
    if delta.has_quotas():
        return True
    for e in entries:
        if e.type == "quota":
            return True
    return False


#: The snapshot thread pauses SNAPSHOT_YIELD_S after every SNAPSHOT_YIELD_EVERY records.
SNAPSHOT_YIELD_EVERY = 2000
SNAPSHOT_YIELD_S = 0.001


class CapturedImage:
    """An image held for a snapshot: immutable, so reading it needs no lock."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.last_offset = image.provenance.last_offset
        self.last_term = image.provenance.last_term

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        """The image's records, pausing briefly every few thousand so that the snapshot
        thread, which holds the GIL while it encodes, never starves the apply, consensus
        and gRPC threads for long (the commit path's stall bound)."""
        for i, record in enumerate(image_records(self.image)):
            if i % SNAPSHOT_YIELD_EVERY == SNAPSHOT_YIELD_EVERY - 1:
                time.sleep(SNAPSHOT_YIELD_S)
            yield record


def image_records(image: MetadataImage) -> Iterator[tuple[str, bytes, bytes]]:
    """Every (type, key, value) record of an image: what a snapshot holds."""
    for key, kv in image.kv.data.items():
        yield "kv", key, kv.to_record()
    for mid, member in sorted(image.members.members.items()):
        yield "member", mid.encode(), member.to_record()
    for lease_id, lease in sorted(image.leases.leases.items()):
        yield "lease", lease_key(lease_id), lease.to_record()
    for key, committed in image.offsets.data.items():
        yield "offset", key, committed.to_record()
    for record_type, quota in sorted(image.quotas.quotas.items()):
        yield "quota", record_type.encode(), quota.to_record()
    for name, group in sorted(image.replica_groups.groups.items()):
        yield "replica_group", name.encode(), group.to_record()
    for type_, (attr, _) in ROUTING_TYPES.items():
        for key, value in getattr(image, attr).data.items():
            yield type_, key, value.to_record()


def image_from_records(
    records: Iterable[tuple[str, bytes, bytes]], last_offset: int, last_term: int
) -> MetadataImage:
    """Rebuild an image from snapshot records (record-level replay: no state-machine rules).

    Given a :class:`snapshots.SnapshotColumns` (restore), the kv records are taken as
    columns and built in bulk (:meth:`KvImage.from_records`)."""
    kv_columns = None
    if isinstance(records, SnapshotColumns):
        kv_columns = records.columns.get("kv")
        records = records.without("kv")
    delta = MetadataDelta(MetadataImage.empty())
    kvs: list[tuple[bytes, KeyValue]] = []
    routes: dict[str, list[tuple[bytes, Any]]] = {t: [] for t in ROUTING_TYPES}
    for type_, key, value in records:
        if type_ == "kv":
            kvs.append((key, KeyValue.from_record(value)))
        elif type_ in routes:
            routes[type_].append((key, ROUTING_TYPES[type_][1](value)))
        else:
            delta.replay(type_, key, value, False)
    delta.provenance = Provenance(last_offset, last_term)
    image = delta.build()
    kvs.sort(key=lambda item: item[0])
    return replace(
        image,
        kv=KvImage.from_sorted_items(kvs)
        if kv_columns is None
        else KvImage.from_records(*kv_columns),
        brokers=records_image(routes["broker"], Broker.size),
        topics=records_image(routes["topic"], TopicQueue.size),
        kvconfig=records_image(routes["kvconfig"], KvConfig.size),
    )


def diff_images(old: MetadataImage, new: MetadataImage) -> list[Effect]:
    """The effects that turn ``old`` into ``new``: puts of changed records, deletes of gone ones."""
    effects: list[Effect] = []
    old_kv, new_kv = old.kv.data, new.kv.data
    for key, kv in new_kv.items():
        if old_kv.get(key) != kv:
            effects.append(Effect("kv", key, kv.to_record()))
    for key in old_kv.keys():
        if key not in new_kv:
            effects.append(Effect("kv", key, delete=True))
    old_m, new_m = old.members.members, new.members.members
    for mid, member in new_m.items():
        if old_m.get(mid) != member:
            effects.append(Effect("member", mid.encode(), member.to_record()))
    for mid in old_m:
        if mid not in new_m:
            effects.append(Effect("member", mid.encode(), delete=True))
    old_l, new_l = old.leases.leases, new.leases.leases
    for lease_id, lease in new_l.items():
        if old_l.get(lease_id) != lease:
            effects.append(Effect("lease", lease_key(lease_id), lease.to_record()))
    for lease_id in old_l:
        if lease_id not in new_l:
            effects.append(Effect("lease", lease_key(lease_id), delete=True))
    old_o, new_o = old.offsets.data, new.offsets.data
    for key, committed in new_o.items():
        if old_o.get(key) != committed:
            effects.append(Effect("offset", key, committed.to_record()))
    effects.extend(Effect("offset", key, delete=True) for key in old_o.keys() if key not in new_o)
    old_q, new_q = old.quotas.quotas, new.quotas.quotas
    for record_type, quota in new_q.items():
        if old_q.get(record_type) != quota:
            effects.append(Effect("quota", record_type.encode(), quota.to_record()))
    effects.extend(Effect("quota", t.encode(), delete=True) for t in old_q if t not in new_q)
    old_g, new_g = old.replica_groups.groups, new.replica_groups.groups
    for name, group in new_g.items():
        if old_g.get(name) != group:
            effects.append(Effect("replica_group", name.encode(), group.to_record()))
    effects.extend(
        Effect("replica_group", n.encode(), delete=True) for n in old_g if n not in new_g
    )
    for type_, (attr, _) in ROUTING_TYPES.items():
        old_r, new_r = getattr(old, attr).data, getattr(new, attr).data
        for key, value in new_r.items():
            if old_r.get(key) != value:
                effects.append(Effect(type_, key, value.to_record()))
        effects.extend(Effect(type_, key, delete=True) for key in old_r.keys() if key not in new_r)
    return effects
