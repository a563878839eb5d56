"""Replicator offset records: :class:`CommittedOffset`, the offsets sub-image and its delta."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from nameserver.state.mapdelta import MapDelta
from nameserver.state.sortedmap import PersistentSortedMap
from protos import records_pb2


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
    #: -1 unless the kv store counted etcd's way then: the store revision at the commit of a
    #: lease's grant token (an offset), and the store revision at the last reset; see
    #: :func:`nameserver.offsets.apply.fence_of`
    fencing_revision: int = -1
    reset_store_revision: int = -1

    @property
    def key(self) -> bytes:
        return offset_key(self.job, self.partition)

    def size(self) -> int:
        """What it counts against the offset byte quota: its key and offset bytes."""
        return len(self.key) + len(self.offset)

    def to_record(self) -> bytes:
        record = records_pb2.OffsetRecord(
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
        )
        # unset while the store counts by offset: the bytes of a record as before
        if self.fencing_revision >= 0:
            record.fencing_revision = self.fencing_revision
        if self.reset_store_revision >= 0:
            record.reset_store_revision = self.reset_store_revision
        data: bytes = record.SerializeToString()
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
            r.fencing_revision if r.HasField("fencing_revision") else -1,
            r.reset_store_revision if r.HasField("reset_store_revision") else -1,
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
