"""Snapshot files (DESIGN.md §4): the image at one offset, written as its own record stream.

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

Content hash (``HASH_ALGORITHM`` = ``"blake2b-128-sum-v1"``), per type, so that any writer
(the server, a Spark job) gets the same hash for the same *set* of records in any order::

    record_hash(type, key, value) = int.from_bytes(blake2b(
        u64le(len(type_utf8)) + type_utf8 + u64le(len(key)) + key + u64le(len(value)) + value,
        digest_size=16, person=b"metaledger.snap1").digest(), "little")
    hash(type) = sum of record_hash over the type's records, mod 2**128,
                 written as 32 lowercase hex digits (most significant first)

Sums of partial digests add up, so :class:`RecordDigest` merges (a job hashes each
partition and combines the results) and takes records away again (:meth:`~RecordDigest.
discard`, for a digest kept up to date as an image changes). The sum is an integrity
check between cooperating writers, not a defence against someone forging collisions.

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

import contextlib
import dataclasses
import hashlib
import io
import mmap
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, TypeAlias

import crc32c as _crc32c_module
from google.protobuf.message import DecodeError

from protos.records_pb2 import Effect
from protos.snapshot_pb2 import SnapshotFooter, SnapshotHeader, TypeDigest
from snapshots._recordstream import (
    MAX_BODY_BYTES,
    Record,
    RecordReader,
    RecordStreamError,
    StreamKind,
    encode_header,
    encode_record,
)

__all__ = [
    "HASH_ALGORITHM",
    "SNAPSHOT_FORMAT_VERSION",
    "RecordDigest",
    "RecordSource",
    "Snapshot",
    "SnapshotColumns",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotMeta",
    "SnapshotMismatchError",
    "SnapshotReader",
    "SnapshotRecord",
    "encode_frames",
    "encode_snapshot",
    "inspect",
    "open_snapshot",
    "read_snapshot",
    "read_snapshot_columns",
    "record_hash",
    "verify_snapshot",
    "write_snapshot",
    "write_snapshot_frames",
]

#: Version of the snapshot layout above (the record-stream framing has its own).
SNAPSHOT_FORMAT_VERSION: Final = 1
#: Name of the content-hash definition above, recorded in every header.
HASH_ALGORITHM: Final = "blake2b-128-sum-v1"

#: One snapshot record: (type, key, value).
SnapshotRecord: TypeAlias = tuple[str, bytes, bytes]
#: What :func:`write_snapshot` takes: records, or a callable returning a fresh iterable of
#: them (see there for when they are read twice).
RecordSource: TypeAlias = Iterable[SnapshotRecord] | Callable[[], Iterable[SnapshotRecord]]

_PERSON = b"metaledger.snap1"
_HASH_MOD = 2**128
_LEN = struct.Struct("<Q")
_pack_len = _LEN.pack
_MAX_RECORDS = 2**32 - 2
_CHUNK_BYTES = 1 << 20  # writes, checksum updates and progress calls happen per chunk
_READ_BUFFER_BYTES = 256 * 1024
_SYNC_EVERY_BYTES = 8 * 1024 * 1024  # see _SyncingWriter
_HEX_DIGITS = frozenset("0123456789abcdef")

_crc32c: Callable[[bytes | bytearray | memoryview, int], int] = _crc32c_module.crc32c
#: A frame's length and CRC, then its body's offset and sub-index (_recordstream's layout).
_FRAME_HEAD = struct.Struct("<IIQI")


class _Anomaly(Exception):
    """SnapshotReader's fast pass met something only the careful pass may judge."""


@contextlib.contextmanager
def _mapped(file: BinaryIO) -> Iterator[bytes | mmap.mmap]:
    """The whole of `file` as one buffer: a read-only memory map of a real file (no copy),
    else its bytes."""
    try:
        fd = file.fileno()
    except (OSError, AttributeError, io.UnsupportedOperation):
        fd = -1
    if fd < 0:
        file.seek(0)
        yield file.read()
        return
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as buf:
        yield buf


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


# --------------------------------------------------------------------------- content hash


_BASE_HASHER = hashlib.blake2b(digest_size=16, person=_PERSON)


def _type_hasher(type_: str) -> Any:
    """A blake2b state that has absorbed the type's length prefix and name."""
    encoded = type_.encode()
    hasher = _BASE_HASHER.copy()
    hasher.update(_LEN.pack(len(encoded)) + encoded)
    return hasher


def _is_hash_text(text: str) -> bool:
    return len(text) == 32 and _HEX_DIGITS.issuperset(text)


def record_hash(type_: str, key: bytes, value: bytes) -> int:
    """The 128-bit hash of one record (see the module docstring)."""
    hasher = _type_hasher(type_)
    hasher.update(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
    return int.from_bytes(hasher.digest(), "little")


class RecordDigest:
    """Per-type record counts and order-independent content hashes, built incrementally.

    ``add`` every record once (order does not matter); ``merge`` digests of disjoint parts
    to get the digest of the whole; ``discard`` takes a record added before away again.
    Types whose count is 0 do not appear in :attr:`counts` and :attr:`hashes`. Picklable.
    """

    __slots__ = ("_counts", "_hashers", "_sums")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._sums: dict[str, int] = {}
        self._hashers: dict[str, Any] = {}  # cache of _type_hasher, not state

    def add(self, type_: str, key: bytes, value: bytes) -> None:
        hasher = self._hashers.get(type_) or self._start(type_)
        h = hasher.copy()
        h.update(b"".join((_pack_len(len(key)), key, _pack_len(len(value)), value)))
        self._sums[type_] += int.from_bytes(h.digest(), "little")
        self._counts[type_] += 1

    def discard(self, type_: str, key: bytes, value: bytes) -> None:
        """Take away one record that was added (the digest of the remaining records)."""
        hasher = self._hashers.get(type_) or self._start(type_)
        h = hasher.copy()
        h.update(b"".join((_pack_len(len(key)), key, _pack_len(len(value)), value)))
        self._sums[type_] -= int.from_bytes(h.digest(), "little")
        self._counts[type_] -= 1

    def _start(self, type_: str) -> Any:
        """The type's hasher, creating the type's entries (sums are reduced mod 2**128 only
        when read: adding unreduced ints is cheaper)."""
        self._counts.setdefault(type_, 0)
        self._sums.setdefault(type_, 0)
        hasher = self._hashers[type_] = _type_hasher(type_)
        return hasher

    def merge(self, other: RecordDigest) -> None:
        """Add `other`'s records to this digest (in place; `other` is unchanged)."""
        for type_, count in other._counts.items():
            self._counts[type_] = self._counts.get(type_, 0) + count
            self._sums[type_] = (self._sums.get(type_, 0) + other._sums[type_]) % _HASH_MOD

    @classmethod
    def combine(cls, digests: Iterable[RecordDigest]) -> RecordDigest:
        """A new digest of all the parts' records (e.g. a reduce over partitions)."""
        result = cls()
        for digest in digests:
            result.merge(digest)
        return result

    @classmethod
    def from_summary(cls, counts: Mapping[str, int], hashes: Mapping[str, str]) -> RecordDigest:
        """The digest that :attr:`counts` and :attr:`hashes` describe.

        Raises ValueError unless both name the same types and every hash is 32 lowercase
        hex digits.
        """
        if set(counts) != set(hashes):
            raise ValueError(f"counts name types {sorted(counts)}, hashes {sorted(hashes)}")
        result = cls()
        for type_, count in counts.items():
            text = hashes[type_]
            if not _is_hash_text(text):
                raise ValueError(f"hash of type {type_!r} is not 32 lowercase hex digits")
            result._counts[type_] = count
            result._sums[type_] = int(text, 16)
        return result

    def _live(self) -> list[str]:
        for type_, total in self._sums.items():
            self._sums[type_] = total % _HASH_MOD
        return sorted(t for t, c in self._counts.items() if c != 0 or self._sums[t] != 0)

    @property
    def counts(self) -> dict[str, int]:
        """Records per type, sorted by type."""
        return {t: self._counts[t] for t in self._live()}

    @property
    def hashes(self) -> dict[str, str]:
        """Content hash per type (32 hex digits), sorted by type."""
        return {t: f"{self._sums[t]:032x}" for t in self._live()}

    @property
    def record_count(self) -> int:
        return sum(self._counts.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordDigest):
            return NotImplemented
        return self.counts == other.counts and self.hashes == other.hashes

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"RecordDigest(counts={self.counts}, hashes={self.hashes})"

    def __getstate__(self) -> tuple[dict[str, int], dict[str, int]]:
        return (self._counts, {t: total % _HASH_MOD for t, total in self._sums.items()})

    def __setstate__(self, state: tuple[dict[str, int], dict[str, int]]) -> None:
        self._counts, self._sums = state
        self._hashers = {}


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


# --------------------------------------------------------------------------- writing


def write_snapshot(
    path: str | os.PathLike[str],
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None = None,
    *,
    one_pass: bool = False,
) -> SnapshotInfo:
    """Write a snapshot atomically: temp file in the same directory, fsync, rename, fsync dir.

    `records` yields each ``(type, key, value)`` of the image once (order does not matter;
    the same (type, key) twice is the caller's bug and is not checked). It is read once
    when `meta` carries counts and hashes, which are then checked against the records
    while writing. When they are None, a first pass computes them and a second pass writes,
    so `records` must be re-iterable: a collection (list, tuple, dict view, ...) or a
    callable returning a fresh iterable each call; a one-shot iterator raises TypeError
    before anything is written. The second pass is checked against the first.

    ``one_pass=True`` (when `meta` has no counts and hashes) reads the records once and
    holds their encoded frames in memory, about the size of the file, until the header can
    be written: about a third less CPU than two passes (each record is encoded and hashed
    once), for a writer that can spare the memory (a forked child).

    `progress` is called with the number of records written so far, after each ~1 MiB
    chunk and at the end.

    Failure contract: on any exception (SnapshotMismatchError when the records disagree with
    the meta or between passes, ValueError/TypeError for a bad meta or record, OSError,
    or whatever `records` or `progress` raise) the temp file is removed and nothing exists
    at `path` that was not there before. A crash (kill, power loss) may leave a temp file
    named ``.<name>.*.tmp`` behind, never a partial file at `path`.
    """
    return _write_file(
        path,
        meta,
        lambda write, target: _plan_and_encode(write, target, meta, records, progress, one_pass),
    )


def write_snapshot_frames(
    path: str | os.PathLike[str],
    meta: SnapshotMeta,
    frames: Iterable[tuple[bytes, int]],
    actual: RecordDigest,
    progress: Callable[[int], None] | None = None,
) -> SnapshotInfo:
    """:func:`write_snapshot` of records whose frames were encoded elsewhere by
    :func:`encode_frames` (e.g. on Spark's executors, in parallel), so that writing is
    only copying.

    `meta` must carry the counts and hashes (the header's). `frames` yields chunks of
    frames with the number of records up to the chunk's end, numbered 1, 2, ... across
    all chunks in order; `actual` must hold, once `frames` is exhausted, the digest of
    what the chunks hold (the encoders' own), and the write fails with
    SnapshotMismatchError when it is not the meta's. Same failure contract as
    :func:`write_snapshot`.
    """
    if meta.counts is None or meta.hashes is None:
        raise ValueError("meta: frames encoded elsewhere need the counts and hashes up front")
    expected = RecordDigest.from_summary(meta.counts, meta.hashes)
    return _write_file(
        path,
        meta,
        lambda write, target: _assemble(
            write, target, meta, expected, iter(frames), actual, progress
        ),
    )


def encode_frames(
    offset: int,
    records: Iterable[SnapshotRecord],
    digest: RecordDigest,
    first_sub: int = 1,
) -> Iterator[tuple[bytes, int]]:
    """The frames of a snapshot at `offset` holding `records`, numbered from `first_sub`,
    in chunks of about 1 MiB with the number of records up to each chunk's end; adds every
    record to `digest`. For :func:`write_snapshot_frames`; a part starting at record n + 1
    of the whole numbers from n + 1."""
    return _record_chunks(offset, records, digest, first_sub)


def _write_file(
    path: str | os.PathLike[str],
    meta: SnapshotMeta,
    produce: Callable[[Callable[[bytes], object], str], tuple[int, SnapshotHeader]],
) -> SnapshotInfo:
    """Temp file in the same directory, ``produce(write, path)``, fsync, rename, fsync dir;
    nothing left at `path` on error."""
    target = Path(path)
    meta.validate()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with open(fd, "wb") as f:
            size, header = produce(_SyncingWriter(f).write, str(target))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return _info(target, size, header)


def encode_snapshot(
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None = None,
    *,
    one_pass: bool = False,
) -> tuple[bytes, SnapshotInfo]:
    """The bytes of a snapshot file and its info (path None); same contract as
    :func:`write_snapshot`, without the file system. For in-memory stores and tests."""
    meta.validate()
    buf = io.BytesIO()
    size, header = _plan_and_encode(buf.write, None, meta, records, progress, one_pass)
    return buf.getvalue(), _info(None, size, header)


def _plan_and_encode(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None,
    one_pass: bool,
) -> tuple[int, SnapshotHeader]:
    if one_pass and meta.counts is None:
        source = records() if callable(records) else records
        return _encode_one_pass(write, path, meta, source, progress)
    expected, source = _plan(path, meta, records)
    return _encode(write, path, meta, expected, source, progress)


def _plan(
    path: str | None, meta: SnapshotMeta, records: RecordSource
) -> tuple[RecordDigest, Iterable[SnapshotRecord]]:
    """The digest the header will carry, and the records to write."""
    if meta.counts is not None and meta.hashes is not None:
        source = records() if callable(records) else records
        return RecordDigest.from_summary(meta.counts, meta.hashes), source
    if callable(records):
        first, second = records(), records()
    elif isinstance(records, Iterator):
        raise TypeError(
            "write_snapshot: without counts and hashes in the meta the records are read "
            "twice; pass a collection or a callable returning an iterable, not an iterator"
        )
    else:
        first = second = records
    digest = RecordDigest()
    add = digest.add
    for type_, key, value in first:
        add(type_, key, value)
    return digest, second


def _encode(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    expected: RecordDigest,
    records: Iterable[SnapshotRecord],
    progress: Callable[[int], None] | None,
) -> tuple[int, SnapshotHeader]:
    """Write the whole stream through `write`; returns (bytes written, header)."""
    actual = RecordDigest()
    chunks = _record_chunks(meta.last_offset, records, actual)
    return _assemble(write, path, meta, expected, chunks, actual, progress)


def _encode_one_pass(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    records: Iterable[SnapshotRecord],
    progress: Callable[[int], None] | None,
) -> tuple[int, SnapshotHeader]:
    """:func:`_encode` reading the records once: their frames are held in memory (about
    the size of the file) until the header, which carries their hashes, is written."""
    digest = RecordDigest()
    chunks = list(_record_chunks(meta.last_offset, records, digest))
    return _assemble(write, path, meta, digest, iter(chunks), digest, progress)


def _record_chunks(
    offset: int, records: Iterable[SnapshotRecord], digest: RecordDigest, first_sub: int = 1
) -> Iterator[tuple[bytes, int]]:
    """The frames of `records` (sub-index `first_sub`, `first_sub` + 1, ...) joined into
    chunks of about 1 MiB, each with the sub-index of its last record; adds every record to
    `digest`."""
    chunk: list[bytes] = []
    append = chunk.append
    add = digest.add
    pending = 0
    sub = first_sub - 1
    for type_, key, value in records:
        if not type_:
            raise ValueError(f"record {sub + 1} has an empty type")
        sub += 1
        frame = encode_record(
            offset, sub, Effect(type=type_, key=key, value=value).SerializeToString()
        )
        add(type_, key, value)
        append(frame)
        pending += len(frame)
        if pending >= _CHUNK_BYTES:
            yield b"".join(chunk), sub
            chunk.clear()
            pending = 0
    yield b"".join(chunk), sub


def _assemble(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    expected: RecordDigest,
    chunks: Iterator[tuple[bytes, int]],
    actual: RecordDigest,
    progress: Callable[[int], None] | None,
) -> tuple[int, SnapshotHeader]:
    """Stream header, header frame (counts and hashes of `expected`), the record chunks,
    footer; raises SnapshotMismatchError if the records (`actual`, complete once `chunks`
    is exhausted) are not what `expected` says."""
    offset = meta.last_offset
    counts = expected.counts
    hashes = expected.hashes
    total = sum(counts.values())
    if total > _MAX_RECORDS:
        raise ValueError(f"a snapshot holds at most {_MAX_RECORDS} records, not {total}")
    header = SnapshotHeader(
        format_version=SNAPSHOT_FORMAT_VERSION,
        cluster_id=meta.cluster_id,
        last_offset=offset,
        last_term=meta.last_term,
        raft_index=meta.raft_index,
        created_ms=int(time.time() * 1000) if meta.created_ms is None else meta.created_ms,
        hash_algorithm=HASH_ALGORITHM,
        record_count=total,
        types=[TypeDigest(type=t, count=c, hash=hashes[t]) for t, c in counts.items()],
        engine_meta=meta.engine_meta,
    )
    data = encode_header(StreamKind.SNAPSHOT, offset) + encode_record(
        offset, 0, header.SerializeToString()
    )
    crc = 0
    size = 0
    sub = 0
    for chunk, sub in chunks:
        data += chunk
        if len(data) < _CHUNK_BYTES:
            continue  # the last (small) chunk goes out with the footer
        crc = _crc32c(data, crc)
        write(data)
        size += len(data)
        data = b""
        if progress is not None:
            progress(sub)
    if actual != expected:
        raise SnapshotMismatchError(path, expected, actual)
    crc = _crc32c(data, crc)
    footer = encode_record(
        offset, sub + 1, SnapshotFooter(record_count=sub, checksum_crc32c=crc).SerializeToString()
    )
    write(data + footer)
    size += len(data) + len(footer)
    if progress is not None:
        progress(sub)
    return size, header


class _SyncingWriter:
    """Writes to a file and syncs it every _SYNC_EVERY_BYTES.

    Why: on ext4 (data=ordered) an fsync commits the journal, and a commit must first
    flush the data of every file in it. One fsync of a whole 170 MB snapshot at the end
    held the journal for hundreds of ms, and the node's change-log fdatasyncs (the commit
    path) waited behind it. Synced in steps, a step holds it for milliseconds.
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._unsynced = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._unsynced += len(data)
        if self._unsynced >= _SYNC_EVERY_BYTES:
            self._file.flush()
            os.fdatasync(self._file.fileno())
            self._unsynced = 0


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _info(path: Path | None, size: int, header: SnapshotHeader) -> SnapshotInfo:
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


# --------------------------------------------------------------------------- reading


class SnapshotReader:
    """An open snapshot: the header is verified on open, the rest as records stream.

    Use :func:`open_snapshot` (or a store's ``open``). :meth:`iter_records` yields records
    *before* the end of the file has been verified: a consumer must not trust what it built
    until the iterator is exhausted without an error. One iteration at a time.
    """

    def __init__(self, source: BinaryIO, *, path: Path | None, owns_source: bool) -> None:
        """Verify the stream header and the header frame of `source` (any binary file
        object; this reader owns its position). Raises SnapshotCorruptError; closes `source`
        on error when `owns_source`."""
        self._file = source
        self._name = None if path is None else str(path)
        self._owns = owns_source
        try:
            size = source.seek(0, io.SEEK_END)
            self._reader = RecordReader(source, path=self._name, start=0, end=size)
            header = self._read_header()
            self._records_start = self._reader.position
        except BaseException:
            self.close()
            raise
        self.info = _info(path, size, header)
        self._expected = self.info.digest

    def _corrupt(self, reason: str, position: int | None) -> SnapshotCorruptError:
        return SnapshotCorruptError(self._name, reason, position)

    def _next(self, what: str) -> Record:
        """The next frame, which must exist; stream errors become SnapshotCorruptError."""
        try:
            record = self._reader.next_record()
        except RecordStreamError as e:
            raise self._corrupt(f"{what}: {e.reason}", e.position) from e
        if record is None:
            raise self._corrupt(f"the file ends before the {what}", self._reader.position)
        return record

    def _read_header(self) -> SnapshotHeader:
        try:
            stream = self._reader.read_header()
        except RecordStreamError as e:
            raise self._corrupt(f"stream header: {e.reason}", e.position) from e
        if stream.kind != StreamKind.SNAPSHOT:
            raise self._corrupt(f"stream kind {stream.kind.name}, not SNAPSHOT", 0)
        frame = self._next("snapshot header")
        header = SnapshotHeader()
        try:
            header.ParseFromString(frame.payload)
        except DecodeError as e:
            raise self._corrupt(f"undecodable snapshot header: {e}", frame.position) from e
        problem = _header_problem(header, stream.base_offset, frame)
        if problem:
            raise self._corrupt(problem, frame.position)
        return header

    def iter_records(self, check_hashes: bool = True) -> Iterator[SnapshotRecord]:
        """Yield every ``(type, key, value)``, then verify the footer, the checksum and (unless
        ``check_hashes`` is false) the content hashes. Every frame's CRC32C and the footer
        checksum are always checked, so a damaged file never passes; recomputing the
        content hashes only adds a check of the writer. Raises SnapshotCorruptError at the
        first fault, OSError on I/O."""
        offset = self.info.last_offset
        total = self.info.record_count
        actual = RecordDigest()
        add = actual.add
        next_record = self._next
        self._reader.seek(self._records_start)
        effect = Effect()
        parse = effect.ParseFromString
        for sub in range(1, total + 1):
            frame = next_record(f"record {sub} of {total}")
            if frame.offset != offset or frame.sub != sub:
                raise self._corrupt(
                    f"frame ({frame.offset}, {frame.sub}) where record ({offset}, {sub}) belongs",
                    frame.position,
                )
            try:
                parse(frame.payload)
            except DecodeError as e:
                raise self._corrupt(f"undecodable record: {e}", frame.position) from e
            type_, key, value = effect.type, effect.key, effect.value
            if effect.delete or not type_:
                raise self._corrupt("a delete or a record without a type", frame.position)
            if check_hashes:
                add(type_, key, value)
            yield type_, key, value
        self._verify_end(total)
        if check_hashes and actual != self._expected:
            raise self._corrupt(
                f"records have counts {actual.counts} hashes {actual.hashes}, the header says "
                f"counts {self._expected.counts} hashes {self._expected.hashes}",
                None,
            )

    def read_columns(self, check_hashes: bool = True) -> SnapshotColumns:
        """The whole snapshot by type, after verifying all of it (same checks and errors as
        :meth:`iter_records`, at about half its cost).

        Why it is cheaper: the frames are parsed from one memory map (or one read) instead
        of two reads each, and the frames' own CRCs are not computed, because the footer
        checksum, computed in one call over every byte before the footer, already covers
        them. Any anomaly on the way (a frame out of place, an undecodable record, a
        checksum that does not match) sends the reader back over the file the careful
        way, frame by frame, which raises the same error, naming the same frame, that
        :meth:`iter_records` would; so a damaged file costs two passes and a good one one.
        """
        with _mapped(self._file) as buf:
            try:
                columns, actual, footer_at = self._scan(buf, check_hashes)
                self._reader.seek(footer_at)
                self._verify_end(self.info.record_count)
            except (_Anomaly, SnapshotCorruptError):
                for _ in self.iter_records(check_hashes):
                    pass
                raise self._corrupt("failed a check only the fast pass makes", None) from None
        if check_hashes and actual != self._expected:
            raise self._corrupt(
                f"records have counts {actual.counts} hashes {actual.hashes}, the header says "
                f"counts {self._expected.counts} hashes {self._expected.hashes}",
                None,
            )
        return SnapshotColumns(self.info, columns)

    def _scan(
        self, buf: bytes | mmap.mmap, check_hashes: bool
    ) -> tuple[dict[str, tuple[list[bytes], list[bytes]]], RecordDigest, int]:
        """The records of `buf` by type, their digest (empty unless `check_hashes`) and the
        position of the footer frame. Raises _Anomaly where :meth:`iter_records` might
        raise; checks no frame CRC (see :meth:`read_columns`)."""
        offset = self.info.last_offset
        end = len(buf)
        pos = self._records_start
        columns: dict[str, tuple[list[bytes], list[bytes]]] = {}
        sums: dict[str, int] = {}
        effect = Effect()
        parse = effect.ParseFromString
        head = _FRAME_HEAD.unpack_from
        pack_len = _pack_len
        from_bytes = int.from_bytes
        current = ""  # the type of the records being read (no record has an empty type)
        keys: list[bytes] = []
        values: list[bytes] = []
        hasher: Any = None
        total = 0
        for sub in range(1, self.info.record_count + 1):
            if pos + _FRAME_HEAD.size > end:
                raise _Anomaly
            length, _crc, frame_offset, frame_sub = head(buf, pos)
            body_end = pos + 8 + length
            if (
                body_end > end
                or length > MAX_BODY_BYTES
                or frame_offset != offset
                or frame_sub != sub
                or length < 12
            ):
                raise _Anomaly
            try:
                parse(buf[pos + _FRAME_HEAD.size : body_end])
            except DecodeError:
                raise _Anomaly from None
            type_ = effect.type
            if effect.delete or not type_:
                raise _Anomaly
            key = effect.key
            value = effect.value
            if type_ != current:  # records come grouped by type: this is rare
                if current:
                    sums[current] += total
                keys, values = columns.setdefault(type_, ([], []))
                sums.setdefault(type_, 0)
                hasher = _type_hasher(type_)
                current, total = type_, 0
            keys.append(key)
            values.append(value)
            if check_hashes:
                h = hasher.copy()
                h.update(b"".join((pack_len(len(key)), key, pack_len(len(value)), value)))
                total += from_bytes(h.digest(), "little")
            pos = body_end
        digest = RecordDigest()
        if current:
            sums[current] += total
        if check_hashes:
            digest._counts = {t: len(ks) for t, (ks, _) in columns.items()}
            digest._sums = sums
        return columns, digest, pos

    def _verify_end(self, total: int) -> None:
        frame = self._next("footer")
        if frame.offset != self.info.last_offset or frame.sub != total + 1:
            raise self._corrupt(
                f"frame ({frame.offset}, {frame.sub}) where the footer belongs", frame.position
            )
        footer = SnapshotFooter()
        try:
            footer.ParseFromString(frame.payload)
        except DecodeError as e:
            raise self._corrupt(f"undecodable footer: {e}", frame.position) from e
        if footer.record_count != total:
            raise self._corrupt(
                f"footer counts {footer.record_count} records, header {total}", frame.position
            )
        if self._reader.position != self.info.size_bytes and not self._etcd_trailer(
            self._reader.position
        ):
            raise self._corrupt("data after the footer", self._reader.position)
        if self._checksum(frame.position) != footer.checksum_crc32c:
            raise self._corrupt("footer checksum mismatch", frame.position)

    def _etcd_trailer(self, end: int) -> bool:
        """True if what follows the footer is the trailer etcd's snapshot stream appends
        (zero padding to a 512-byte boundary, then the SHA-256 of everything before it):
        a file saved by ``etcdctl snapshot save`` from a metaledger node."""
        size = self.info.size_bytes
        if size % 512 != hashlib.sha256().digest_size or size - end < 32:
            return False
        self._file.seek(end)
        padding = self._file.read(size - end - 32)
        if padding.count(0) != len(padding):
            return False
        digest = hashlib.sha256()
        self._file.seek(0)
        left = size - 32
        while left > 0:
            data = self._file.read(min(left, _CHUNK_BYTES))
            if not data:
                return False
            digest.update(data)
            left -= len(data)
        return digest.digest() == self._file.read(32)

    def _checksum(self, end: int) -> int:
        self._file.seek(0)
        crc, left = 0, end
        while left > 0:
            data = self._file.read(min(left, _CHUNK_BYTES))
            if not data:
                raise self._corrupt("the file shrank while being read", end - left)
            crc = _crc32c(data, crc)
            left -= len(data)
        return crc

    def verify(self) -> SnapshotInfo:
        """Read and verify the whole snapshot; its info. Raises SnapshotCorruptError."""
        for _ in self.iter_records():
            pass
        return self.info

    def close(self) -> None:
        if self._owns:
            self._file.close()

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _header_problem(header: SnapshotHeader, base_offset: int, frame: Record) -> str | None:
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
    if not all(_is_hash_text(t.hash) for t in header.types):
        return "a content hash is not 32 lowercase hex digits"
    return None


def open_snapshot(path: str | os.PathLike[str]) -> SnapshotReader:
    """Open a snapshot file and verify its header (use as a context manager).

    Raises SnapshotCorruptError for a bad header, OSError (e.g. FileNotFoundError).
    """
    target = Path(path)
    return SnapshotReader(
        open(target, "rb", buffering=_READ_BUFFER_BYTES), path=target, owns_source=True
    )


def read_snapshot(path: str | os.PathLike[str], check_hashes: bool = True) -> Snapshot:
    """Read and verify a whole snapshot into memory. Raises SnapshotCorruptError, OSError.

    ``check_hashes=False`` skips recomputing the content hashes (CRCs are still checked)."""
    with open_snapshot(path) as reader:
        records = list(reader.iter_records(check_hashes))
        return Snapshot(reader.info, records)


def read_snapshot_columns(
    path: str | os.PathLike[str], check_hashes: bool = True
) -> SnapshotColumns:
    """Read and verify a whole snapshot into memory by type (:meth:`SnapshotReader.
    read_columns`: the fast way to restore an image). Raises SnapshotCorruptError, OSError."""
    with open_snapshot(path) as reader:
        return reader.read_columns(check_hashes)


def verify_snapshot(path: str | os.PathLike[str]) -> SnapshotInfo:
    """Verify a whole snapshot without keeping its records. Raises SnapshotCorruptError."""
    with open_snapshot(path) as reader:
        return reader.verify()


def inspect(path: str | os.PathLike[str], *, verify: bool = False) -> SnapshotInfo:
    """Header fields and file size; reads only the header unless `verify` (then the whole
    file is checked). Raises SnapshotCorruptError, OSError."""
    with open_snapshot(path) as reader:
        return reader.verify() if verify else reader.info


def etcd_trailer(content_size: int, sha256: Any) -> bytes:
    """The bytes etcd's snapshot stream appends after ``content_size`` bytes whose running
    SHA-256 is ``sha256``: zero padding to a 512-byte boundary, then the digest (etcdctl
    refuses a stream whose size is not 32 more than a multiple of 512)."""
    padding = b"\x00" * (-content_size % 512)
    sha256.update(padding)
    return padding + bytes(sha256.digest())
