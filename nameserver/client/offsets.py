"""The offsets surface: ``metaledger.v1.Offsets`` and ``metaledger.v1.Quotas``.

:class:`OffsetsApi` gives :class:`nameserver.client.Client` ``offsets_commit``,
``offsets_fetch``, ``offsets_list``, ``offsets_reset``, ``quota_set`` and ``quota_list``;
they fail over and raise the client's typed errors like every other call. A rejected
commit is :class:`~nameserver.client.NotFound` (the lease is gone) or
:class:`~nameserver.client.FailedPrecondition` (a token that is foreign or stale, a reset
not seen, a position going backwards, a version or epoch mismatch);
:class:`~nameserver.client.ResourceExhausted` names the record type whose quota a write
would exceed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nameserver.client.kv import Bytesish, to_bytes
from nameserver.client.transport import Transport
from protos.metaledger.v1 import offsets_pb2, offsets_pb2_grpc, quotas_pb2, quotas_pb2_grpc

__all__ = [
    "CommittedOffset",
    "OffsetList",
    "OffsetWrite",
    "OffsetsApi",
    "QuotaUsage",
]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
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
    reset_revision: int
    #: the serving node's apply offset when it answered (reads only)
    revision: int = 0

    @classmethod
    def from_proto(cls, o: offsets_pb2.Offset, revision: int = 0) -> CommittedOffset:
        return cls(
            o.job,
            o.partition,
            o.offset,
            o.position,
            o.version,
            o.epoch,
            o.lease_id,
            o.fencing_token,
            o.create_revision,
            o.mod_revision,
            o.reset_revision,
            revision,
        )


@dataclass(frozen=True, slots=True)
class OffsetList:
    offsets: list[CommittedOffset]
    revision: int
    consistency: str


@dataclass(frozen=True, slots=True)
class OffsetWrite:
    """The answer to a commit or reset: its revision, the new version and epoch, and (a
    commit with keepalive) the lease's TTL in seconds."""

    revision: int
    version: int
    epoch: int
    ttl: int = 0


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    record_type: str
    max_keys: int
    max_bytes: int
    keys: int
    bytes: int


def _offsets(method: str) -> Any:
    return lambda s: getattr(offsets_pb2_grpc.OffsetsStub(s.channel), method)


def _quotas(method: str) -> Any:
    return lambda s: getattr(quotas_pb2_grpc.QuotasStub(s.channel), method)


class OffsetsApi(Transport):
    """Replicator offsets and record-type quotas (metaledger.v1.Offsets, .Quotas)."""

    def offsets_commit(
        self,
        job: str,
        partition: str,
        offset: Bytesish,
        *,
        lease_id: int,
        fencing_token: int,
        position: int = 0,
        expected_version: int = 0,
        epoch: int = 0,
        keepalive: bool = False,
    ) -> OffsetWrite:
        """Offsets.Commit: a compare-and-set of (job, partition), fenced by the lease and
        token; ``keepalive`` also keeps the lease alive (``ttl`` of the answer)."""
        req = offsets_pb2.CommitRequest(
            job=job,
            partition=partition,
            offset=to_bytes(offset),
            position=position,
            lease_id=lease_id,
            fencing_token=fencing_token,
            expected_version=expected_version,
            epoch=epoch,
            keepalive=keepalive,
        )
        r = self._call(_offsets("Commit"), req, write=True)
        return OffsetWrite(r.revision, r.version, r.epoch, r.ttl)

    def offsets_reset(
        self,
        job: str,
        partition: str,
        offset: Bytesish,
        *,
        position: int = 0,
        expected_version: int = 0,
    ) -> OffsetWrite:
        req = offsets_pb2.ResetRequest(
            job=job,
            partition=partition,
            offset=to_bytes(offset),
            position=position,
            expected_version=expected_version,
        )
        r = self._call(_offsets("Reset"), req, write=True)
        return OffsetWrite(r.revision, r.version, r.epoch)

    def offsets_fetch(self, job: str, partition: str) -> CommittedOffset:
        req = offsets_pb2.FetchRequest(job=job, partition=partition)
        r = self._call(_offsets("Fetch"), req, write=False)
        return CommittedOffset.from_proto(r.offset, r.revision)

    def offsets_list(self, job: str, prefix: bool = False) -> OffsetList:
        req = offsets_pb2.ListRequest(job=job, prefix=prefix)
        r = self._call(_offsets("List"), req, write=False)
        return OffsetList(
            [CommittedOffset.from_proto(o, r.revision) for o in r.offsets],
            r.revision,
            r.consistency,
        )

    def quota_set(self, record_type: str, max_keys: int = 0, max_bytes: int = 0) -> int:
        """Set a record type's limits (0 = unlimited); returns the revision."""
        req = quotas_pb2.SetQuotaRequest(
            record_type=record_type, max_keys=max_keys, max_bytes=max_bytes
        )
        r = self._call(_quotas("Set"), req, write=True)
        return int(r.revision)

    def quota_list(self) -> list[QuotaUsage]:
        r = self._call(_quotas("List"), quotas_pb2.ListQuotasRequest(), write=False)
        return [
            QuotaUsage(q.record_type, q.max_keys, q.max_bytes, q.keys, q.bytes) for q in r.quotas
        ]
