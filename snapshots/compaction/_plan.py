"""The driver's plan of a compaction: which segment files hold the window ``(after, upto]``,
which byte ranges each stage-1 read task reads (even shares of the window's bytes, cut at
points of the files' sparse offset indexes, each cut checked by reading the one frame
there), and how many read tasks and shuffle partitions the job gets.

The driver reads file names, sizes, indexes and one frame per cut here, never the records.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from snapshots._recordstream import (
    HEADER_BYTES,
    FrameRange,
    RecordReader,
    RecordStreamError,
    read_index,
    split_ranges,
)
from snapshots._replay import _SEGMENT_NAME

__all__ = [
    "BYTES_PER_PARTITION",
    "ReadTask",
    "SegmentFile",
    "Span",
    "list_segments",
    "plan_reads",
    "plan_spans",
    "plan_tasks",
    "read_task_count",
    "shuffle_partitions",
    "span_bytes",
    "window_bytes",
    "window_spans",
]

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
BYTES_PER_PARTITION = 128 * 1024 * 1024


class SegmentFile(NamedTuple):
    """A segment file as the driver lists it: by name and size, never by content."""

    first_offset: int
    path: str
    size_bytes: int


class ReadTask(NamedTuple):
    """What one stage-1 task reads: the frames in bytes [start, end) (end None: to the end
    of the file) of a segment file named for `first_offset`, task `number` in log order;
    or the base snapshot (number -1). Read by :func:`snapshots.compaction.read_segment`
    (`after`/`upto`: the window of offsets kept)."""

    number: int
    path: str
    first_offset: int
    after: int
    upto: int
    start: int = HEADER_BYTES
    end: int | None = None


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
) -> list[ReadTask]:
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
    tasks: list[ReadTask] = []
    for seg in segments:
        ranges = [FrameRange(HEADER_BYTES, seg.size_bytes, None)]
        if split_bytes and seg.size_bytes > split_bytes:
            pieces = math.ceil((seg.size_bytes - HEADER_BYTES) / split_bytes)
            index = read_index(Path(seg.path).with_suffix(".idx"))
            ranges = _checked_cuts(seg.path, split_ranges(index, seg.size_bytes, pieces))
        for r in _in_window(ranges, after, upto):
            path = str(Path(seg.path).resolve())
            tasks.append(ReadTask(len(tasks), path, seg.first_offset, after, upto, r.start, r.end))
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


class Span(NamedTuple):
    """The bytes of a segment file that can hold records of the window, by its index
    (`points`: the index inside the file, None where it was not needed)."""

    segment: SegmentFile
    points: list[tuple[int, int]] | None
    start: int
    end: int


def _index_points(seg: SegmentFile) -> list[tuple[int, int]]:
    index = read_index(Path(seg.path).with_suffix(".idx"))
    return [e for e in index if HEADER_BYTES < e[1] < seg.size_bytes]


def window_spans(segments: list[SegmentFile], after: int, upto: int) -> list[Span]:
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
            spans.append(Span(seg, None, start, end))
            continue
        points = _index_points(seg)
        for offset, position in points:
            if offset <= after:
                start = position
            elif offset > upto:
                end = position
                break
        spans.append(Span(seg, points, start, end))
    return spans


def window_bytes(segments: list[SegmentFile], after: int, upto: int) -> int:
    """The bytes of `segments` that stage 1 reads for the window ``(after, upto]``, by the
    files' indexes (index reads only)."""
    return span_bytes(window_spans(segments, after, upto))


def span_bytes(spans: list[Span]) -> int:
    return sum(span.end - span.start for span in spans)


def plan_reads(
    segments: list[SegmentFile], after: int, upto: int, tasks: int
) -> list[list[ReadTask]]:
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
    return plan_spans(window_spans(segments, after, upto), after, upto, tasks)


def plan_spans(spans: list[Span], after: int, upto: int, tasks: int) -> list[list[ReadTask]]:
    """:func:`plan_reads` over spans already found (:func:`window_spans`)."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, not {tasks}")
    total = span_bytes(spans)
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
    groups: list[list[ReadTask]] = []
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
            groups[-1].append(ReadTask(number, path, seg.first_offset, after, upto, r.start, r.end))
            number += 1
        base += span.end - span.start
    return groups


def shuffle_partitions(input_bytes: int, cores: int, partition_bytes: int | None = None) -> int:
    """Stage 2's partitions: at least ``_REDUCE_TASKS_PER_CORE`` per core and one per
    ``partition_bytes`` of input (default ``BYTES_PER_PARTITION``), rounded up to a
    multiple of ``cores`` so that no wave runs on fewer cores than the others."""
    cores = max(1, cores)
    wanted = max(
        _REDUCE_TASKS_PER_CORE * cores,
        math.ceil(input_bytes / (partition_bytes or BYTES_PER_PARTITION)),
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
