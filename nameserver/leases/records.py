"""Lease records: :class:`Lease`, the leases sub-image and its delta."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2


def lease_key(lease_id: int) -> bytes:
    """The change-log key of a lease: its id as 8 bytes big-endian."""
    return lease_id.to_bytes(8, "big", signed=True)


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease. ``granted_offset`` (the grant's offset) is its fencing token;
    ``last_refresh_ms`` is the last keepalive checkpointed into the log (the grant's
    timestamp at first). Its deadline is ``last_refresh_ms + ttl_s * 1000``.
    ``granted_revision`` is the store revision at the grant when the kv store counted etcd's
    way then (-1: it counted by offset, and the offset is that revision); it places the
    token among key revisions (:func:`nameserver.offsets.apply.fence_of`)."""

    id: int
    ttl_s: int
    granted_offset: int
    last_refresh_ms: int
    granted_revision: int = -1

    @property
    def deadline_ms(self) -> int:
        return self.last_refresh_ms + self.ttl_s * 1000

    def to_record(self) -> bytes:
        record = records_pb2.LeaseRecord(
            id=self.id,
            ttl_s=self.ttl_s,
            granted_offset=self.granted_offset,
            last_refresh_ms=self.last_refresh_ms,
        )
        if self.granted_revision >= 0:  # unset otherwise: the bytes of a lease as before
            record.granted_revision = self.granted_revision
        data: bytes = record.SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Lease:
        r = records_pb2.LeaseRecord.FromString(data)
        rev = r.granted_revision if r.HasField("granted_revision") else -1
        return Lease(r.id, r.ttl_s, r.granted_offset, r.last_refresh_ms, rev)


@dataclass(frozen=True, slots=True)
class LeasesImage:
    leases: Mapping[int, Lease] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, lease_id: int) -> Lease | None:
        return self.leases.get(lease_id)

    def __len__(self) -> int:
        return len(self.leases)


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
