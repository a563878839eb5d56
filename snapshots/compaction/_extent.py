"""Where a change log ends, learnt before a compaction is planned: how many segment files a
directory holds and the offset and term of its last record, so that a caller (``metaledger
compact``) can refuse an ``upto`` past the log, or a directory with no segments, before any
Spark session starts.

Only the tail of the last segment with records is read: from its last sparse-index point
that holds a good frame of the indexed offset (the index is an unsynced cache), else from
its header. A torn tail of the last file (a node writing, or one that crashed mid-write) ends
the log there, as the node's own scan would cut it; any other damage is a ChangeLogError.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from google.protobuf.message import DecodeError

from protos.records_pb2 import Effect
from snapshots._recordstream import (
    HEADER_BYTES,
    RecordReader,
    RecordStreamError,
    StreamKind,
    TornTailError,
    read_index,
)
from snapshots._replay import ChangeLogError
from snapshots.compaction._plan import SegmentFile, list_segments

__all__ = ["LogEnd", "log_end"]

_ALL = 2**63 - 1


class LogEnd(NamedTuple):
    """What :func:`log_end` found: `segments` files, the first named for `first_offset` (None
    without segments: the offset of its first record, if it has any); `last_offset` None
    when none of them holds a record (then `last_term` is 0)."""

    segments: int
    first_offset: int | None
    last_offset: int | None
    last_term: int


def log_end(directory: str | os.PathLike[str]) -> LogEnd:
    """The end of the change log in `directory` (segment files ``<first-offset:020d>.seg``).
    Raises ChangeLogError (a wrong header, a damaged frame that is not the last file's torn
    tail, an undecodable effect), OSError (e.g. not a directory)."""
    segments = list_segments(directory, _ALL)
    first = segments[0].first_offset if segments else None
    for i in range(len(segments) - 1, -1, -1):
        found = _last_record(segments[i], is_last=i == len(segments) - 1)
        if found is not None:
            return LogEnd(len(segments), first, *found)
    return LogEnd(len(segments), first, None, 0)


def _last_record(seg: SegmentFile, *, is_last: bool) -> tuple[int, int] | None:
    """(offset, term) of the last record of one segment file, or None when it has none."""
    points = [e for e in read_index(Path(seg.path).with_suffix(".idx")) if e[1] < seg.size_bytes]
    with open(seg.path, "rb") as f:
        reader = RecordReader(f, path=seg.path, end=seg.size_bytes)
        try:
            header = reader.read_header()
        except TornTailError:
            if is_last:
                return None  # rolled, header not yet written out: the node removes it
            raise ChangeLogError(seg.path, 0, "the header is cut short") from None
        except RecordStreamError as e:
            raise ChangeLogError(e.path, e.position, f"{type(e).__name__}: {e.reason}") from e
        if header.kind != StreamKind.CHANGE_LOG_SEGMENT or header.base_offset != seg.first_offset:
            raise ChangeLogError(
                seg.path,
                0,
                f"header of kind {header.kind.name} based at {header.base_offset} "
                f"in a segment named for {seg.first_offset}",
            )
        start = HEADER_BYTES
        if points:
            offset, position = points[-1]
            reader.seek(position)
            try:
                first = reader.next_record()
            except RecordStreamError:
                first = None
            if first is not None and first.offset == offset:
                start = position
        reader.seek(start)
        last = None
        try:
            for record in reader:
                last = record
        except TornTailError:
            if not is_last:
                raise ChangeLogError(
                    seg.path, reader.position, "cut short inside a frame (not the last segment)"
                ) from None
        except RecordStreamError as e:
            raise ChangeLogError(e.path, e.position, f"{type(e).__name__}: {e.reason}") from e
    if last is None:
        return None
    try:
        term = Effect.FromString(last.payload).term
    except DecodeError as e:
        raise ChangeLogError(seg.path, last.position, f"undecodable effect: {e}") from e
    return last.offset, term
