"""Change-log segment files: the effects of applied entries, on disk.

The files' layout, and how ``open`` verifies and repairs them (torn tails cut, damage a
:class:`~raftlog.segment_files.SegmentCorruptionError`): :mod:`raftlog.segment_files`.

Longer than 500 lines on purpose: :class:`SegmentLog` is one object whose writer, readers,
truncation, retention and background flusher all work under one lock on one active file
and its roll-back mark; the file-level scanning and repair are in
:mod:`raftlog.segment_files`.

Durability (``fsync_policy``):

- ``always``: each append is flushed and fdatasynced before it returns.
- ``batch`` (group commit): appends return at once; a background thread fdatasyncs the
  active segment when there is unsynced data, at most once every ``fsync_interval_ms``.
  Use :meth:`SegmentLog.wait_flushed` or :attr:`SegmentLog.flushed_offset` to learn what
  is durable.
- ``never``: nothing is fdatasynced per append; data reaches the OS as each append
  returns (no user-space buffer) and becomes durable on :meth:`~SegmentLog.sync` and
  :meth:`~SegmentLog.close`.

Under every policy, rolling fdatasyncs the finished segment and the directory (once per
segment), so :attr:`~SegmentLog.flushed_offset` only ever waits on the active segment.

Threads: one appender thread calls ``append``; ``read_from``, ``segments``, the offsets
and ``wait_flushed`` may be called from any thread. ``truncate_after`` and
``delete_before`` must not run while a ``read_from`` iterator is reading the segments they
change.

Transient errors (ENOSPC, EIO, EMFILE...; docs/operations.md, "Durability"): a call of
:meth:`SegmentLog.append_many` is written with one write per file (no user-space buffer) and is all
or nothing: when a write, a roll or (under "always") the fdatasync fails, the segment and its index
are cut back to their last good length, segments the call started are removed, and the OSError is
raised with the log usable: the caller retries the same records. The background flusher
keeps the data dirty when an fdatasync fails and retries it with backoff, reporting the
fault to :attr:`SegmentLog.health` (``change-log-sync``) and clearing it when a retry
succeeds. Only a roll-back that itself fails leaves the log unusable: every later call
then raises :class:`ChangeLogBrokenError` (not an OSError: the node must stop).

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
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, NamedTuple

from raftlog.errors import ConfigError, RaftLogError
from raftlog.health import Backoff, Health
from raftlog.segment_files import (
    READ_BUFFER_BYTES,
    Segment,
    SegmentCorruptionError,
    check_header,
    cut_segment,
    fdatasync,
    scan_directory,
)
from snapshots import (
    HEADER_BYTES,
    INDEX_ENTRY,
    Record,
    RecordReader,
    RecordStreamError,
    StreamKind,
    encode_header,
    encode_record,
    fsync_dir,
    makedirs_durable,
)

__all__ = [
    "ChangeLogBrokenError",
    "FsyncPolicy",
    "SegmentConfig",
    "SegmentInfo",
    "SegmentLog",
]

log = logging.getLogger(__name__)

FsyncPolicy = Literal["batch", "always", "never"]
_FSYNC_POLICIES = ("batch", "always", "never")


class ChangeLogBrokenError(RaftLogError):
    """A failed write could not be rolled back: the change log's files no longer match what
    it believes; the node must stop (its log is re-derived from Raft on restart)."""


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


class SegmentLog:
    """The change log of one node: ordered ``(offset, sub, payload)`` records in segments."""

    def __init__(self, directory: Path, config: SegmentConfig, segments: list[Segment]) -> None:
        """Internal: use :meth:`open`, which verifies and repairs the directory first."""
        self._dir = directory
        self._config = config
        self._segments = segments
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # unbuffered: each append_many is one write per file, so a failed one is cut back
        self._file: io.FileIO | None = None
        self._index_file: io.FileIO | None = None
        self._last: tuple[int, int] | None = segments[-1].last if segments else None
        self._flushed = self.last_offset  # open fdatasynced every segment
        self._dirty = False  # appended since the last fdatasync
        #: the flusher waits for data to sync (not an interval): an append must wake it.
        #: Under load it finds new data when its interval ends, and appends wake no thread
        #: (a wake-up per apply group cost the appender more than the append)
        self._flusher_idle = False
        self._generation = 0  # bumped by truncate_after: a sync in flight must not count
        self._failure: OSError | None = None  # truncate_after failed: the log is unusable
        self._broken: str = ""  # a roll-back failed (ChangeLogBrokenError)
        #: where transient faults are reported (the node's shared one, set by its owner)
        self.health = Health()
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
        makedirs_durable(path)
        segments = scan_directory(path, config.index_every_bytes)
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

        Raises ValueError as :meth:`append` (the records before a refused one are
        written). An OSError leaves the log as it was before the call (see the module
        docstring): retry the same records.
        """
        frames = [(o, sub, encode_record(o, sub, payload)) for o, sub, payload in records]
        if not frames:
            return
        config = self._config
        max_bytes, index_every = config.segment_max_bytes, config.index_every_bytes
        with self._lock:
            self._check_usable()
            mark = self._mark()
            data: list[bytes] = []
            index_data: list[bytes] = []
            refused: ValueError | None = None
            try:
                if self._file is None and self._segments:
                    self._open_active()  # closed by a roll-back (or EMFILE before)
                segment = self._segments[-1] if self._segments else None
                last = self._last
                # the active segment's size and last key in locals, stored back before a
                # roll and at the end (all under the lock; the file is written after)
                size, indexed = 0, 0
                if segment is not None:
                    size = segment.size
                    indexed = segment.index[-1][1] if segment.index else HEADER_BYTES
                for offset, sub, frame in frames:
                    key = (offset, sub)
                    if last is not None and key <= last:
                        refused = ValueError(f"record {key} does not follow the last record {last}")
                        break
                    n = len(frame)
                    if segment is None or (size + n > max_bytes and segment.first_offset != offset):
                        if segment is not None:
                            self._store(segment, size, last)
                        self._write_out(data, index_data)
                        segment = self._roll(offset)
                        size = segment.size
                        indexed = segment.index[-1][1] if segment.index else HEADER_BYTES
                    data.append(frame)
                    if size - indexed >= index_every:  # index_due, with its last position kept
                        segment.index.append((offset, size))
                        index_data.append(INDEX_ENTRY.pack(offset, size))
                        indexed = size
                    size += n
                    last = key
                if segment is not None:
                    self._store(segment, size, last)
                self._write_out(data, index_data)
                if self._last != mark.last:
                    self._written()
            except OSError:
                self._roll_back(mark)
                raise
            if refused is not None:
                raise refused

    def _store(self, segment: Segment, size: int, last: tuple[int, int] | None) -> None:
        """append_many's running size and last key, into ``segment`` and the log (lock
        held); nothing when no record went to ``segment`` since it was read."""
        if last is not None and last != self._last:
            segment.size, segment.last = size, last
            self._last = last

    def _write_out(self, data: list[bytes], index_data: list[bytes]) -> None:
        """Write the frames (and index entries) gathered for the active segment (lock held)."""
        if data:
            assert self._file is not None
            blob = b"".join(data)
            self._check_length(len(blob))
            _write_all(self._file, blob)
            data.clear()
        if index_data:
            assert self._index_file is not None
            _write_all(self._index_file, b"".join(index_data))
            index_data.clear()

    def _check_length(self, adding: int) -> None:
        """The active file must be as long as what this log wrote to it (lock held; one
        fstat a write): a file cut or extended from outside under a running member would
        have the next records land after a hole or a gap, which a restart reads as whole.
        Breaks the log (ChangeLogBrokenError, the node stops) naming the file and byte."""
        assert self._file is not None
        segment = self._segments[-1]
        expected = segment.size - adding
        size = os.fstat(self._file.fileno()).st_size
        if size != expected:
            self._broken = (
                f"{segment.path}: changed under the running member at byte {min(size, expected)}"
                f" (the file is {size} bytes, {expected} were written); stop it, wipe its data "
                'directory and let it rejoin from the other members (README, "Recovering a '
                'member")'
            )
            self._cond.notify_all()
            raise ChangeLogBrokenError(f"{self._dir}: {self._broken}")

    def _mark(self) -> _Mark:
        segment = self._segments[-1] if self._segments else None
        return _Mark(
            len(self._segments),
            segment.size if segment is not None else 0,
            segment.last if segment is not None else (0, 0),
            len(segment.index) if segment is not None else 0,
            self._last,
        )

    def _roll_back(self, mark: _Mark) -> None:
        """Undo a failed append_many (lock held): remove the segments it started, cut the
        one that was active back to its length before, restore the offsets."""
        try:
            rolled = len(self._segments) > mark.segments
            if rolled:
                self._close_files()
            while len(self._segments) > mark.segments:
                segment = self._segments.pop()
                segment.path.unlink(missing_ok=True)
                segment.index_path.unlink(missing_ok=True)
            if self._segments:
                segment = self._segments[-1]
                index = segment.index[: mark.index_len]
                if len(index) != len(segment.index):
                    segment.index = index  # replaced, never shrunk: readers hold the old one
                segment.size, segment.last = mark.size, mark.segment_last
                if self._file is not None and self._index_file is not None:
                    os.ftruncate(self._file.fileno(), mark.size)
                    os.ftruncate(self._index_file.fileno(), mark.index_len * INDEX_ENTRY.size)
                else:
                    os.truncate(segment.path, mark.size)
                    os.truncate(segment.index_path, mark.index_len * INDEX_ENTRY.size)
        except OSError as exc:
            self._close_files()
            self._broken = f"a failed write could not be rolled back: {exc}"
            self._cond.notify_all()
            raise ChangeLogBrokenError(f"{self._dir}: {self._broken}") from exc
        finally:
            self._last = mark.last
        last = mark.last[0] if mark.last is not None else 0
        if self._flushed > last:
            self._flushed = last  # a roll synced records of the call that are now gone
        if self._flushed < last:
            self._dirty = True  # what was unsynced before the call still is
        self._cond.notify_all()

    def _written(self) -> None:
        """After appends (lock held): sync now ("always") or wake the flusher."""
        if self._config.fsync_policy == "always":
            assert self._file is not None
            fdatasync(self._file.fileno())
            self._flushed = self.last_offset
            self._cond.notify_all()
        elif not self._dirty:
            self._dirty = True
            if self._flusher_idle:  # else it looks by itself when its interval ends
                self._cond.notify_all()

    def flush(self) -> None:
        """Hand buffered data to the OS (no fdatasync; appends are unbuffered, so this only
        checks the log is open). Raises ValueError if closed."""
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
                lambda: (
                    self._flushed >= offset
                    or self._failure is not None
                    or bool(self._broken)
                    or self._closed
                ),
                timeout_s,
            )
            if self._flushed >= offset:
                return True
            if self._broken:
                raise ChangeLogBrokenError(f"{self._dir}: {self._broken}")
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
                if self._failure is None and not self._broken:
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
            with open(path, "rb", buffering=READ_BUFFER_BYTES) as f:
                reader = RecordReader(f, path=str(path), end=size)
                try:
                    check_header(reader, path, first_offset)
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
                    cut_segment(self._segments[-1], offset)
                fsync_dir(self._dir)
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
            gone: list[Segment] = []
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
            fsync_dir(self._dir)
        return len(gone)

    # ------------------------------------------------------------------ internals
    def _check_usable(self) -> None:
        if self._closed or self._closing:
            raise ValueError(f"{self._dir}: change log is closed")
        if self._broken:
            raise ChangeLogBrokenError(f"{self._dir}: {self._broken}")
        if self._failure is not None:
            raise OSError(f"{self._dir}: change log failed: {self._failure}")

    def _open_active(self) -> None:
        if self._segments:
            segment = self._segments[-1]
            self._file = open(segment.path, "ab", buffering=0)  # closed in _close_files
            try:
                self._index_file = open(segment.index_path, "ab", buffering=0)
            except OSError:
                self._file.close()
                self._file = None
                raise

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
            fdatasync(self._file.fileno())
            self._flushed = max(self._flushed, self.last_offset)
            self._dirty = False
            self._cond.notify_all()
        self._close_files()

    def _roll(self, first_offset: int) -> Segment:
        """Finish the active segment and start one named `first_offset` (lock held).

        An OSError leaves no file of the new segment behind (the caller rolls back)."""
        self._finish_active()
        path = self._dir / f"{first_offset:020d}.seg"
        segment = Segment(first_offset, path, HEADER_BYTES, (first_offset, 0))
        try:
            with open(path, "xb") as f:
                f.write(encode_header(StreamKind.CHANGE_LOG_SEGMENT, first_offset))
            segment.index_path.write_bytes(b"")
            fsync_dir(self._dir)
        except OSError:
            path.unlink(missing_ok=True)
            segment.index_path.unlink(missing_ok=True)
            raise
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
            fd = os.dup(self._file.fileno())  # stays valid if the segment rolls meanwhile
            target = self.last_offset
            generation = self._generation
            self._dirty = False
        try:
            fdatasync(fd)
        except OSError:
            with self._lock:
                self._dirty = True  # still unsynced: the next sync retries it
            raise
        finally:
            os.close(fd)
        with self._lock:
            if generation == self._generation and target > self._flushed:
                self._flushed = target
            self._cond.notify_all()

    def _run_flusher(self) -> None:
        interval_s = self._config.fsync_interval_ms / 1000
        backoff = Backoff()
        while True:
            with self._cond:
                if not (self._dirty or self._closing):
                    self._flusher_idle = True
                    try:
                        self._cond.wait_for(lambda: self._dirty or self._closing)
                    finally:
                        self._flusher_idle = False
                if self._closing or self._failure is not None or self._broken:
                    return
            try:
                self._sync_active(check=False)
            except OSError as exc:
                # transient (ENOSPC, EIO...): stay dirty, report, retry with backoff
                self.health.fault("change-log-sync", exc)
                delay_s = backoff.failed(time.monotonic())
            else:
                if backoff.failing:
                    backoff.reset()
                    self.health.clear("change-log-sync")
                delay_s = interval_s
            with self._cond:
                if self._cond.wait_for(lambda: self._closing, delay_s):
                    return


class _Mark(NamedTuple):
    """The log's shape before an append_many, to roll back to."""

    segments: int  # how many segments there were
    size: int  # the active segment's size
    segment_last: tuple[int, int]  # the active segment's last key
    index_len: int  # its index entries
    last: tuple[int, int] | None  # the log's last key


def _write_all(f: io.FileIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = f.write(view)
        if n is None:  # pragma: no cover - only non-blocking files
            raise BlockingIOError("write would block")
        view = view[n:]
