"""What the compaction runs on the executors, as plain functions over iterables (unit-tested
without Spark): stage 1 reads a task's byte ranges of segment files and pre-folds them
(:func:`read_stage`, :func:`read_segment`), :func:`partition_of` picks a record's shuffle
partition, stage 2 folds a partition's versions by the replay rule (:func:`fold_versions`)
and digests the survivors (:func:`digest_partition`), stage 3 encodes them as snapshot
frames (:func:`encode_partitions`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeAlias

from google.protobuf.message import DecodeError

from protos.records_pb2 import Effect
from snapshots._digest import RecordDigest
from snapshots._format import SnapshotRecord
from snapshots._reader import open_snapshot
from snapshots._recordstream import (
    HEADER_BYTES,
    RecordReader,
    RecordStreamError,
    StreamKind,
    iter_frames,
)
from snapshots._replay import ChangeLogError
from snapshots._writer import encode_frames
from snapshots.compaction._plan import ReadTask, list_segments

__all__ = [
    "FileStats",
    "StateKey",
    "StatsSink",
    "Version",
    "digest_partition",
    "encode_partitions",
    "fold_versions",
    "gc_paused",
    "last_term_upto",
    "partition_of",
    "read_segment",
    "read_stage",
]

_READ_BUFFER_BYTES = 256 * 1024


#: Records parsed into one reused Effect before a fresh one: reuse saves an allocation per
#: record, but upb's arena keeps every parse's fields until the message is freed (~100 B
#: per record measured: 200 MB after 2 M parses), so a whole segment would pin ~70 MB.
_EFFECT_REUSE = 1024


#: A record's identity in the fold: (type, key).
StateKey: TypeAlias = tuple[str, bytes]
#: What the job carries per key: (offset, sub, value), value None for a delete.
Version: TypeAlias = tuple[int, int, bytes | None]


def last_term_upto(directory: str | os.PathLike[str], upto: int, default: int = 0) -> int:
    """The term of the last change-log record at or below `upto` (from the one segment that
    holds it), or `default` when there is none. What compact_spark derives for the meta's
    last_term when only a cluster id is given; for ``compact --engine local``. Raises
    ChangeLogError, OSError."""
    segments = list_segments(directory, upto)
    for seg in reversed(segments):
        stats = FileStats()
        task = ReadTask(0, seg.path, seg.first_offset, -1, upto)
        for _ in read_segment(task, stats, emit=False):
            pass
        if stats.records:
            return stats.last_term
    return default


class StatsSink(Protocol):
    """Where :func:`read_stage` reports each group's task stats (a Spark accumulator)."""

    def add(self, term: dict[int, tuple[Any, ...]], /) -> None: ...


class FileStats:
    """What a stage-1 task learns about its file besides the records."""

    __slots__ = ("first", "last", "last_term", "records")

    def __init__(self) -> None:
        self.first: tuple[int, int] | None = None
        self.last: tuple[int, int] | None = None
        self.last_term = 0
        self.records = 0


def read_segment(
    task: ReadTask, stats: FileStats, *, emit: bool = True
) -> Iterator[tuple[StateKey, Version]]:
    """The records of one task's byte range of a segment file in ``(after, upto]`` as
    ((type, key), version).

    The checks of :func:`snapshots.read_segments` for one file (header kind and base offset,
    CRCs, strictly increasing positions, a torn tail only beyond `upto`, decodable effects);
    the order across ranges and files is checked by the driver from `stats`. A frame that
    runs past the range's end is a torn tail there too, i.e. damage unless it is the file's.
    """
    path, after, upto = task.path, task.after, task.upto
    with open(path, "rb", buffering=_READ_BUFFER_BYTES) as f:
        reader = RecordReader(f, path=path, start=0, end=task.end)
        try:
            header = reader.read_header()
            if task.start != HEADER_BYTES:
                reader.seek(task.start)
            if (
                header.kind != StreamKind.CHANGE_LOG_SEGMENT
                or header.base_offset != task.first_offset
            ):
                raise ChangeLogError(
                    path,
                    0,
                    f"header of kind {header.kind.name} based at {header.base_offset} "
                    f"in a segment named for {task.first_offset}",
                )
            last = (-1, -1)
            first: tuple[int, int] | None = None
            term = records = 0
            effect = Effect()
            parse = effect.ParseFromString
            # Stats are kept in locals and stored once at the end: this loop runs per record.
            for offset, sub, payload, where in iter_frames(f, task.start, reader.end, path):
                position = (offset, sub)
                if position <= last:
                    raise ChangeLogError(path, where, f"record {position} after {last}")
                if offset > upto:
                    break
                last = position
                if first is None:
                    first = position
                if offset <= after:
                    continue
                records += 1
                if records % _EFFECT_REUSE == 0:
                    effect = Effect()
                    parse = effect.ParseFromString
                try:
                    parse(payload)
                except DecodeError as e:
                    raise ChangeLogError(path, where, f"undecodable effect: {e}") from e
                term = effect.term
                if emit:
                    yield (
                        (effect.type, effect.key),
                        (offset, sub, None if effect.delete else effect.value),
                    )
            if first is not None:
                stats.first, stats.last = first, last
            stats.last_term, stats.records = term, records
        except RecordStreamError as e:
            raise ChangeLogError(e.path, e.position, f"{type(e).__name__}: {e.reason}") from e


def _read_base(task: ReadTask) -> Iterator[tuple[StateKey, Version]]:
    """The base snapshot's records, each older than any change (position (last, -1)). The
    snapshot's checksum and hashes are verified when its last record has been read, so a
    bad base fails the task (and the job) before anything is written."""
    with open_snapshot(task.path) as reader:
        for type_, key, value in reader.iter_records():
            yield (type_, key), (task.after, -1, value)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic GC off for a while: the folds build dicts of millions of tuples, and
    every collection of the oldest generation walks all of them again (10 % of stage 1's
    and 20 % of stage 2's CPU, measured), while nothing here makes a reference cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def gc_paused_partition(
    fn: Callable[[Iterable[Any]], Iterator[Any]],
) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A partition function run with the GC paused (restored when the generator ends or is
    closed, so a reused Python worker gets it back)."""

    @functools.wraps(fn)
    def run(items: Iterable[Any]) -> Iterator[Any]:
        with gc_paused():
            yield from fn(items)

    return run


def read_stage(
    stats_acc: StatsSink, prefold_keys: int
) -> Callable[[Iterable[list[ReadTask]]], Iterator[tuple[StateKey, Version]]]:
    """Stage 1 as a partition function: for each group of read tasks (one Spark partition's
    items), the records of its ranges in ``(after, upto]`` (and a base task's records),
    pre-folded to each key's newest, emitted every `prefold_keys` keys and at the end, as
    ``((type, key), version)``. Each group's per-task stats go to `stats_acc` (a Spark
    accumulator on the cluster, anything with ``add`` elsewhere) as one dict
    ``{task number: (first, last, last_term, records, emitted)}``."""

    def run(groups: Iterable[list[ReadTask]]) -> Iterator[tuple[StateKey, Version]]:
        for group in groups:
            # Pre-fold: positions strictly increase within a file (checked) and the ranges
            # of a task are in log order (checked by the driver), so the last record of a
            # key the task reads is its newest; tombstones stay (replay drops them). At
            # `prefold_keys` the dict is emitted and restarted: a key may then leave the
            # task more than once, which stage 2 resolves by position like any two tasks,
            # and the worker's memory stays bounded whatever the task's size.
            newest: dict[StateKey, Version] = {}
            emitted = 0
            found: dict[int, tuple[Any, ...]] = {}
            for task in group:
                if task.number < 0:
                    yield from _read_base(task)
                    continue
                stats = FileStats()
                for key, version in read_segment(task, stats):
                    newest[key] = version
                    if len(newest) >= prefold_keys:
                        emitted += len(newest)
                        yield from newest.items()
                        newest = {}
                found[task.number] = (
                    stats.first,
                    stats.last,
                    stats.last_term,
                    stats.records,
                    0,
                )
            emitted += len(newest)
            if found:
                last = max(found)
                found[last] = (*found[last][:4], emitted)
                stats_acc.add(found)
            yield from newest.items()

    return gc_paused_partition(run)


def partition_of(key: StateKey) -> int:
    """The shuffle's partitioner (taken modulo the partition count by Spark): a CRC32 of
    type and key, deterministic on every worker (str/bytes hash() is seeded per process)."""
    return zlib.crc32(key[1], zlib.crc32(key[0].encode()))


@gc_paused_partition
def fold_versions(items: Iterable[tuple[StateKey, Version]]) -> Iterator[SnapshotRecord]:
    """Stage 2: one key partition's records (each read task's newest per key, and the
    base's) folded by the rule of :mod:`snapshots._replay`: the greatest (offset, sub) wins
    across tasks, a winning delete drops the key, two different records at one position are
    an error. The base lies underneath because its records sit at (base offset, -1), before
    every change (stage 1 drops changes at or below the base offset). Streamed: memory is
    the partition's keys, not its records.

    The fold works on the (offset, sub, value) versions as they arrive instead of building a
    ChangeRecord per record for ``_replay_into``: 0.8 against 2.9 us a record, and stage 2
    sees every record the pre-folds let through (at 1e7 entries, ~8 M).
    """
    winners: dict[StateKey, Version] = {}
    get = winners.get
    for key, version in items:
        seen = get(key)
        if seen is None or seen[0] < version[0] or (seen[0] == version[0] and seen[1] < version[1]):
            winners[key] = version
        elif seen[0] == version[0] and seen[1] == version[1] and seen[2] != version[2]:
            raise ChangeLogError(
                None, None, f"two different records of {key!r} at ({version[0]}, {version[1]})"
            )
    for (type_, name), (_, _, value) in winners.items():
        if value is not None:
            yield type_, name, value


@gc_paused_partition
def digest_partition(records: Iterable[SnapshotRecord]) -> Iterator[RecordDigest]:
    """One partition's records as one :class:`snapshots.RecordDigest` (counts and hashes by
    type), for the driver to combine."""
    digest = RecordDigest()
    add = digest.add
    for type_, key, value in records:
        add(type_, key, value)
    yield digest


def encode_partitions(
    offset: int, firsts: list[int]
) -> Callable[[int, Iterable[SnapshotRecord]], Iterator[tuple[bytes, int] | RecordDigest]]:
    """Stage 3 on the executors: a partition's records as snapshot frames numbered from
    ``firsts[partition]`` (the records of the partitions before it, plus one), in ~1 MiB
    chunks, then the digest of what they hold, for the driver to check."""

    def encode(
        index: int, records: Iterable[SnapshotRecord]
    ) -> Iterator[tuple[bytes, int] | RecordDigest]:
        digest = RecordDigest()
        yield from encode_frames(offset, records, digest, firsts[index])
        yield digest

    return encode
