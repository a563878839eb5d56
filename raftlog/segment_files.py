"""Change-log segment files on disk: their layout, and verifying and repairing them.

Layout of a log directory::

    <dir>/<first-offset:020d>.seg   a record stream (snapshots format) of kind
                                    CHANGE_LOG_SEGMENT; header base_offset and the offset
                                    of the first record both equal the name
    <dir>/<first-offset:020d>.idx   sparse index: 16-byte entries (u64 offset, u64 frame
                                    position), little-endian, no header

Records are keyed by ``(offset, sub)``, strictly increasing over the whole log (one
entry's effects share its offset and count up the sub-index). A segment is rolled before a
record that would take it past ``segment_max_bytes``, except that all records of a
segment's first offset stay in that segment (its name must stay unique); a single
oversized record gets a segment of its own.

The index gets an entry for the first frame starting at least ``index_every_bytes`` after
the previous entry (or after the header). It is a cache: never fsynced, rebuilt on open
from the scan and rewritten when missing or different.

Open and repair. ``open`` reads every frame of every segment (streaming; CRC32C is hardware
accelerated) and checks headers, CRCs and record order:

- a **torn tail** of the *last* segment is cut off: a bad frame (cut short, a length past
  the end of the file, a CRC mismatch) after which no valid frame starts anywhere in the
  file, zeros to the end included, as for the Raft WAL (``snapshots._tail``). The file is
  truncated at the bad frame, with a WARNING; a last segment left with no records (a crash
  right after rolling, a header cut short or all zeros) is removed. The lost records are
  re-derived from the Raft log (a synced last frame gone bad cannot be told from a torn
  write, and is cut off like one, as the WAL does).
- anything else is a :class:`SegmentCorruptionError` naming the file and byte position and
  how to recover: a bad frame of the last segment with a valid frame after it (a byte
  changed in synced data, a flipped length field included), any bad frame of an older
  segment, a bad header (but a zeroed one of the last segment), records out of order.

One kind of damage the format cannot see (the property tests pin it down): an older
segment cut exactly at a frame boundary is a valid, shorter segment (offsets may skip,
since an entry with no effects writes no record). And as for the WAL, a power cut that
wrote an unsynced write's pages out of order (a zeroed page with a whole frame of it
after) is reported as corruption, the safe side.

:func:`scan_directory` is what :meth:`raftlog.segments.SegmentLog.open` runs;
:func:`cut_segment` what its ``truncate_after`` runs.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from raftlog.errors import RaftLogError
from snapshots import (
    HEADER_BYTES,
    INDEX_ENTRY,
    RecordReader,
    RecordStreamError,
    StreamKind,
    TornTailError,
    fsync_dir,
    tail_verdict,
)

log = logging.getLogger("raftlog.segments")  # one logger for the change log, scan included

SEGMENT_NAME = re.compile(r"^(\d{20})\.seg$")
INDEX_NAME = re.compile(r"^\d{20}\.idx$")
READ_BUFFER_BYTES = 128 * 1024

fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class SegmentCorruptionError(RaftLogError):
    """A change-log segment holds damaged data that is not a torn tail."""

    recovery = (
        "this member cannot start from its change log: stop it, wipe its data directory and "
        'let it rejoin from the other members (README, "Recovering a member")'
    )

    def __init__(self, path: str | os.PathLike[str], position: int, reason: str) -> None:
        super().__init__(
            f"{path}: corrupt change-log segment at byte {position}: {reason}; {self.recovery}"
        )
        self.path = os.fspath(path)
        self.position = position
        self.reason = reason


@dataclass(slots=True)
class Segment:
    first_offset: int
    path: Path
    size: int
    last: tuple[int, int]
    #: (offset, position) entries; appended in place, replaced (never shrunk) on truncation,
    #: so a reader holding the list and its length sees a stable prefix.
    index: list[tuple[int, int]] = field(default_factory=list)

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".idx")


def index_due(index: list[tuple[int, int]], every_bytes: int, position: int) -> bool:
    previous = index[-1][1] if index else HEADER_BYTES
    return position - previous >= every_bytes


def scan_directory(path: Path, index_every_bytes: int) -> list[Segment]:
    """Verify every segment in ``path`` (repairing a torn tail of the last one), drop stray
    index files, rewrite stale ones, fsync the directory; the segments, oldest first."""
    found = sorted(
        (int(m[1]), path / name)
        for name in os.listdir(path)
        if (m := SEGMENT_NAME.match(name)) is not None
    )
    segments: list[Segment] = []
    for i, (first_offset, seg_path) in enumerate(found):
        previous = segments[-1].last if segments else None
        is_last = i == len(found) - 1
        segment = scan_segment(seg_path, first_offset, index_every_bytes, previous, is_last)
        if segment is not None:
            segments.append(segment)
    kept = {s.index_path.name for s in segments}
    for name in os.listdir(path):
        if INDEX_NAME.match(name) and name not in kept:
            (path / name).unlink()  # left behind by an interrupted delete
    for segment in segments:
        write_index_if_stale(segment)
    fsync_dir(path)
    return segments


def check_header(reader: RecordReader, path: Path, first_offset: int) -> None:
    """Read and check a segment header; raises RecordStreamError or SegmentCorruptionError."""
    header = reader.read_header()
    if header.kind != StreamKind.CHANGE_LOG_SEGMENT:
        raise SegmentCorruptionError(path, 0, f"stream kind {header.kind.name}, not a segment")
    if header.base_offset != first_offset:
        raise SegmentCorruptionError(
            path, 0, f"header base offset {header.base_offset} does not match the file name"
        )


def scan_segment(
    path: Path,
    first_offset: int,
    index_every_bytes: int,
    previous: tuple[int, int] | None,
    is_last: bool,
) -> Segment | None:
    """Verify one segment; repair a torn tail if `is_last`. None if it was removed."""
    segment = Segment(first_offset, path, HEADER_BYTES, (first_offset, 0))
    records = 0
    torn: RecordStreamError | None = None
    with open(path, "rb", buffering=READ_BUFFER_BYTES) as f:
        file_size = os.fstat(f.fileno()).st_size
        reader = RecordReader(f, path=str(path), start=0)
        try:
            check_header(reader, path, first_offset)
            for record in reader:
                key = (record.offset, record.sub)
                if records == 0 and record.offset != first_offset:
                    raise SegmentCorruptionError(
                        path, record.position, f"first record has offset {record.offset}"
                    )
                after = segment.last if records else previous
                if after is not None and key <= after:
                    raise SegmentCorruptionError(
                        path, record.position, f"record {key} does not follow {after}"
                    )
                if index_due(segment.index, index_every_bytes, record.position):
                    segment.index.append((record.offset, record.position))
                segment.last = key
                records += 1
        except RecordStreamError as exc:
            if not is_last:
                reason = exc.reason
                if isinstance(exc, TornTailError):
                    reason = "the data ends inside a frame, but this is not the last segment"
                raise SegmentCorruptionError(path, exc.position, reason) from exc
            # a torn tail only if no valid frame follows (snapshots._tail); this search
            # runs only here, after a bad frame
            follows = segment.last if records else (first_offset, -1)
            torn = tail_verdict(f, exc, end=file_size, follows=follows)
            if not torn.repairable:
                raise SegmentCorruptionError(path, torn.position, torn.reason) from exc
        if records == 0:
            if not is_last:
                raise SegmentCorruptionError(path, HEADER_BYTES, "segment has no records")
            log.warning(
                "%s: removing the last segment: no whole record (%d bytes)", path, file_size
            )
            path.unlink()
            segment.index_path.unlink(missing_ok=True)
            return None
        fdatasync(f.fileno())
    segment.size = reader.position
    if torn is not None:
        log.warning(
            "%s: torn tail at byte %d (%s): truncating %d bytes after the last whole record %s",
            path,
            torn.position,
            torn.reason,
            file_size - torn.position,
            segment.last,
        )
        with open(path, "r+b") as f:
            f.truncate(segment.size)
            fdatasync(f.fileno())
    return segment


def write_index_if_stale(segment: Segment) -> None:
    """Rewrite the segment's index file unless it already holds exactly `segment.index`."""
    expected = b"".join(INDEX_ENTRY.pack(o, p) for o, p in segment.index)
    try:
        current = segment.index_path.read_bytes()
    except FileNotFoundError:
        current = None
    if current != expected:
        log.info("%s: rebuilt the index (%d entries)", segment.index_path, len(segment.index))
        segment.index_path.write_bytes(expected)


def cut_segment(segment: Segment, offset: int) -> None:
    """Truncate `segment` after its last record at or below `offset` (which it must hold)."""
    if segment.last[0] <= offset:
        return
    with open(segment.path, "r+b", buffering=READ_BUFFER_BYTES) as f:
        reader = RecordReader(f, path=str(segment.path), end=segment.size)
        k = bisect.bisect_right(segment.index, offset, key=lambda e: e[0])
        reader.seek(segment.index[k - 1][1] if k > 0 else HEADER_BYTES)
        last = segment.last
        cut = segment.size
        try:
            for record in reader:
                if record.offset > offset:
                    cut = record.position
                    break
                last = (record.offset, record.sub)
        except RecordStreamError as exc:
            raise SegmentCorruptionError(segment.path, exc.position, exc.reason) from exc
        f.truncate(cut)
        fdatasync(f.fileno())
    segment.size = cut
    segment.last = last
    segment.index = [e for e in segment.index if e[1] < cut]
    segment.index_path.write_bytes(b"".join(INDEX_ENTRY.pack(o, p) for o, p in segment.index))
