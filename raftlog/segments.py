"""Change-log segment files (DESIGN.md §3): the effects of applied entries, on disk.

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

- a torn tail (the data ends inside a frame) in the *last* segment is cut off: the file is
  truncated at the end of the last whole frame, with a WARNING; a last segment left with no
  records (e.g. a crash right after rolling) is removed. The lost records were never
  acknowledged as durable and are re-derived from the Raft log.
- anything else is a :class:`SegmentCorruptionError` naming the file and byte position: a
  complete frame with a bad CRC anywhere, *including the very last frame of the log* (a
  torn write cannot produce a complete frame, so this is damage, not a crash), a torn tail
  in any segment but the last, a bad header, records out of order.

Two kinds of damage the format cannot see (the property tests pin both down): a bit flip
in a length field that makes its frame run past the end of the file looks exactly like a
torn tail and is repaired as one (see ``snapshots._recordstream``); an older segment cut
exactly at a frame boundary is a valid, shorter segment (offsets may skip, since an entry
with no effects writes no record).

Durability (``fsync_policy``):

- ``always``: each append is flushed and fdatasynced before it returns.
- ``batch`` (group commit): appends return at once; a background thread fdatasyncs the
  active segment when there is unsynced data, at most once every ``fsync_interval_ms``.
  Use :meth:`SegmentLog.wait_flushed` or :attr:`SegmentLog.flushed_offset` to learn what
  is durable.
- ``never``: nothing is fdatasynced per append; data reaches the OS when the write buffer
  fills or on :meth:`~SegmentLog.flush`, and becomes durable on :meth:`~SegmentLog.sync`
  and :meth:`~SegmentLog.close`.

Under every policy, rolling fdatasyncs the finished segment and the directory (once per
segment), so :attr:`~SegmentLog.flushed_offset` only ever waits on the active segment.

Threads: one appender thread calls ``append``; ``read_from``, ``segments``, the offsets
and ``wait_flushed`` may be called from any thread. ``truncate_after`` and
``delete_before`` must not run while a ``read_from`` iterator is reading the segments they
change. A failed write or fdatasync leaves the log unusable: every later call raises
OSError (after a failed fsync the page cache can no longer be trusted).

Errors: :class:`SegmentCorruptionError` (a :class:`~raftlog.errors.RaftLogError`) for bad
data; :class:`~raftlog.errors.ConfigError` (a ValueError) from
:meth:`SegmentConfig.validate`; ValueError for misuse (records out of order, a closed log);
OSError from the file system.
"""

from __future__ import annotations

import bisect
import io
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Literal, NamedTuple

from raftlog.errors import ConfigError, RaftLogError
from snapshots import (
    HEADER_BYTES,
    INDEX_ENTRY,
    Record,
    RecordReader,
    RecordStreamError,
    StreamKind,
    TornTailError,
    encode_header,
    encode_record,
)

__all__ = ["FsyncPolicy", "SegmentConfig", "SegmentCorruptionError", "SegmentInfo", "SegmentLog"]

log = logging.getLogger(__name__)

FsyncPolicy = Literal["batch", "always", "never"]
_FSYNC_POLICIES = ("batch", "always", "never")
_SEGMENT_NAME = re.compile(r"^(\d{20})\.seg$")
_INDEX_NAME = re.compile(r"^\d{20}\.idx$")
_READ_BUFFER_BYTES = 128 * 1024

_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class SegmentCorruptionError(RaftLogError):
    """A change-log segment holds damaged data that is not a torn tail."""

    def __init__(self, path: str | os.PathLike[str], position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt change-log segment at byte {position}: {reason}")
        self.path = os.fspath(path)
        self.position = position
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    segment_max_bytes: int = 64 * 1024 * 1024
    index_every_bytes: int = 4096
    fsync_policy: FsyncPolicy = "batch"
    fsync_interval_ms: int = 5

    def validate(self) -> None:
        """Raise ConfigError (a ValueError) naming the first field out of range."""
        for name in ("segment_max_bytes", "index_every_bytes", "fsync_interval_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(name, f"must be an int, got {value!r}")
        if self.segment_max_bytes <= HEADER_BYTES:
            raise ConfigError(
                "segment_max_bytes", f"must exceed the {HEADER_BYTES}-byte segment header"
            )
        if self.index_every_bytes <= 0:
            raise ConfigError("index_every_bytes", "must be positive")
        if self.fsync_policy not in _FSYNC_POLICIES:
            raise ConfigError("fsync_policy", f"must be one of {_FSYNC_POLICIES}")
        if self.fsync_interval_ms < 0:
            raise ConfigError("fsync_interval_ms", "must not be negative")


class SegmentInfo(NamedTuple):
    first_offset: int
    path: Path
    #: Bytes written, including data still in the write buffer.
    size: int


@dataclass(slots=True)
class _Segment:
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


def _index_due(index: list[tuple[int, int]], every_bytes: int, position: int) -> bool:
    previous = index[-1][1] if index else HEADER_BYTES
    return position - previous >= every_bytes


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentLog:
    """The change log of one node: ordered ``(offset, sub, payload)`` records in segments."""

    def __init__(self, directory: Path, config: SegmentConfig, segments: list[_Segment]) -> None:
        """Internal: use :meth:`open`, which verifies and repairs the directory first."""
        self._dir = directory
        self._config = config
        self._segments = segments
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._file: io.BufferedWriter | None = None
        self._index_file: io.BufferedWriter | None = None
        self._last: tuple[int, int] | None = segments[-1].last if segments else None
        self._flushed = self.last_offset  # open fdatasynced every segment
        self._dirty = False  # appended since the last fdatasync
        self._generation = 0  # bumped by truncate_after: a sync in flight must not count
        self._failure: OSError | None = None
        self._closing = False
        self._closed = False
        self._open_active()
        self._flusher: threading.Thread | None = None
        if config.fsync_policy == "batch":
            self._flusher = threading.Thread(
                target=self._run_flusher, name=f"segment-flusher:{directory}", daemon=True
            )
            self._flusher.start()

    # ------------------------------------------------------------------ open
    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], config: SegmentConfig | None = None
    ) -> SegmentLog:
        """Open (creating if needed) the log in `directory`, verifying and repairing it.

        Raises ConfigError for a bad config, SegmentCorruptionError for damage that is not
        a torn tail of the last segment (see the module docstring), OSError from the file
        system.
        """
        config = config if config is not None else SegmentConfig()
        config.validate()
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        found = sorted(
            (int(m[1]), path / name)
            for name in os.listdir(path)
            if (m := _SEGMENT_NAME.match(name)) is not None
        )
        segments: list[_Segment] = []
        for i, (first_offset, seg_path) in enumerate(found):
            previous = segments[-1].last if segments else None
            is_last = i == len(found) - 1
            segment = _scan_segment(seg_path, first_offset, config, previous, is_last)
            if segment is not None:
                segments.append(segment)
        kept = {s.index_path.name for s in segments}
        for name in os.listdir(path):
            if _INDEX_NAME.match(name) and name not in kept:
                (path / name).unlink()  # left behind by an interrupted delete
        for segment in segments:
            _write_index_if_stale(segment)
        _fsync_dir(path)
        return cls(path, config, segments)

    # ------------------------------------------------------------------ offsets
    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def config(self) -> SegmentConfig:
        return self._config

    @property
    def first_offset(self) -> int:
        """Offset of the first record in the log, 0 if it is empty."""
        segments = self._segments
        return segments[0].first_offset if segments else 0

    @property
    def last_offset(self) -> int:
        """Offset of the last record appended, 0 if the log is empty."""
        last = self._last
        return last[0] if last is not None else 0

    @property
    def last_offset_sub(self) -> tuple[int, int] | None:
        """``(offset, sub)`` of the last record appended, None if the log is empty."""
        return self._last

    @property
    def flushed_offset(self) -> int:
        """The last offset known fdatasynced (all its records, and everything before)."""
        return self._flushed

    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first."""
        with self._lock:
            return [SegmentInfo(s.first_offset, s.path, s.size) for s in self._segments]

    # ------------------------------------------------------------------ writing
    def append(self, offset: int, sub: int, payload: bytes) -> None:
        """Append one record; durable per the fsync policy.

        Raises ValueError if ``(offset, sub)`` does not follow the last record, if offset
        or sub is out of range, if the record is too big, or if the log is closed; OSError
        if writing (or, under "always", fdatasync) fails, after which the log is unusable.
        """
        self.append_many(((offset, sub, payload),))

    def append_many(self, records: Iterable[tuple[int, int, bytes]]) -> None:
        """Append ``(offset, sub, payload)`` records in order, as :meth:`append` each would,
        under one lock (the apply thread appends a whole apply group at once). Under
        "always", one fdatasync covers them all before this returns.

        Raises as :meth:`append`; the records before a refused one are written.
        """
        frames = [(o, sub, encode_record(o, sub, payload)) for o, sub, payload in records]
        if not frames:
            return
        config = self._config
        max_bytes, index_every = config.segment_max_bytes, config.index_every_bytes
        with self._lock:
            self._check_usable()
            wrote = False
            try:
                segment = self._segments[-1] if self._segments else None
                last = self._last
                for offset, sub, frame in frames:
                    key = (offset, sub)
                    if last is not None and key <= last:
                        raise ValueError(f"record {key} does not follow the last record {last}")
                    if segment is None or (
                        segment.size + len(frame) > max_bytes and segment.first_offset != offset
                    ):
                        segment = self._roll(offset)
                    assert self._file is not None and self._index_file is not None
                    position = segment.size
                    self._file.write(frame)
                    wrote = True
                    segment.size += len(frame)
                    segment.last = key
                    self._last = last = key
                    if _index_due(segment.index, index_every, position):
                        segment.index.append((offset, position))
                        self._index_file.write(INDEX_ENTRY.pack(offset, position))
            except OSError as exc:
                self._failure = exc
                self._cond.notify_all()
                raise
            finally:
                if wrote and self._failure is None:
                    self._written()

    def _written(self) -> None:
        """After appends (lock held): sync now ("always") or wake the flusher."""
        try:
            if self._config.fsync_policy == "always":
                assert self._file is not None
                self._file.flush()
                _fdatasync(self._file.fileno())
                self._flushed = self.last_offset
                self._cond.notify_all()
            elif not self._dirty:
                self._dirty = True
                self._cond.notify_all()
        except OSError as exc:
            self._failure = exc
            self._cond.notify_all()
            raise

    def flush(self) -> None:
        """Hand buffered data to the OS (no fdatasync). Raises ValueError if closed, OSError."""
        with self._lock:
            self._check_usable()
            self._flush_to_os()

    def sync(self) -> None:
        """Flush and fdatasync now; afterwards ``flushed_offset == last_offset``.

        Raises ValueError if closed, OSError if fdatasync fails (the log is then unusable).
        """
        with self._lock:
            self._check_usable()
            target = self.last_offset
        self._sync_active(check=True)
        self.wait_flushed(target)  # a background fdatasync may still be covering part of it

    def wait_flushed(self, offset: int, timeout_s: float | None = None) -> bool:
        """Block until ``flushed_offset >= offset``; False on timeout.

        Under "never" only :meth:`sync` (or a roll) advances it. Raises OSError if a
        background fdatasync failed.
        """
        with self._cond:
            self._cond.wait_for(
                lambda: self._flushed >= offset or self._failure is not None or self._closed,
                timeout_s,
            )
            if self._flushed >= offset:
                return True
            if self._failure is not None:
                raise OSError(f"{self._dir}: change log failed: {self._failure}")
            return False

    def close(self) -> None:
        """Stop the flusher, flush and fdatasync, close the files. Idempotent.

        Raises OSError if the final fdatasync fails, or if the log had failed earlier
        (the files are closed either way).
        """
        with self._cond:
            if self._closed or self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        if self._flusher is not None:
            self._flusher.join()
        with self._cond:
            try:
                if self._failure is None:
                    self._finish_active()
            finally:
                self._close_files()
                self._closed = True
                self._cond.notify_all()
            if self._failure is not None:
                raise OSError(f"{self._dir}: change log failed: {self._failure}")

    def __enter__(self) -> SegmentLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def read_from(self, offset: int) -> Iterator[Record]:
        """Records with ``record.offset >= offset``, in order, across segments.

        Sees every record appended before the call (buffered data is flushed to the OS
        first); records appended after the call do not appear. Raises ValueError if closed
        (at the call); the iterator raises SegmentCorruptionError if a frame it reads is
        damaged (open verified them, so this means they changed since).
        """
        with self._lock:
            self._check_usable()
            self._flush_to_os()
            views = [
                (s.path, s.first_offset, s.size, s.index, len(s.index)) for s in self._segments
            ]
        start = 0
        for i, (_, first_offset, _, _, _) in enumerate(views):
            if first_offset < offset:
                start = i
        return self._iter_records(views[start:], offset)

    @staticmethod
    def _iter_records(
        views: list[tuple[Path, int, int, list[tuple[int, int]], int]], offset: int
    ) -> Iterator[Record]:
        for path, first_offset, size, index, index_len in views:
            with open(path, "rb", buffering=_READ_BUFFER_BYTES) as f:
                reader = RecordReader(f, path=str(path), end=size)
                try:
                    _check_header(reader, path, first_offset)
                    k = bisect.bisect_left(index, offset, 0, index_len, key=lambda e: e[0])
                    if k > 0:  # index[k - 1] is the last entry below `offset`
                        reader.seek(index[k - 1][1])
                    for record in reader:
                        if record.offset >= offset:
                            yield record
                except RecordStreamError as exc:
                    raise SegmentCorruptionError(path, exc.position, exc.reason) from exc

    # ------------------------------------------------------------------ repair, retention
    def truncate_after(self, offset: int) -> None:
        """Drop every record with ``record.offset > offset``; durable when it returns.

        Whole segments past `offset` are deleted (newest first, so a crash leaves a
        prefix), the segment holding `offset` is cut after its last record at `offset`.
        Raises ValueError if closed, SegmentCorruptionError if the segment to cut is
        damaged, OSError.
        """
        with self._lock:
            self._check_usable()
            if self._last is None or self._last[0] <= offset:
                return
            try:
                self._flush_to_os()
                self._close_files()
                while self._segments and self._segments[-1].first_offset > offset:
                    segment = self._segments.pop()
                    segment.path.unlink()
                    segment.index_path.unlink(missing_ok=True)
                if self._segments:
                    _cut_segment(self._segments[-1], offset)
                _fsync_dir(self._dir)
                self._last = self._segments[-1].last if self._segments else None
                self._flushed = self.last_offset
                self._dirty = False
                self._generation += 1
                self._open_active()
            except OSError as exc:
                self._failure = exc
                raise
            finally:
                self._cond.notify_all()

    def delete_before(
        self, offset: int, min_age_s: float = 0.0, archive_dir: str | os.PathLike[str] | None = None
    ) -> int:
        """Delete whole segments whose records all have ``record.offset < offset`` and whose
        file was last written at least ``min_age_s`` ago; with ``archive_dir`` they are moved
        there instead (for an offline compaction job).

        The active (last) segment is always kept. Returns how many segments were removed.
        Raises ValueError if closed, OSError.

        Only choosing the segments holds the log's lock: the files are removed after, so
        appends (the commit path) never wait for the file system to free 64 MB segments
        and sync the directory. A reader that opened a removed segment before keeps it.
        """
        with self._lock:
            self._check_usable()
            gone: list[_Segment] = []
            now = time.time()
            while len(self._segments) > 1 and self._segments[0].last[0] < offset:
                segment = self._segments[0]
                if min_age_s > 0 and now - segment.path.stat().st_mtime < min_age_s:
                    break
                gone.append(self._segments.pop(0))
        for segment in gone:
            if archive_dir is not None:
                os.makedirs(archive_dir, exist_ok=True)
                os.replace(segment.path, os.path.join(archive_dir, segment.path.name))
            else:
                segment.path.unlink()
            segment.index_path.unlink(missing_ok=True)
        if gone:
            _fsync_dir(self._dir)
        return len(gone)

    # ------------------------------------------------------------------ internals
    def _check_usable(self) -> None:
        if self._closed or self._closing:
            raise ValueError(f"{self._dir}: change log is closed")
        if self._failure is not None:
            raise OSError(f"{self._dir}: change log failed: {self._failure}")

    def _open_active(self) -> None:
        if self._segments:
            segment = self._segments[-1]
            self._file = open(segment.path, "ab")  # closed in _close_files
            self._index_file = open(segment.index_path, "ab")

    def _close_files(self) -> None:
        for f in (self._file, self._index_file):
            if f is not None:
                f.close()
        self._file = self._index_file = None

    def _flush_to_os(self) -> None:
        if self._file is not None and self._index_file is not None:
            self._file.flush()
            self._index_file.flush()

    def _finish_active(self) -> None:
        """Flush, fdatasync and close the active segment (lock held)."""
        if self._file is not None:
            self._flush_to_os()
            _fdatasync(self._file.fileno())
            self._flushed = max(self._flushed, self.last_offset)
            self._dirty = False
            self._cond.notify_all()
        self._close_files()

    def _roll(self, first_offset: int) -> _Segment:
        """Finish the active segment and start one named `first_offset` (lock held)."""
        self._finish_active()
        path = self._dir / f"{first_offset:020d}.seg"
        segment = _Segment(first_offset, path, HEADER_BYTES, (first_offset, 0))
        with open(path, "xb") as f:
            f.write(encode_header(StreamKind.CHANGE_LOG_SEGMENT, first_offset))
        segment.index_path.write_bytes(b"")
        _fsync_dir(self._dir)
        self._segments.append(segment)
        self._open_active()
        return segment

    def _sync_active(self, *, check: bool) -> None:
        """fdatasync the active segment if it has unsynced data; fdatasync runs unlocked."""
        with self._lock:
            if check:
                self._check_usable()
            if self._file is None or not self._dirty or self._failure is not None:
                return
            try:
                self._flush_to_os()
                fd = os.dup(self._file.fileno())  # stays valid if the segment rolls meanwhile
            except OSError as exc:
                self._failure = exc
                self._cond.notify_all()
                raise
            target = self.last_offset
            generation = self._generation
            self._dirty = False
        try:
            _fdatasync(fd)
        except OSError as exc:
            with self._lock:
                self._failure = exc
                self._cond.notify_all()
            raise
        finally:
            os.close(fd)
        with self._lock:
            if generation == self._generation and target > self._flushed:
                self._flushed = target
            self._cond.notify_all()

    def _run_flusher(self) -> None:
        interval_s = self._config.fsync_interval_ms / 1000
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._dirty or self._closing)
                if self._closing or self._failure is not None:
                    return
            try:
                self._sync_active(check=False)
            except OSError:
                log.exception(
                    "%s: background fdatasync failed; the change log is unusable", self._dir
                )
                return
            with self._cond:
                if self._cond.wait_for(lambda: self._closing, interval_s):
                    return


def _check_header(reader: RecordReader, path: Path, first_offset: int) -> None:
    """Read and check a segment header; raises RecordStreamError or SegmentCorruptionError."""
    header = reader.read_header()
    if header.kind != StreamKind.CHANGE_LOG_SEGMENT:
        raise SegmentCorruptionError(path, 0, f"stream kind {header.kind.name}, not a segment")
    if header.base_offset != first_offset:
        raise SegmentCorruptionError(
            path, 0, f"header base offset {header.base_offset} does not match the file name"
        )


def _scan_segment(
    path: Path,
    first_offset: int,
    config: SegmentConfig,
    previous: tuple[int, int] | None,
    is_last: bool,
) -> _Segment | None:
    """Verify one segment; repair a torn tail if `is_last`. None if it was removed."""
    segment = _Segment(first_offset, path, HEADER_BYTES, (first_offset, 0))
    records = 0
    torn: TornTailError | None = None
    with open(path, "rb", buffering=_READ_BUFFER_BYTES) as f:
        file_size = os.fstat(f.fileno()).st_size
        reader = RecordReader(f, path=str(path), start=0)
        try:
            _check_header(reader, path, first_offset)
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
                if _index_due(segment.index, config.index_every_bytes, record.position):
                    segment.index.append((record.offset, record.position))
                segment.last = key
                records += 1
        except TornTailError as exc:
            torn = exc
        except RecordStreamError as exc:
            # After a power loss a file's tail can come back zero-filled: that is an
            # unfinished write (a torn tail), not corruption of written data.
            if not (is_last and _zeros_to_end(f, exc.position, file_size)):
                raise SegmentCorruptionError(path, exc.position, exc.reason) from exc
            torn = TornTailError(exc.position, str(path))
        if torn is not None and not is_last:
            raise SegmentCorruptionError(
                path,
                torn.position,
                "the data ends inside a frame, but this is not the last segment",
            )
        if records == 0:
            if not is_last:
                raise SegmentCorruptionError(path, HEADER_BYTES, "segment has no records")
            log.warning(
                "%s: removing the last segment: no whole record (%d bytes)", path, file_size
            )
            path.unlink()
            segment.index_path.unlink(missing_ok=True)
            return None
        _fdatasync(f.fileno())
    segment.size = reader.position
    if torn is not None:
        log.warning(
            "%s: torn tail at byte %d: truncating %d bytes after the last whole record %s",
            path,
            torn.position,
            file_size - torn.position,
            segment.last,
        )
        with open(path, "r+b") as f:
            f.truncate(segment.size)
            _fdatasync(f.fileno())
    return segment


def _zeros_to_end(f: BinaryIO, position: int, file_size: int) -> bool:
    """True if every byte from `position` to the end of the file is zero."""
    f.seek(position)
    remaining = file_size - position
    while remaining > 0:
        chunk = f.read(min(remaining, 1 << 20))
        if not chunk or chunk.count(0) != len(chunk):
            return False
        remaining -= len(chunk)
    return True


def _write_index_if_stale(segment: _Segment) -> None:
    """Rewrite the segment's index file unless it already holds exactly `segment.index`."""
    expected = b"".join(INDEX_ENTRY.pack(o, p) for o, p in segment.index)
    try:
        current = segment.index_path.read_bytes()
    except FileNotFoundError:
        current = None
    if current != expected:
        log.info("%s: rebuilt the index (%d entries)", segment.index_path, len(segment.index))
        segment.index_path.write_bytes(expected)


def _cut_segment(segment: _Segment, offset: int) -> None:
    """Truncate `segment` after its last record at or below `offset` (which it must hold)."""
    if segment.last[0] <= offset:
        return
    with open(segment.path, "r+b", buffering=_READ_BUFFER_BYTES) as f:
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
        _fdatasync(f.fileno())
    segment.size = cut
    segment.last = last
    segment.index = [e for e in segment.index if e[1] < cut]
    segment.index_path.write_bytes(b"".join(INDEX_ENTRY.pack(o, p) for o, p in segment.index))
