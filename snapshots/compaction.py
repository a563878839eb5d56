"""Offline compaction on Spark (DESIGN.md §4): base snapshot + change-log segments up to an
offset -> a new snapshot, with the same per-type counts and content hashes as the snapshot
the server writes at that offset (and as :func:`snapshots.compact_local`).

Plan of :func:`compact_spark` (classic PySpark RDDs on a bare SparkContext; no pandas,
pyarrow or SparkSession needed)::

    driver       lists the segment FILE NAMES (and sizes) only; reads the base's header;
                 plans the read tasks (plan_reads): the window's bytes (by each file's
                 sparse offset index, <first-offset>.idx: from the last point at or below
                 `after` to the first past `upto`) cut into T even shares at index points,
                 within or across files, each cut checked by reading the one frame there;
                 T = 2 per core by default, 4-256 MiB each, a multiple of the cores
    stage 1      one task per share (+ one for the base snapshot): the worker opens each of
                 its ranges itself from the shared path, checks header/CRC/order like
                 read_segments (iter_frames: the block-wise frame parser), decodes the
                 effects in (after, upto] and keeps each key's last record in its share
                 (its ranges are in log order and positions strictly increase within a
                 file, so that is its newest; tombstones kept, at most ~1 M keys at a time):
                 ((type, key), (offset, sub, value | None)); base records are
                 ((type, key), (base offset, -1, value))
    shuffle      partitionBy crc32(type, key) -> P partitions, P >= 2 x cores (the log is
                 partitionable by key because it holds effects, not operations)
    stage 2      per partition: the replay rule of snapshots._replay on the versions
                 (greatest (offset, sub) wins across ranges, a winning delete drops the key,
                 the base underneath at (base offset, -1)); a RecordDigest per partition,
                 merged on the driver
    stage 3      per partition: the survivors encoded as snapshot frames (encode_frames),
                 numbered from the partition's first record by the stage-2 digests'
                 counts, in ~1 MiB chunks, then the digest of what they hold
    write        the chunks come to the driver a wave of partitions at a time (one job a
                 wave, every core encoding; the next wave computed while this one is
                 written) into write_snapshot_frames(), whose meta already carries the
                 merged counts and hashes: the driver only copies, and checks the encoders'
                 digests against the meta's (hashes are order-independent). The driver
                 encoding every record itself was the job's longest serial part (2-3 s of
                 ~28 at 1e7 entries on local[2])

Only the survivors' frames pass through the driver (they must: the snapshot is one file);
the log itself never does. Per-task stats (first/last position, term, records read and
shuffled) come back in an accumulator so the driver can check the ranges are in log order
across each other, as read_segments does. A task's size trades pre-fold for parallelism: a
smaller task folds fewer repeats of a key, so more records cross the shuffle (1e7 entries:
3.6 M with 4 tasks, 5.4 M with 8, 6.6 M with 14); hence 2 tasks per core, not more, cut
across files rather than one per file (14 tasks of whole 64 MiB files, the last short, ran
7 waves on one core and 6 and a bit on the other).

Spark settings (research/spark-and-deps.md §2-3): loopback bind (SPARK_LOCAL_IP, driver host
and bind address) for local and loopback masters, UI off, workers run ``sys.executable``,
``spark.local.dir`` and ``java.io.tmpdir`` in a temp folder, a log4j2 file at ERROR (WARN on
request) and, unless verbose, the JVM's stdout/stderr sent to a log file (the only way to
drop ``WARNING: Using incubator modules``), the pandas-3 FutureWarning filtered, C1 JIT +
serial GC by default (``fast_jvm``: the JVM only moves pickled bytes here, so the default
JIT bought nothing: 1e7 took 84 CPU-s with C1, 102 with the full JIT). The start: a bare
SparkContext (no SparkSession), and the driver JVM's class-data-sharing archive (recorded
once, in the user cache, by the first run's JVM as it exits; make_spark_context): to a
ready context 4.0-7.1 s / 4.7-5.4 CPU-s with a SparkSession, 2.4-3.3 s / 2.8-3.0 CPU-s
with a bare context, 1.2-1.3 s / 1.5-1.6 CPU-s with the archive (load1 ~3); the recording
run costs ~10 s more once.

Numbers (``bench/compact_scaling.py --sizes 1e5,1e6,1e7 --warm-jobs 3``; 2 shared cores;
upto = 0.9 N, 10 % deletes, 64 MiB segments, no base; -20-38-43.md). Wall = the whole run in
a fresh process; job = the first job once the context is up; warm = the same job again on
that context (what a long-running Spark cluster pays per job); x = per entry against the
fold's wall time; cpu1 = local[1] with its whole process tree confined to one CPU::

    N     fold     local[1] warm   cpu1 warm   local[2]: wall / job / warm      1 CPU -> 2, warm
    1e5   0.5 s    0.6 s           0.8 s       4.3 / 1.9 / 0.6 s (9.0x / 1.15x)  no gain (fixed cost)
    1e6   4.6 s    4.1 s           4.5 s       6.3 / 3.9 / 2.4 s (1.36x / 0.51x) 1.88x (1.73x from local[1])
    1e7   49.9 s   40.8 s          43.2 s      27.2 / 24.8 / 22.7 s (0.55x / 0.45x) 1.91x (1.80x)

At 1e7 the first job scales 1.84x from one CPU (1.69x from local[1], which keeps 1.03 cores
busy: the JVM's threads and the driver beside its task), the whole run 1.78x (1.62x). The
same read work in two bare processes runs 2.02x as fast as in one (bench/compact_ceiling.py);
what Spark loses: each stage-1 task ~8 % longer in a worker than bare and ~15 % longer again
beside another (32.1 -> 37.0 task-s: the JVM's threads moving the shuffle share the two
CPUs), the JVM start (1.3 s) and the write (2.0 s). At 1e5 the job is ~0.6 s of mostly fixed
cost. History: one task per file, 1e7 local[2] 47.2 s / 78 CPU-s (-10-08-59.md); with the
block-wise frame parser, the stage-2 fold on versions, the GC paused in the folds and no SQL
31.9 s / 53 CPU-s (-11-38-31.md); with frames encoded on the executors 29.5 s (-19-16-38.md);
with even read shares across files 27.2 s / 49 CPU-s.

Memory (-10-11-39.md): the fold holds ~500-540 B per live key, whatever the log length;
Spark's tree is bounded by the JVM heap plus `worker_memory` per Python worker. 1e7 entries
with 50 % distinct keys (3.76 M live): fold 1906 MB; under a 1024 MB budget the fold
(RLIMIT_AS) raised MemoryError after 16 s, and local[2] with driver_memory 512m and
worker_memory 64m (140 partitions, pre-fold 65,536 keys) finished in 66 s at 956 MB peak RSS
(912 MB PSS), hashes equal to the unbounded fold. Without the bound local[2] peaked at
1273 MB. On this 23.5 GB box the fold stops fitting at about 4.5e7 live keys (~4.5e8
entries at 10 % distinct), an extrapolation.

Parquet copy of sealed segments: NOT implemented. Measured (bench ``--parquet``): pyarrow
converting a 64 MiB segment costs the server 2.2-4.2 s of CPU per seal (32-37 s per 1e7
entries) and pulls pyarrow (~170 MB) into the server; compacting from Parquet (JVM
groupBy/max_by with the full JIT, Python only hashing and writing the survivors) then took
82 s wall / 85 CPU-s / 1.7 GB at 1e7 against 51-96 s / 84-88 CPU-s / 1.4 GB for the binary
path of then (31.9 s / 53 CPU-s now), and was slower at 1e5 and 1e6 (14.0 s and 21.9 s).
Parsing segments in Python is real work here (~1-1.5 us per record with iter_frames, plus
the pre-fold), but the JVM read + groupBy that replaces it cost as much on this box, and
the rest (hashing, pickling the survivors, the session) is shared by both paths. Revisit only
if a profile on a many-core cluster says otherwise; the binary-segment path stays either way.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import gc
import itertools
import math
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, NamedTuple, TypeAlias

from google.protobuf.message import DecodeError

from protos.records_pb2 import Effect
from snapshots._recordstream import (
    HEADER_BYTES,
    FrameRange,
    RecordReader,
    RecordStreamError,
    StreamKind,
    iter_frames,
    read_index,
    split_ranges,
)
from snapshots._replay import _SEGMENT_NAME, ChangeLogError
from snapshots._snapshot import (
    RecordDigest,
    SnapshotError,
    SnapshotInfo,
    SnapshotMeta,
    SnapshotRecord,
    encode_frames,
    inspect,
    open_snapshot,
    write_snapshot_frames,
)

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.accumulators import Accumulator
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "CompactionError",
    "SegmentFile",
    "compact_spark",
    "last_term_upto",
    "list_segments",
    "make_spark_context",
    "make_spark_session",
    "parse_memory_size",
    "plan_reads",
    "plan_tasks",
    "read_task_count",
    "shuffle_partitions",
    "window_bytes",
]

DEFAULT_MASTER: Final = "local[*]"
_READ_BUFFER_BYTES = 256 * 1024
#: Stage 1 is cut into about this many read tasks per core (see plan_tasks), never smaller
#: than _MIN_SPLIT_BYTES, so the last wave is short whatever the number of files.
_READ_TASKS_PER_CORE = 2
_MIN_SPLIT_BYTES = 4 * 1024 * 1024
#: ... and never larger than this, so a task's retry and its share of the progress bar
#: stay small on a long log.
_MAX_SPLIT_BYTES = 256 * 1024 * 1024
#: Stage 2 (shuffle partitions) gets at least this many tasks per core, and a multiple of
#: the cores: 7 partitions on 2 cores ran 4 waves, the last on one core (1e7 entries:
#: stage 2 1.47x faster on local[2] than on local[1], the read stage 1.60x).
_REDUCE_TASKS_PER_CORE = 2
#: Input bytes per shuffle partition (sets P when not given): bounds a partition's replay
#: dict on a worker and what toLocalIterator holds on the driver at once.
_BYTES_PER_PARTITION = 128 * 1024 * 1024
#: Partitions encoded at once for the write (a wave; the driver holds up to three), at
#: most this many whatever the cores, so the driver's memory does not grow with the cluster.
_WRITE_WAVE_MAX = 8
#: Memory of one folded key in a Python dict (the single-process fold measured 505-541 B
#: per live key with 20 B keys and 16-64 B values; the pre-fold's entries are alike).
_FOLD_BYTES_PER_KEY = 512
#: Pre-fold size without a worker memory bound: ~1 M keys, ~0.5 GB of dict (a read task of
#: up to _MAX_SPLIT_BYTES can hold several times that many distinct keys).
_PREFOLD_KEYS_DEFAULT = 2**20
#: Records parsed into one reused Effect before a fresh one: reuse saves an allocation per
#: record, but upb's arena keeps every parse's fields until the message is freed (~100 B
#: per record measured: 200 MB after 2 M parses), so a whole segment would pin ~70 MB.
_EFFECT_REUSE = 1024
_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_FAST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
_LOG4J_TEMPLATE = """\
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = {level}
logger.sparkproject.name = org.sparkproject
logger.sparkproject.level = {level}
"""

StateKey: TypeAlias = tuple[str, bytes]
#: What the job carries per key: (offset, sub, value), value None for a delete.
Version: TypeAlias = tuple[int, int, bytes | None]


class CompactionError(SnapshotError):
    """The Spark job failed. `worker_error` names the exception a worker raised when one can
    be read from Spark's error (e.g. ``ChangeLogError``), `detail` is its message."""

    def __init__(self, message: str, worker_error: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.worker_error = worker_error
        self.detail = detail


class SegmentFile(NamedTuple):
    """A segment file as the driver lists it: by name and size, never by content."""

    first_offset: int
    path: str
    size_bytes: int


class _Task(NamedTuple):
    """What one stage-1 task reads: the frames in bytes [start, end) (end None: to the end
    of the file) of a segment file named for `first_offset`, task `number` in log order;
    or the base snapshot (number -1)."""

    number: int
    path: str
    first_offset: int
    after: int
    upto: int
    start: int = HEADER_BYTES
    end: int | None = None


# --------------------------------------------------------------------------- driver helpers


def parse_memory_size(text: str) -> int:
    """Bytes in a JVM-style size (``512m``, ``2g``, ``300k``, ``1048576``; ``mb``/``gb``
    spellings too), as Spark's memory settings take it. Raises ValueError naming the text."""
    m = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", text.lower())
    if m is None or int(m.group(1)) <= 0:
        raise ValueError(
            f"memory size {text!r}: expected a positive number with an optional unit "
            "k, m, g or t (e.g. 512m)"
        )
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


def list_segments(
    directory: str | os.PathLike[str], upto: int, after: int = -1
) -> list[SegmentFile]:
    """The segment files that can hold records in ``(after, upto]``, in log order, by name
    (read_segments' selection: a file is skipped when the next one starts at or below
    `after`, and every file starting past `upto` is skipped). Raises OSError."""
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            m = _SEGMENT_NAME.match(entry.name)
            if m and entry.is_file():
                found.append(SegmentFile(int(m.group(1)), entry.path, entry.stat().st_size))
    found.sort()
    chosen = []
    for i, seg in enumerate(found):
        if seg.first_offset > upto:
            break
        if i + 1 < len(found) and found[i + 1].first_offset <= after:
            continue
        chosen.append(seg)
    return chosen


def plan_tasks(
    segments: list[SegmentFile], after: int, upto: int, split_bytes: int | None = None
) -> list[_Task]:
    """Stage 1's tasks, in log order: each segment file, split into byte ranges of about
    `split_bytes` (None: whole files) at points of its sparse offset index, so the number
    of tasks does not depend on the number of files. A file without an index (or with too
    few points) stays whole. Ranges that can hold no record in ``(after, upto]`` by the
    index are left out (as list_segments leaves out files).

    Each cut is checked here: a frame must start at the indexed position with the indexed
    offset and a good CRC (the index is an unsynced cache); a cut that fails is dropped,
    merging its two ranges, so a stale index costs parallelism, never a false error. That
    is one small read per cut: the driver never reads the records themselves.
    """
    tasks: list[_Task] = []
    for seg in segments:
        ranges = [FrameRange(HEADER_BYTES, seg.size_bytes, None)]
        if split_bytes and seg.size_bytes > split_bytes:
            pieces = math.ceil((seg.size_bytes - HEADER_BYTES) / split_bytes)
            index = read_index(Path(seg.path).with_suffix(".idx"))
            ranges = _checked_cuts(seg.path, split_ranges(index, seg.size_bytes, pieces))
        for r in _in_window(ranges, after, upto):
            path = str(Path(seg.path).resolve())
            tasks.append(_Task(len(tasks), path, seg.first_offset, after, upto, r.start, r.end))
    return tasks


def _in_window(ranges: list[FrameRange], after: int, upto: int) -> Iterator[FrameRange]:
    """The ranges of one file (in order) that can hold records in ``(after, upto]`` by the
    index: not one whose first offset is past `upto`, nor one followed by a range starting
    at or below `after` (every record in it is older)."""
    for i, r in enumerate(ranges):
        if r.first_offset is not None and r.first_offset > upto:
            return
        following = ranges[i + 1].first_offset if i + 1 < len(ranges) else None
        if following is not None and following <= after:
            continue
        yield r


def read_task_count(window: int, cores: int, split_bytes: int | None = None) -> int:
    """How many read tasks stage 1 gets for `window` bytes of segments on `cores`: one per
    `split_bytes` (default: ``_READ_TASKS_PER_CORE`` per core, each between
    ``_MIN_SPLIT_BYTES`` and ``_MAX_SPLIT_BYTES``), rounded up to a multiple of the cores so
    that the last wave is as full as the others (5 tasks on 2 cores ran their last wave on
    one core)."""
    cores = max(1, cores)
    if split_bytes is None:
        per_task = -(-window // (_READ_TASKS_PER_CORE * cores))
        split_bytes = min(_MAX_SPLIT_BYTES, max(_MIN_SPLIT_BYTES, per_task))
    wanted = max(1, -(-window // max(1, split_bytes)))
    return cores * -(-wanted // cores)


class _Span(NamedTuple):
    """The bytes of a segment file that can hold records of the window, by its index
    (`points`: the index inside the file, None where it was not needed)."""

    segment: SegmentFile
    points: list[tuple[int, int]] | None
    start: int
    end: int


def _index_points(seg: SegmentFile) -> list[tuple[int, int]]:
    index = read_index(Path(seg.path).with_suffix(".idx"))
    return [e for e in index if HEADER_BYTES < e[1] < seg.size_bytes]


def _window_spans(segments: list[SegmentFile], after: int, upto: int) -> list[_Span]:
    """Each file's bytes from its last index point at or below `after` (the records before
    it are older) to its first point past `upto` (the records from it on are newer): what a
    read task of it reads. Without an index, the whole file. Only the files at the window's
    edges have their index read (a file after the first at or below `after` and before the
    next starting at or below `upto` is read whole), so a long log costs a few index reads."""
    spans = []
    for i, seg in enumerate(segments):
        following = segments[i + 1].first_offset if i + 1 < len(segments) else None
        start, end = HEADER_BYTES, seg.size_bytes
        if seg.first_offset > after and following is not None and following <= upto:
            spans.append(_Span(seg, None, start, end))
            continue
        points = _index_points(seg)
        for offset, position in points:
            if offset <= after:
                start = position
            elif offset > upto:
                end = position
                break
        spans.append(_Span(seg, points, start, end))
    return spans


def window_bytes(segments: list[SegmentFile], after: int, upto: int) -> int:
    """The bytes of `segments` that stage 1 reads for the window ``(after, upto]``, by the
    files' indexes (index reads only)."""
    return _span_bytes(_window_spans(segments, after, upto))


def _span_bytes(spans: list[_Span]) -> int:
    return sum(span.end - span.start for span in spans)


def plan_reads(segments: list[SegmentFile], after: int, upto: int, tasks: int) -> list[list[_Task]]:
    """Stage 1's read tasks: `tasks` runs of consecutive byte ranges of the window's
    segments, each about 1/`tasks` of the window's bytes (:func:`window_bytes`), cut at
    index points wherever they fall, within a file or across files. A task that spans files
    pre-folds them together (a later file's record of a key replaces the earlier one, as in
    replay), and equal tasks fill the cores evenly: 13 whole 64 MiB files and a short
    fourteenth ran 7 waves on one core and 6 and a bit on the other.

    The ranges are numbered in log order across all tasks (the driver checks their order
    from those numbers). Cuts are checked as in :func:`plan_tasks` (a cut whose frame does
    not match the index is merged away), so a stale index costs balance, never a record;
    fewer tasks come back when the index has too few points (no index: whole files).
    """
    return _plan_spans(_window_spans(segments, after, upto), after, upto, tasks)


def _plan_spans(spans: list[_Span], after: int, upto: int, tasks: int) -> list[list[_Task]]:
    """:func:`plan_reads` over spans already found (:func:`_window_spans`)."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, not {tasks}")
    total = _span_bytes(spans)
    targets = [total * i / tasks for i in range(1, tasks)]
    # the group boundaries, as positions in the window's bytes laid end to end: each target
    # moved to the nearest place a task can start (a file's window edge or index point)
    bounds: set[float] = set()
    cuts: list[list[int]] = [[] for _ in spans]
    base = 0
    for i, span in enumerate(spans):
        width = span.end - span.start
        mine = [t for t in targets if base <= t <= base + width]
        if mine and span.points is None:
            span = spans[i] = span._replace(points=_index_points(span.segment))
        inside = [p for _, p in span.points or () if span.start < p < span.end]
        for target in mine:
            here = span.start + (target - base)
            best = min((span.start, span.end, *inside), key=lambda p: abs(p - here))
            if best == span.end and i + 1 < len(spans):
                bounds.add(base + width)
            elif best != span.start and best != span.end:
                cuts[i].append(best)
                bounds.add(base + best - span.start)
            elif best == span.start and base > 0:
                bounds.add(base)
        base += width
    ordered_bounds = sorted(bounds)
    groups: list[list[_Task]] = []
    group_of_last = -1
    number = 0
    base = 0
    for i, span in enumerate(spans):
        seg = span.segment
        points = sorted({span.start, span.end, *cuts[i]} - {HEADER_BYTES, seg.size_bytes})
        by_position = {p: o for o, p in span.points or ()}
        edges = [HEADER_BYTES, *points, seg.size_bytes]
        ranges = [
            FrameRange(a, b, by_position.get(a) if a != HEADER_BYTES else None)
            for a, b in itertools.pairwise(edges)
        ]
        ranges = _checked_cuts(seg.path, ranges)
        path = str(Path(seg.path).resolve())
        for r in _in_window(ranges, after, upto):
            at = base + max(0, r.start - span.start)
            group = bisect.bisect_right(ordered_bounds, at)
            if group != group_of_last or not groups:
                groups.append([])
                group_of_last = group
            groups[-1].append(_Task(number, path, seg.first_offset, after, upto, r.start, r.end))
            number += 1
        base += span.end - span.start
    return groups


def shuffle_partitions(input_bytes: int, cores: int, partition_bytes: int | None = None) -> int:
    """Stage 2's partitions: at least ``_REDUCE_TASKS_PER_CORE`` per core and one per
    ``partition_bytes`` of input (default ``_BYTES_PER_PARTITION``), rounded up to a
    multiple of ``cores`` so that no wave runs on fewer cores than the others."""
    cores = max(1, cores)
    wanted = max(
        _REDUCE_TASKS_PER_CORE * cores,
        math.ceil(input_bytes / (partition_bytes or _BYTES_PER_PARTITION)),
    )
    return cores * math.ceil(wanted / cores)


def _checked_cuts(path: str, ranges: list[FrameRange]) -> list[FrameRange]:
    """`ranges` with every cut whose position does not hold a good frame of the indexed
    offset merged away."""
    if len(ranges) < 2:
        return ranges
    kept = [ranges[0]]
    with open(path, "rb") as f:
        for r in ranges[1:]:
            try:
                record = RecordReader(f, path=path, start=r.start, end=r.end).next_record()
            except RecordStreamError:
                record = None
            if record is not None and record.offset == r.first_offset:
                kept.append(r)
            else:
                kept[-1] = kept[-1]._replace(end=r.end)
    return kept


def last_term_upto(directory: str | os.PathLike[str], upto: int, default: int = 0) -> int:
    """The term of the last change-log record at or below `upto` (from the one segment that
    holds it), or `default` when there is none. What compact_spark derives for the meta's
    last_term when only a cluster id is given; for ``compact --engine local``. Raises
    ChangeLogError, OSError."""
    segments = list_segments(directory, upto)
    for seg in reversed(segments):
        stats = _FileStats()
        task = _Task(0, seg.path, seg.first_offset, -1, upto)
        for _ in _read_segment(task, stats, emit=False):
            pass
        if stats.records:
            return stats.last_term
    return default


# --------------------------------------------------------------------------- worker side


class _FileStats:
    """What a stage-1 task learns about its file besides the records."""

    __slots__ = ("first", "last", "last_term", "records")

    def __init__(self) -> None:
        self.first: tuple[int, int] | None = None
        self.last: tuple[int, int] | None = None
        self.last_term = 0
        self.records = 0


def _read_segment(
    task: _Task, stats: _FileStats, *, emit: bool = True
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


def _read_base(task: _Task) -> Iterator[tuple[StateKey, Version]]:
    """The base snapshot's records, each older than any change (position (last, -1)). The
    snapshot's checksum and hashes are verified when its last record has been read, so a
    bad base fails the task (and the job) before anything is written."""
    with open_snapshot(task.path) as reader:
        for type_, key, value in reader.iter_records():
            yield (type_, key), (task.after, -1, value)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
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


def _gc_paused_gen(
    fn: Callable[[Iterable[Any]], Iterator[Any]],
) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A partition function run with the GC paused (restored when the generator ends or is
    closed, so a reused Python worker gets it back)."""

    @functools.wraps(fn)
    def run(items: Iterable[Any]) -> Iterator[Any]:
        with _gc_paused():
            yield from fn(items)

    return run


def _stage1(
    stats_acc: Accumulator[dict[int, tuple[Any, ...]]], prefold_keys: int
) -> Callable[[Iterable[list[_Task]]], Iterator[tuple[StateKey, Version]]]:
    def run(groups: Iterable[list[_Task]]) -> Iterator[tuple[StateKey, Version]]:
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
                stats = _FileStats()
                for key, version in _read_segment(task, stats):
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

    return _gc_paused_gen(run)


def _partition_of(key: StateKey) -> int:
    """Deterministic on every worker (str/bytes hash() is seeded per process)."""
    return zlib.crc32(key[1], zlib.crc32(key[0].encode()))


@_gc_paused_gen
def _apply(items: Iterable[tuple[StateKey, Version]]) -> Iterator[SnapshotRecord]:
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


@_gc_paused_gen
def _digest_partition(records: Iterable[SnapshotRecord]) -> Iterator[RecordDigest]:
    digest = RecordDigest()
    add = digest.add
    for type_, key, value in records:
        add(type_, key, value)
    yield digest


def _encode_partitions(
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


def _identity(items: Iterable[Any]) -> Iterable[Any]:
    return items


def _in_waves(sc: SparkContext, rdd: RDD[Any], wave: int, group: str) -> Iterator[Any]:
    """The items of `rdd`'s partitions in partition order, computed `wave` partitions at a
    time by one job each (every core busy), the next wave's job running in a thread (in
    job group `group`, for the progress bar) while the caller consumes this one's: the
    driver holds at most three waves. toLocalIterator runs one partition at a time
    (prefetching one): the executors' encoding used ~1.5 of 2 cores, and would use ~1.5 of
    any number. A job's error is raised here; closing the generator early waits for the
    running wave."""
    n = rdd.getNumPartitions()
    done: queue.Queue[tuple[list[Any] | None, BaseException | None]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def run() -> None:
        try:
            sc.setJobGroup(group, "compaction: write")
            for lo in range(0, n, max(1, wave)):
                if stop.is_set():
                    return
                done.put((sc.runJob(rdd, _identity, range(lo, min(n, lo + wave))), None))
        except BaseException as e:  # handed to the consumer, raised there
            done.put((None, e))
            return
        done.put((None, None))

    thread = threading.Thread(target=run, name="compaction-write-waves", daemon=True)
    thread.start()
    try:
        while True:
            items, error = done.get()
            if error is not None:
                raise error
            if items is None:
                return
            yield from items
    finally:
        stop.set()
        while thread.is_alive():  # unblock a put, let the running wave end
            with contextlib.suppress(queue.Empty):
                done.get(timeout=0.1)
        thread.join()


def _make_stats_param() -> Any:
    from pyspark.accumulators import AccumulatorParam

    class StatsParam(AccumulatorParam[dict[int, tuple[Any, ...]]]):
        """Per file index; idempotent merge, so a retried task does no harm."""

        def zero(self, value: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
            return {}

        def addInPlace(
            self, v1: dict[int, tuple[Any, ...]], v2: dict[int, tuple[Any, ...]]
        ) -> dict[int, tuple[Any, ...]]:
            v1.update(v2)
            return v1

    return StatsParam()


# --------------------------------------------------------------------------- session


def _is_loopback(master: str) -> bool:
    if master.startswith("local"):
        return True
    if master.startswith("spark://"):
        hosts = [h.rsplit(":", 1)[0] for h in master[len("spark://") :].split(",")]
        return all(h in _LOOPBACK_HOSTS for h in hosts)
    return False


@contextlib.contextmanager
def _child_output_to(path: Path) -> Iterator[None]:
    """While open, fds 1 and 2 point at `path`, so a child started now (the JVM, and the
    Python workers it forks) writes there for good; ours are restored afterwards."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def make_spark_context(
    master: str = DEFAULT_MASTER,
    *,
    work_dir: str | os.PathLike[str],
    app_name: str = "metaledger-compact",
    log_level: str = "ERROR",
    fast_jvm: bool = True,
    driver_memory: str | None = None,
    executor_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
    ship_code: bool | None = None,
    class_archive_dir: str | os.PathLike[str] | None = None,
) -> SparkContext:
    """A SparkContext with the settings this project needs (see the module docstring): what
    the job runs on, since it uses RDDs only. No SparkSession: its SQL session state cost
    ~2 CPU-s more at every start (measured: 4.9 against 2.9 CPU-s to a ready context).

    `work_dir` holds Spark's local and temp dirs, the log4j file and, when `log_level` is
    ERROR, the JVM's own output (``<work_dir>/spark.log``); the caller removes it after
    ``stop()``. JVM options (`fast_jvm`, `driver_memory`, the log4j file) only take effect
    when this process starts its JVM: a later context in the same process reuses the first
    JVM (PySpark never stops it). `ship_code` (default: for non-local masters) sends the
    ``snapshots`` and ``protos`` packages to the executors with addPyFile; their Python must
    still have protobuf and crc32c.

    `class_archive_dir`: where the driver JVM's class-data-sharing archive lives (see
    :func:`_class_archive`): used when present, else recorded by this JVM for the next one
    (finished by :func:`finish_class_archive` after ``stop()``). Raises CompactionError
    when the JVM does not start (after one retry without the archive, if it had one).
    """
    from pyspark import SparkConf, SparkContext

    global _pending_archive
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    level = log_level.upper()
    work = Path(work_dir)
    local_dir = work / "local"
    tmp_dir = work / "tmp"
    for d in (local_dir, tmp_dir):
        d.mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(_LOG4J_TEMPLATE.format(level=level.lower()))
    # A JVM that dies (e.g. on a damaged class archive) writes its crash report into the
    # work dir, not into the caller's current directory.
    java_opts = (
        f"-Djava.io.tmpdir={tmp_dir} -Dlog4j.configurationFile=file:{log4j} "
        f"-XX:ErrorFile={work}/hs_err_pid%p.log"
    )
    if fast_jvm:
        java_opts = f"{_FAST_JVM_FLAGS} {java_opts}"
    loopback = _is_loopback(master)
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.local.dir": str(local_dir),
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.python.worker.reuse": "true",
    }
    if loopback:
        settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
    if driver_memory:
        settings["spark.driver.memory"] = driver_memory
    if executor_memory:
        settings["spark.executor.memory"] = executor_memory
    settings.update(conf or {})
    quiet = level in ("ERROR", "FATAL", "OFF")
    starting_jvm = SparkContext._gateway is None
    archive = None
    if class_archive_dir is not None and starting_jvm:
        with contextlib.suppress(OSError):  # no cache directory: start as without one
            archive = _class_archive(Path(class_archive_dir), java_opts if fast_jvm else "")
    for attempt in (archive, None) if archive is not None else (None,):
        spark_conf = SparkConf()
        for k, v in settings.items():
            spark_conf.set(k, v)
        if attempt is not None:
            flag = _class_archive_flag(attempt)
            driver_opts = settings["spark.driver.extraJavaOptions"]
            spark_conf.set("spark.driver.extraJavaOptions", f"{flag} {driver_opts}")
        redirect = _child_output_to(work / "spark.log") if quiet and starting_jvm else None
        try:
            with redirect or contextlib.nullcontext():
                sc = SparkContext.getOrCreate(spark_conf)
            break
        except Exception as e:
            _pending_archive = None
            if attempt is not None and attempt.exists():
                # A damaged archive crashes the JVM at start: drop it, start without.
                attempt.unlink(missing_ok=True)
                continue
            tail = ""
            log_file = work / "spark.log"
            if log_file.exists():
                tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
            raise CompactionError(f"Spark did not start ({master}): {e}\n{tail}".rstrip()) from e
    sc.setLogLevel(level)
    if ship_code if ship_code is not None else not master.startswith("local"):
        sc.addPyFile(str(_code_zip(work)))
    return sc


#: (temp file the JVM dumps its class archive into at exit, the archive's final path)
_pending_archive: tuple[Path, Path] | None = None


def _class_archive(directory: Path, flags: str) -> Path:
    """The class-data-sharing archive for this JVM, pyspark and flags in `directory`.

    A JDK 13+ dynamic CDS archive holds the classes the driver JVM loaded (Spark's, ~70 MB):
    mapped instead of parsed and verified, it cut the start to a ready context from ~3.5 to
    ~1.9 CPU-s on this box. The name hashes what the archive depends on (the java binary,
    pyspark's version and jars, the JIT/GC flags), so a changed install makes a new one; a
    stale archive that still matches is refused by the JVM with a warning, not an error.
    """
    import hashlib

    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or ""
    java = os.path.realpath(java)
    jars = Path(pyspark.__file__).parent / "jars"
    key = "|".join(
        [
            java,
            str(os.stat(java).st_mtime_ns) if os.path.exists(java) else "",
            pyspark.__version__,
            ",".join(sorted(os.listdir(jars))) if jars.is_dir() else "",
            _FAST_JVM_FLAGS if _FAST_JVM_FLAGS in flags else "",
        ]
    )
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"spark-{hashlib.sha1(key.encode()).hexdigest()[:16]}.jsa"


def _class_archive_flag(archive: Path) -> str:
    """Use `archive` if it is there, else have this JVM write one at exit into a temp file
    (renamed into place by finish_class_archive once the JVM has exited cleanly: a partly
    written archive would crash the next JVM)."""
    global _pending_archive
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive}"
    temp = archive.with_name(f"{archive.name}.{uuid.uuid4().hex[:8]}.tmp")
    _pending_archive = (temp, archive)
    return f"-XX:ArchiveClassesAtExit={temp}"


def default_class_archive_dir() -> Path:
    """``$METALEDGER_SPARK_CACHE``, else ``$XDG_CACHE_HOME/metaledger`` (``~/.cache``)."""
    explicit = os.environ.get("METALEDGER_SPARK_CACHE")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "metaledger"


def finish_class_archive(timeout_s: float = 120) -> bool:
    """If this process's JVM is recording a class archive: shut the JVM down (after the
    context's ``stop()``; the next context starts a new JVM), wait for it to write the
    archive as it exits, and move the archive into place. True when one was installed."""
    global _pending_archive
    pending, _pending_archive = _pending_archive, None
    if pending is None:
        return False
    from pyspark import SparkContext

    temp, archive = pending
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    try:
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
        if proc is None:
            return False
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the gateway's main exits (System.exit) at EOF on stdin
        try:
            proc.wait(timeout_s)
        except Exception:
            proc.kill()
            proc.wait()
            return False
        if proc.returncode == 0 and temp.exists() and temp.stat().st_size > 0:
            os.replace(temp, archive)
            return True
        return False
    finally:
        temp.unlink(missing_ok=True)


def make_spark_session(
    master: str = DEFAULT_MASTER,
    *,
    work_dir: str | os.PathLike[str],
    **options: Any,
) -> SparkSession:
    """A SparkSession on :func:`make_spark_context` (same options), for DataFrame users
    (the tests' shared session, the bench's Parquet variant); ``stop()`` stops both."""
    from pyspark.sql import SparkSession

    return SparkSession(make_spark_context(master, work_dir=work_dir, **options))


def _code_zip(work: Path) -> Path:
    """A zip of the ``snapshots`` and ``protos`` packages for the executors."""
    root = Path(__file__).resolve().parent.parent
    target = work / "metaledger-code.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for package in ("snapshots", "protos"):
            for path in sorted((root / package).rglob("*.py")):
                z.write(path, path.relative_to(root).as_posix())
    return target


# --------------------------------------------------------------------------- progress


class _Progress:
    """A one-line progress bar on stderr: Spark tasks of the current phase (polled from
    the status tracker), then records written. Without a TTY, one line per phase."""

    _WIDTH = 28

    def __init__(self, sc: SparkContext | None, group: str, stream: IO[str] | None) -> None:
        self._sc = sc
        self._group = group
        self._out = stream
        self._tty = bool(stream is not None and stream.isatty())
        self._lock = threading.Lock()
        self._label = ""
        self._done = 0
        self._total = 0
        self._unit = ""
        self._spark = False
        self._old_jobs: set[int] = set()
        self._t0 = self._phase_t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if stream is not None and sc is not None:
            self._thread = threading.Thread(target=self._poll, name="compact-progress", daemon=True)
            self._thread.start()

    def spark_phase(self, label: str) -> None:
        self._end_phase()
        with self._lock:
            self._label, self._unit, self._spark = label, "tasks", True
            self._done = self._total = 0
            self._phase_t0 = time.monotonic()
            if self._sc is not None:
                tracker = self._sc.statusTracker()
                self._old_jobs = set(tracker.getJobIdsForGroup(self._group))

    def count_phase(self, label: str, total: int, unit: str) -> None:
        self._end_phase()
        with self._lock:
            self._label, self._unit, self._spark = label, unit, False
            self._done, self._total = 0, total
            self._phase_t0 = time.monotonic()
        self._render()

    def advance(self, done: int) -> None:
        with self._lock:
            self._done = done
        if self._tty:
            self._render()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._end_phase()

    def _end_phase(self) -> None:
        if self._out is None or not self._label:
            return
        if self._spark:
            self._poll_once()
        self._render(final=True)
        self._label = ""

    def _poll(self) -> None:
        while not self._stop.wait(0.3):
            if self._spark and self._label:
                with contextlib.suppress(Exception):  # the tracker is best effort
                    self._poll_once()
                    if self._tty:
                        self._render()

    def _poll_once(self) -> None:
        if self._sc is None:
            return
        tracker = self._sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self._group):
            if job_id in self._old_jobs:
                continue
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        with self._lock:
            self._done, self._total = done, total

    def _render(self, final: bool = False) -> None:
        if self._out is None or (not self._tty and not final):
            return
        with self._lock:
            done, total, label, unit = self._done, self._total, self._label, self._unit
            elapsed = time.monotonic() - self._phase_t0
        frac = min(1.0, done / total) if total else (1.0 if final else 0.0)
        filled = round(frac * self._WIDTH)
        bar = "#" * filled + "-" * (self._WIDTH - filled)
        text = f"compact: {label:<20} [{bar}] {done:,}/{total:,} {unit}  {elapsed:6.1f} s"
        if self._tty:
            self._out.write("\r" + text + ("\n" if final else ""))
        else:
            self._out.write(text + "\n")
        self._out.flush()


# --------------------------------------------------------------------------- the job


def _worker_error(exc: BaseException) -> tuple[str | None, str]:
    """The exception a Python worker raised, as (class name, message), from Spark's text."""
    text = str(exc)
    found = re.findall(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.*)$", text, re.MULTILINE)
    for name, message in reversed(found):
        if name not in ("Py4JJavaError", "PythonException", "SparkException"):
            return name, message
    return None, text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def compact_spark(
    segments_dir: str | os.PathLike[str],
    upto: int,
    out_path: str | os.PathLike[str],
    meta: SnapshotMeta | str | None = None,
    base_snapshot: str | os.PathLike[str] | None = None,
    *,
    master: str = DEFAULT_MASTER,
    progress: bool | IO[str] = True,
    spark: SparkSession | SparkContext | None = None,
    partitions: int | None = None,
    log_level: str = "ERROR",
    fast_jvm: bool = True,
    driver_memory: str | None = None,
    executor_memory: str | None = None,
    worker_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
    timings: dict[str, float] | None = None,
    split_bytes: int | None = None,
    read_tasks: int | None = None,
    class_archive: bool = True,
    class_archive_dir: str | os.PathLike[str] | None = None,
) -> SnapshotInfo:
    """Compact a base snapshot (or nothing) and the segments' records up to `upto` into a
    snapshot at `out_path` on Spark; the result hashes as :func:`snapshots.compact_local`'s.

    `meta`: a :class:`SnapshotMeta` whose last_offset is `upto` (its counts and hashes are
    ignored: the job computes them); or a cluster id (str), or None for the base's cluster
    id, in which case last_term is the term of the last record at or below `upto` (the
    base's when there is none) and raft_index is 0. The base must belong to the cluster and
    not be newer than `upto`.

    `spark`: an existing SparkSession or SparkContext to run on (not stopped afterwards;
    `master`, `log_level`, `fast_jvm`, `driver_memory` and `conf` are then ignored); else a
    context is made with :func:`make_spark_context` and stopped at the end. `segments_dir`
    (and the base) must be readable at the same path on every executor. `partitions`:
    shuffle partitions (default max(2 x default parallelism, input bytes / 128 MiB), rounded
    up to a multiple of the default parallelism).
    `read_tasks`: how many read tasks (default :func:`read_task_count`: about `split_bytes`
    of the window each, default 2 per core between 4 and 256 MiB, rounded up to a multiple
    of the default parallelism), each an even share of the window's bytes cut at index
    points, within or across files (:func:`plan_reads`); `split_bytes` 0 instead gives one
    task per whole file. `class_archive`: when this call starts the JVM, use (or, the first
    time, record) a class-data-sharing archive of the driver JVM in `class_archive_dir`
    (default ``$METALEDGER_SPARK_CACHE`` or ``~/.cache/metaledger``): ~1.5 CPU-s less at
    every later start; the recording run pays the JVM's dump at exit. `progress`: a bar on
    stderr (True),
    on a given stream, or nothing (False). `timings`, when given, receives the phases'
    wall times in seconds (session, fold, write).

    Memory: `driver_memory` is the JVM heap of the driver (and, on ``local[N]``, of the
    executor too: Spark refuses less than ~450 MiB); `executor_memory` the executors' heap
    on a cluster. `worker_memory` (e.g. ``128m``) bounds each Python worker: it is Spark's
    ``spark.python.worker.memory`` (the shuffle write's buckets spill at half of it), caps
    the per-file pre-fold at half of it in keys, and raises the partition count so that a
    partition's stage-2 fold (its keys) fits the other half; without it a worker holds up
    to a whole segment's keys. The driver's Python holds one partition of survivors at a
    time while writing.

    Raises ValueError for misuse, SnapshotCorruptError for a bad base header,
    ChangeLogError when the files are out of order across each other, CompactionError
    when the job fails (a worker's ChangeLogError or SnapshotCorruptError is named in it),
    SnapshotMismatchError if the written records disagree with the computed digest,
    OSError; nothing is written at `out_path` on error.
    """
    t_start = time.monotonic()
    base_info = inspect(base_snapshot) if base_snapshot is not None else None
    if isinstance(meta, SnapshotMeta):
        if meta.last_offset != upto:
            raise ValueError(f"meta.last_offset {meta.last_offset} is not upto {upto}")
        cluster_id = meta.cluster_id
    elif meta is None:
        if base_info is None:
            raise ValueError("give a cluster id (or a meta) when there is no base snapshot")
        cluster_id = base_info.cluster_id
    else:
        cluster_id = meta
    after = -1
    if base_info is not None:
        if base_info.cluster_id != cluster_id:
            raise ValueError(
                f"base snapshot {base_snapshot} is of cluster {base_info.cluster_id!r}, "
                f"not {cluster_id!r}"
            )
        if base_info.last_offset > upto:
            raise ValueError(
                f"base snapshot {base_snapshot} is at offset {base_info.last_offset}, past {upto}"
            )
        after = base_info.last_offset
    worker_bytes = parse_memory_size(worker_memory) if worker_memory else None
    prefold_keys = (
        max(1024, worker_bytes // 2 // _FOLD_BYTES_PER_KEY)
        if worker_bytes
        else _PREFOLD_KEYS_DEFAULT
    )
    # Input bytes per stage-2 partition: a segment record is ~100 B and a folded key ~5x
    # that, so w/10 of input keeps the partition's fold under w/2 even if no key repeats.
    partition_bytes = min(_BYTES_PER_PARTITION, worker_bytes // 10) if worker_bytes else None
    if worker_memory:
        conf = {**(conf or {}), "spark.python.worker.memory": worker_memory}
    segments = list_segments(segments_dir, upto, after)
    input_bytes = sum(seg.size_bytes for seg in segments)
    if base_info is not None:
        input_bytes += base_info.size_bytes

    stream: IO[str] | None = (
        (sys.stderr if progress is True else None) if isinstance(progress, bool) else progress
    )
    work_dir = None
    own_session = spark is None
    if spark is None:
        work_dir = tempfile.mkdtemp(prefix="metaledger-compact-")
        if stream is not None:
            stream.write(f"compact: starting Spark ({master}) ...\n")
            stream.flush()
        spark = make_spark_context(
            master,
            work_dir=work_dir,
            class_archive_dir=(class_archive_dir or default_class_archive_dir())
            if class_archive
            else None,
            log_level=log_level,
            fast_jvm=fast_jvm,
            driver_memory=driver_memory,
            executor_memory=executor_memory,
            conf=conf,
        )
    from pyspark import SparkContext, StorageLevel

    sc = spark if isinstance(spark, SparkContext) else spark.sparkContext
    group = f"metaledger-compact-{uuid.uuid4().hex[:8]}"
    bar = _Progress(sc, group, stream)
    t_session = time.monotonic()
    survivors: RDD[SnapshotRecord] | None = None
    try:
        sc.setJobGroup(group, f"compact {segments_dir} up to {upto}")
        cores = sc.defaultParallelism
        n_parts = partitions or shuffle_partitions(input_bytes, cores, partition_bytes)
        if read_tasks is not None and split_bytes is not None:
            raise ValueError("give read_tasks or split_bytes, not both")
        if split_bytes == 0:
            groups = [[task] for task in plan_tasks(segments, after, upto)]
        else:
            spans = _window_spans(segments, after, upto)  # the edge files' indexes, once
            if read_tasks is None:
                read_tasks = read_task_count(_span_bytes(spans), cores, split_bytes)
            groups = _plan_spans(spans, after, upto, read_tasks) if spans else []
        tasks = [task for group in groups for task in group]
        # Longest first, so the last wave is short: Spark starts partitions in order.
        ordered = sorted(groups, key=lambda g: sum(t.start - (t.end or 0) for t in g))
        if base_snapshot is not None and base_info is not None:
            base_task = _Task(-1, str(Path(base_snapshot).resolve()), after, after, upto)
            ordered.insert(0, [base_task])
        stats_acc = sc.accumulator({}, _make_stats_param())
        survivors = (
            sc.parallelize(ordered, max(1, len(ordered)))
            .mapPartitions(_stage1(stats_acc, prefold_keys))
            .partitionBy(n_parts, _partition_of)
            .mapPartitions(_apply)
            .persist(StorageLevel.MEMORY_AND_DISK)  # hashed, then written: computed once
        )
        bar.spark_phase("read + fold + hash")
        try:
            parts = survivors.mapPartitions(_digest_partition).collect()
            digest = RecordDigest.combine(parts)
        except Exception as e:
            name, detail = _worker_error(e)
            raise CompactionError(
                f"compaction job failed: {name or 'error'}: {detail}", name, detail
            ) from e
        stats = stats_acc.value
        last_term = _check_order(tasks, stats)
        t_fold = time.monotonic()
        if isinstance(meta, SnapshotMeta):
            out_meta = dataclasses.replace(meta, counts=None, hashes=None).with_digest(digest)
        else:
            term = last_term if last_term is not None else (base_info.last_term if base_info else 0)
            out_meta = SnapshotMeta(cluster_id, upto, term).with_digest(digest)
        bar.count_phase("write snapshot", digest.record_count, "records")
        # the executors encode the frames, numbered across partitions in order; the driver
        # only copies them into the file and checks the digests they come with
        firsts = [1]
        for part in parts[:-1]:
            firsts.append(firsts[-1] + part.record_count)
        frames = survivors.mapPartitionsWithIndex(_encode_partitions(upto, firsts))
        written = RecordDigest()

        def chunks() -> Iterator[tuple[bytes, int]]:
            for item in _in_waves(sc, frames, min(cores, _WRITE_WAVE_MAX), group):
                if isinstance(item, RecordDigest):
                    written.merge(item)
                else:
                    yield item

        try:
            with _gc_paused():
                info = write_snapshot_frames(
                    out_path, out_meta, chunks(), written, progress=bar.advance
                )
        except SnapshotError:
            raise
        except Exception as e:
            if type(e).__module__.startswith(("pyspark", "py4j")):
                name, detail = _worker_error(e)
                raise CompactionError(
                    f"compaction job failed while writing: {name or 'error'}: {detail}",
                    name,
                    detail,
                ) from e
            raise
        t_write = time.monotonic()
    finally:
        bar.close()
        if survivors is not None:
            with contextlib.suppress(Exception):
                survivors.unpersist()
        if own_session:
            sc.stop()
            finish_class_archive()
            if work_dir is not None:
                shutil.rmtree(work_dir, ignore_errors=True)
    if timings is not None:
        timings.update(
            session_s=t_session - t_start,
            fold_s=t_fold - t_session,
            write_s=t_write - t_fold,
            total_s=time.monotonic() - t_start,
            partitions=n_parts,
            input_bytes=input_bytes,
            tasks=len(ordered),
            ranges=len(tasks),
            records_read=sum(v[3] for v in stats.values()),
            records_shuffled=sum(v[4] for v in stats.values()),
            prefold_keys=min(prefold_keys, 2**31),
        )
    return info


def _check_order(tasks: list[_Task], stats: Mapping[int, tuple[Any, ...]]) -> int | None:
    """Raise ChangeLogError unless each task's records come after the previous task's, in
    log order (what read_segments checks as it goes); the term of the last record after the
    base, or None."""
    prev: tuple[int, int] | None = None
    prev_path = ""
    term = None
    for task in tasks:
        first, last, last_term, records, _ = stats.get(task.number, (None, None, 0, 0, 0))
        if first is None:
            continue
        if prev is not None and tuple(first) <= prev:
            raise ChangeLogError(
                task.path,
                task.start,
                f"record {tuple(first)} after {prev} (the end of {prev_path})",
            )
        prev, prev_path = tuple(last), task.path
        if records:
            term = last_term
    return term
