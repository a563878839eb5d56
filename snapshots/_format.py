"""Snapshot files: the image at one offset, written as its own record stream.

A snapshot is a record stream (``snapshots._recordstream``) of kind SNAPSHOT whose stream
header's base offset is the snapshot's ``last_offset``. Every frame carries that offset,
and frame number *k* of the file (0-based) carries sub-index *k*::

    stream header        magic, version, kind SNAPSHOT, base offset = last_offset (CRC'd)
    frame sub 0          SnapshotHeader (protos/snapshot.proto): format version, cluster
                         id, last offset and term, raft index, created_ms, hash algorithm,
                         record count, and per type (sorted, none empty) count and hash
    frame sub 1..N       records.Effect(type, key, value), delete = false; one per (type,
                         key), in any order
    frame sub N+1        SnapshotFooter: record count N, crc32c of every byte before it

Nothing may follow the footer. N is at most 2**32 - 2 (the sub-index is a u32).

Content hashes per type (``HASH_ALGORITHM``): :mod:`snapshots._digest`. Writing:
:mod:`snapshots._writer`; reading and verifying: :mod:`snapshots._reader`. This module holds
what they share: the format's constants, the errors, the meta and info records, and the
header checks.

Verification on read (:class:`SnapshotReader`): stream header CRC, header frame, every
frame's CRC32C, offsets and sub-indexes, record count, footer checksum, no trailing data,
and the per-type counts and hashes recomputed from the records against the header.

Errors::

    SnapshotError                  root of the snapshot errors of this package
    ├── SnapshotCorruptError       a snapshot file fails verification; `path`, `position`
    │                              (byte offset of the bad frame, None when not one place)
    └── SnapshotMismatchError      write_snapshot: the records disagree with the counts and
                                   hashes given in the meta (nothing is written)

Misuse (a bad :class:`SnapshotMeta`, a one-shot iterator where two passes are needed) raises
ValueError or TypeError; the file system raises OSError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeAlias

from protos.snapshot_pb2 import SnapshotHeader
from snapshots import _crc
from snapshots._digest import HASH_ALGORITHM, RecordDigest, is_hash_text
from snapshots._recordstream import Record

__all__ = [
    "CHUNK_BYTES",
    "MAX_RECORDS",
    "SNAPSHOT_FORMAT_VERSION",
    "RecordSource",
    "Snapshot",
    "SnapshotColumns",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotMeta",
    "SnapshotMismatchError",
    "SnapshotRecord",
    "crc32c",
    "header_problem",
    "info_from_header",
    "snapshot_name",
]

#: Version of the snapshot layout above (the record-stream framing has its own).
SNAPSHOT_FORMAT_VERSION: Final = 1

#: One snapshot record: (type, key, value).
SnapshotRecord: TypeAlias = tuple[str, bytes, bytes]
#: What :func:`write_snapshot` takes: records, or a callable returning a fresh iterable of
#: them (see there for when they are read twice).
RecordSource: TypeAlias = Iterable[SnapshotRecord] | Callable[[], Iterable[SnapshotRecord]]

#: Most records in one snapshot (the sub-index is a u32; the footer takes one).
MAX_RECORDS: Final = 2**32 - 2
#: Writes, checksum updates and progress calls happen per chunk of about this many bytes.
CHUNK_BYTES: Final = 1 << 20

crc32c: Callable[[bytes | bytearray | memoryview, int], int] = _crc.crc32c


def snapshot_name(last_offset: int) -> str:
    """The file name of the snapshot at `last_offset` (in a snapshot store's directory)."""
    return f"{last_offset:020d}.snap"


# --------------------------------------------------------------------------- errors


class SnapshotError(Exception):
    """Root of the snapshot errors of this package."""


class SnapshotCorruptError(SnapshotError):
    """A snapshot file fails verification.

    `path` names the file (None for an unnamed stream), `position` is the byte offset of
    the frame at fault, or None when the fault is not at one place (e.g. a content hash).
    """

    def __init__(self, path: str | None, reason: str, position: int | None = None) -> None:
        where = f" at byte {position}" if position is not None else ""
        super().__init__(f"{path or '<snapshot>'}: corrupt snapshot{where}: {reason}")
        self.path = path
        self.reason = reason
        self.position = position


class SnapshotMismatchError(SnapshotError):
    """The records given to :func:`write_snapshot` disagree with the meta's counts/hashes."""

    def __init__(self, path: str | None, expected: RecordDigest, actual: RecordDigest) -> None:
        super().__init__(
            f"{path or '<snapshot>'}: the records do not match the meta: expected counts "
            f"{expected.counts} hashes {expected.hashes}, got counts {actual.counts} "
            f"hashes {actual.hashes}"
        )
        self.path = path
        self.expected = expected
        self.actual = actual


# --------------------------------------------------------------------------- meta and info


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """What the writer of a snapshot says about it.

    `counts` and `hashes` are both given (the writer knows them, e.g. from a
    :class:`RecordDigest` it kept; they are checked while writing) or both None (computed
    by a first pass over the records). `created_ms` None means the time of writing.
    """

    cluster_id: str
    last_offset: int
    last_term: int
    raft_index: int = 0
    created_ms: int | None = None
    counts: Mapping[str, int] | None = None
    hashes: Mapping[str, str] | None = None
    engine_meta: bytes = b""

    def validate(self) -> None:
        """Raise ValueError naming the first field that is out of range."""
        for name in ("last_offset", "last_term", "raft_index"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
                raise ValueError(f"SnapshotMeta.{name} must be an int in [0, 2**63), got {value!r}")
        if self.created_ms is not None and not 0 <= self.created_ms < 2**63:
            raise ValueError(f"SnapshotMeta.created_ms out of range: {self.created_ms!r}")
        if not isinstance(self.cluster_id, str):
            raise ValueError(f"SnapshotMeta.cluster_id must be a str, got {self.cluster_id!r}")
        if (self.counts is None) != (self.hashes is None):
            raise ValueError("SnapshotMeta.counts and .hashes must be given together or not at all")
        if self.counts is not None and self.hashes is not None:
            if any(c <= 0 for c in self.counts.values()):
                raise ValueError("SnapshotMeta.counts must list only types with records")
            RecordDigest.from_summary(self.counts, self.hashes)

    def with_digest(self, digest: RecordDigest) -> SnapshotMeta:
        """This meta with the counts and hashes of `digest`."""
        return dataclasses.replace(self, counts=digest.counts, hashes=digest.hashes)


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A snapshot's header fields, where it is, and its size."""

    path: Path | None
    size_bytes: int
    format_version: int
    cluster_id: str
    last_offset: int
    last_term: int
    raft_index: int
    created_ms: int
    hash_algorithm: str
    record_count: int
    counts: Mapping[str, int]
    hashes: Mapping[str, str]
    engine_meta: bytes = b""

    @property
    def digest(self) -> RecordDigest:
        return RecordDigest.from_summary(self.counts, self.hashes)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``metaledger snapshot inspect --output json``)."""
        return {
            "path": None if self.path is None else str(self.path),
            "size_bytes": self.size_bytes,
            "format_version": self.format_version,
            "cluster_id": self.cluster_id,
            "last_offset": self.last_offset,
            "last_term": self.last_term,
            "raft_index": self.raft_index,
            "created_ms": self.created_ms,
            "hash_algorithm": self.hash_algorithm,
            "record_count": self.record_count,
            "counts": dict(self.counts),
            "hashes": dict(self.hashes),
        }


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A whole snapshot read into memory (:func:`read_snapshot`), verified."""

    info: SnapshotInfo
    records: list[SnapshotRecord]

    def to_dict(self) -> dict[tuple[str, bytes], bytes]:
        """The image as ``{(type, key): value}`` (e.g. a base for :func:`replay`)."""
        return {(t, k): v for t, k, v in self.records}


@dataclass(frozen=True, slots=True)
class SnapshotColumns:
    """A whole snapshot read into memory by type (:func:`read_snapshot_columns`), verified.

    ``columns[type]`` is ``(keys, values)``, two parallel lists in file order. Restore
    builds each sub-image from its columns in bulk instead of one record tuple at a time.
    Iterating yields the ``(type, key, value)`` records, type by type.
    """

    info: SnapshotInfo
    columns: Mapping[str, tuple[list[bytes], list[bytes]]]

    def __iter__(self) -> Iterator[SnapshotRecord]:
        return self.without("")  # no record has an empty type

    def __len__(self) -> int:
        return sum(len(keys) for keys, _ in self.columns.values())

    def without(self, type_: str) -> Iterator[SnapshotRecord]:
        """The records of every type but `type_` (whose columns the caller takes whole)."""
        for t, (keys, values) in self.columns.items():
            if t != type_:
                for key, value in zip(keys, values, strict=True):
                    yield t, key, value


def info_from_header(path: Path | None, size: int, header: SnapshotHeader) -> SnapshotInfo:
    return SnapshotInfo(
        path=path,
        size_bytes=size,
        format_version=header.format_version,
        cluster_id=header.cluster_id,
        last_offset=header.last_offset,
        last_term=header.last_term,
        raft_index=header.raft_index,
        created_ms=header.created_ms,
        hash_algorithm=header.hash_algorithm,
        record_count=header.record_count,
        counts={t.type: t.count for t in header.types},
        hashes={t.type: t.hash for t in header.types},
        engine_meta=header.engine_meta,
    )


def header_problem(header: SnapshotHeader, base_offset: int, frame: Record) -> str | None:
    """What is wrong with a decoded header frame, or None."""
    if header.format_version != SNAPSHOT_FORMAT_VERSION:
        return f"unsupported snapshot format version {header.format_version}"
    if header.hash_algorithm != HASH_ALGORITHM:
        return f"unknown hash algorithm {header.hash_algorithm!r}"
    if frame.offset != base_offset or frame.sub != 0 or header.last_offset != base_offset:
        return (
            f"header frame ({frame.offset}, {frame.sub}) with last offset "
            f"{header.last_offset} in a stream based at {base_offset}"
        )
    types = [t.type for t in header.types]
    if types != sorted(set(types)) or any(t.count <= 0 for t in header.types):
        return "per-type counts are not sorted, unique and positive"
    if sum(t.count for t in header.types) != header.record_count:
        return f"per-type counts do not add up to {header.record_count}"
    if not all(is_hash_text(t.hash) for t in header.types):
        return "a content hash is not 32 lowercase hex digits"
    return None
