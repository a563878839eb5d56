"""Quota records: :class:`Quota` (limits per record type), the quotas sub-image and its delta."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nameserver.state.mapdelta import MapDelta
from protos import records_pb2


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
