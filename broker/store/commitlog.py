"""The commit log: every message of every topic, back to back, in fixed-size segment files.

Files live in ``<root>/commitlog/`` named by their 20-digit start offset. A record never
straddles two files: when a record plus an 8-byte blank header does not fit, the rest of
the file becomes a blank record (``i32 remaining | i32 0xCBD43194``, zero padding) and the
record starts the next file, as RocketMQ does. Reads return the stored bytes unchanged.

Durability: ``SYNC_FLUSH`` is a group commit: a caller of ``wait_durable(end)`` either
finds its bytes already synced, waits for the fdatasync in progress and then the next
one, or runs the fdatasync itself for everything written so far. ``ASYNC_FLUSH`` leaves
syncing to a background flusher (see ``broker.store.flush``).

Disk full: a write that meets ENOSPC is cut back to the file's previous length and
raises DiskFullError; earlier records are untouched and reads keep working.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.store.errors import DamagedRecordError, DiskFullError, StoreError
from broker.store.segments import fsync_dir, list_segments, makedirs_durable, segment_name
from rmq.message import BLANK_MAGIC, PHYSICAL_OFFSET_AT, MalformedMessage, verify_record

BLANK_HEADER = 8
_PHYSICAL = struct.Struct(">q")


@dataclass
class Segment:
    start: int
    path: str
    fd: int
    size: int  # bytes written (the whole segment size once closed by a blank)


class CommitLog:
    """Append-only log over segment files; thread-safe."""

    def __init__(self, directory: str, segment_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        makedirs_durable(directory)
        self._lock = threading.Lock()  # appends, rolls, deletes
        self._segments: list[Segment] = []
        for start, path in list_segments(directory):
            fd = os.open(path, os.O_RDWR)
            self._segments.append(Segment(start, path, fd, os.fstat(fd).st_size))
        # durability bookkeeping (group commit)
        self._sync_cond = threading.Condition()
        self._syncing = False
        self._durable = self.end_offset
        #: truncations so far: bytes read before one may not be the log's any more
        self.cuts = 0
        # seams for tests and fault injection
        self.pwrite: Callable[[int, bytes, int], int] = os.pwrite
        self.fdatasync: Callable[[int], None] = os.fdatasync

    # -- offsets --------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        """The offset one past the last written byte (the next record's physical offset)."""
        if not self._segments:
            return 0
        s = self._segments[-1]
        return s.start + s.size

    @property
    def min_offset(self) -> int:
        return self._segments[0].start if self._segments else 0

    @property
    def durable_offset(self) -> int:
        return self._durable

    def segments(self) -> list[Segment]:
        with self._lock:
            return list(self._segments)

    # -- writes ---------------------------------------------------------------
    def _write(self, seg: Segment, data: bytes) -> None:
        try:
            n = self.pwrite(seg.fd, data, seg.size)
            if n != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as e:
            os.ftruncate(seg.fd, seg.size)
            if e.errno == errno.ENOSPC:
                raise DiskFullError(f"{seg.path}: no space for {len(data)} bytes") from e
            raise StoreError(f"{seg.path}: write failed: {e}") from e
        seg.size += len(data)

    def _new_segment(self, start: int) -> Segment:
        path = os.path.join(self.directory, segment_name(start))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fsync_dir(self.directory)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise DiskFullError(f"{path}: no space for a new segment") from e
            raise StoreError(f"{path}: cannot create a segment: {e}") from e
        seg = Segment(start, path, fd, 0)
        self._segments.append(seg)
        return seg

    def _roll(self, seg: Segment) -> Segment:
        if seg.size < self.segment_size:  # not closed yet (a failed roll may have closed it)
            remaining = self.segment_size - seg.size
            self._write(seg, struct.pack(">ii", remaining, BLANK_MAGIC))
            os.ftruncate(seg.fd, self.segment_size)  # zero padding: the file has its fixed size
            seg.size = self.segment_size
            self.fdatasync(seg.fd)  # a closed file is durable before any byte of the next
        return self._new_segment(seg.start + self.segment_size)

    def append(self, encode_at: Callable[[int], bytes]) -> tuple[int, int]:
        """Encode a record at the next physical offset and write it; (offset, size)."""
        with self._lock:
            seg = self._segments[-1] if self._segments else self._new_segment(0)
            data = encode_at(seg.start + seg.size)
            if len(data) + BLANK_HEADER > self.segment_size:
                raise StoreError(
                    f"record of {len(data)} bytes cannot fit a {self.segment_size}-byte segment"
                )
            if seg.size + len(data) + BLANK_HEADER > self.segment_size:
                seg = self._roll(seg)
                data = encode_at(seg.start)
            offset = seg.start + seg.size
            self._write(seg, data)
            return offset, len(data)

    def fits(self, size: int) -> bool:
        """Whether a record of ``size`` bytes fits a segment at all."""
        return size + BLANK_HEADER <= self.segment_size

    def append_batch(
        self, records: Sequence[bytes], encoded_at: int, moved: Callable[[bytes, int], bytes]
    ) -> tuple[list[tuple[int, int]], StoreError | None]:
        """``append`` of several records in order, one write per segment they land in.

        The records were encoded to lie back to back from ``encoded_at``; one that lands
        elsewhere (a segment rolled before it) is written as ``moved(record, offset)``.
        Returns the (offset, size) of the records written, and the error that stopped the
        rest (None when all were written): the records of a write that failed are not in
        the log (``_write`` cuts the file back), those of an earlier segment stay.
        """
        placed: list[tuple[int, int]] = []
        with self._lock:
            seg = self._segments[-1] if self._segments else None
            chunk: list[bytes] = []
            pending: list[tuple[int, int]] = []
            try:
                if seg is None:
                    seg = self._new_segment(0)
                pos = seg.size
                expect = encoded_at
                for record in records:
                    at, size = seg.start + pos, len(record)
                    data = record if at == expect else moved(record, at)
                    expect += size
                    if not self.fits(size):
                        raise StoreError(
                            f"record of {size} bytes cannot fit a {self.segment_size}-byte segment"
                        )
                    if pos + size + BLANK_HEADER > self.segment_size:
                        if chunk:
                            self._write(seg, b"".join(chunk))
                            placed += pending
                            chunk, pending = [], []
                        seg = self._roll(seg)
                        pos = seg.size
                        data = moved(record, seg.start + pos)
                    chunk.append(data)
                    pending.append((seg.start + pos, size))
                    pos += size
                if chunk:
                    self._write(seg, chunk[0] if len(chunk) == 1 else b"".join(chunk))
                    placed += pending
            except StoreError as e:
                return placed, e
        return placed, None

    def append_raw(self, offset: int, data: bytes) -> int:
        """Write replicated bytes at ``offset`` (== the end); the new end.

        The bytes may split records but never cross a segment end; a full last segment
        makes the next one start at ``offset``. A log holding no bytes may start at any
        segment-aligned offset (a slave copying a master whose oldest files are gone).
        """
        with self._lock:
            if not data:
                return self.end_offset
            empty = self.end_offset == self.min_offset
            if offset != self.end_offset and empty and offset % self.segment_size == 0:
                while self._segments:  # empty files only: drop them and start at ``offset``
                    seg = self._segments.pop()
                    os.close(seg.fd)
                    os.unlink(seg.path)
            if offset != self.end_offset and self._segments:
                raise StoreError(
                    f"replicated bytes at {offset}, but the log ends at {self.end_offset}"
                )
            seg = self._segments[-1] if self._segments else self._new_segment(offset)
            if seg.size == self.segment_size:
                seg = self._new_segment(seg.start + self.segment_size)
            if seg.size + len(data) > self.segment_size:
                raise StoreError(
                    f"replicated bytes at {offset} ({len(data)}) cross the segment end "
                    f"{seg.start + self.segment_size}"
                )
            self._write(seg, data)
            return self.end_offset

    # -- durability -----------------------------------------------------------
    def flush(self) -> int:
        """fdatasync everything written so far (one at a time; callers share it)."""
        with self._lock:
            target = self.end_offset
            fd = self._segments[-1].fd if self._segments else -1
        if fd >= 0 and target > self._durable:
            self.fdatasync(fd)
        with self._sync_cond:
            self._durable = max(self._durable, target)
        return target

    def wait_durable(self, end: int) -> None:
        """Return once the bytes before ``end`` are durable (group commit)."""
        with self._sync_cond:
            while self._durable < end:
                if self._syncing:
                    self._sync_cond.wait()
                    continue
                self._syncing = True
                self._sync_cond.release()
                try:
                    self.flush()
                finally:
                    self._sync_cond.acquire()
                    self._syncing = False
                    self._sync_cond.notify_all()

    # -- reads ----------------------------------------------------------------
    def _segment_for(self, offset: int) -> Segment:
        for seg in reversed(self._segments):
            if seg.start <= offset:
                return seg
        raise StoreError(f"offset {offset} is below the commit log's minimum {self.min_offset}")

    def read(self, offset: int, size: int) -> bytes:
        """The stored bytes at ``offset`` (one record, as the consume queue gives its size)."""
        with self._lock:
            seg = self._segment_for(offset)
            fd = seg.fd
        return os.pread(fd, size, offset - seg.start)

    def read_checked(self, offset: int, size: int) -> bytes:
        """The record at ``offset`` of ``size`` bytes (as a consume-queue unit or an index
        says), checked before it is handed out: inside the log, TOTALSIZE ``size``, magic,
        BODYCRC. DamagedRecordError names the segment file and the byte in it."""
        with self._lock:
            seg = self._segment_for(offset)
            fd, path, seg_end = seg.fd, seg.path, seg.start + seg.size
        if size <= 0 or offset + size > seg_end:
            raise DamagedRecordError(
                path, offset - seg.start, f"{size} bytes at offset {offset} run past {seg_end}"
            )
        data = os.pread(fd, size, offset - seg.start)
        try:
            verify_record(data, 0, size)
        except MalformedMessage as e:
            raise DamagedRecordError(path, offset - seg.start, str(e)) from None
        (physical,) = _PHYSICAL.unpack_from(data, PHYSICAL_OFFSET_AT)
        if physical != offset:
            raise DamagedRecordError(
                path, offset - seg.start, f"PHYSICALOFFSET says {physical}, read at {offset}"
            )
        return data

    def locate(self, offset: int) -> tuple[str, int]:
        """(segment file, byte in it) of commit-log ``offset``, for messages."""
        with self._lock:
            seg = self._segment_for(offset)
        return seg.path, offset - seg.start

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` stored bytes from ``offset``, within the segment holding it
        (a closed segment's blank record and padding included); b"" at the end."""
        with self._lock:
            end = self.end_offset
            if offset < self.min_offset or offset > end:
                raise StoreError(
                    f"offset {offset} is outside the commit log [{self.min_offset}, {end}]"
                )
            if offset == end:
                return b""
            seg = self._segment_for(offset)
            n = min(max_bytes, seg.start + seg.size - offset)
            fd = seg.fd
        return os.pread(fd, n, offset - seg.start) if n > 0 else b""

    def read_record(self, offset: int) -> bytes:
        """The record starting at ``offset`` (its TOTALSIZE read first)."""
        total, _ = struct.unpack(">ii", self.read(offset, 8))
        return self.read(offset, total)

    # -- recovery and retention hooks -------------------------------------------
    def truncate(self, end: int) -> None:
        """Cut everything at and after ``end`` (recovery's torn tail)."""
        with self._lock:
            self.cuts += 1
            while self._segments and self._segments[-1].start > end:
                seg = self._segments.pop()
                os.close(seg.fd)
                os.unlink(seg.path)
            if self._segments:
                seg = self._segments[-1]
                seg.size = end - seg.start
                os.ftruncate(seg.fd, seg.size)
                os.fsync(seg.fd)
            fsync_dir(self.directory)
            self._durable = min(self._durable, self.end_offset)

    def delete_segment(self, seg: Segment) -> None:
        """Remove one closed segment (never the active one)."""
        with self._lock:
            if seg is self._segments[-1]:
                raise StoreError("the active segment is never deleted")
            self._segments.remove(seg)
            os.close(seg.fd)
            os.unlink(seg.path)
            fsync_dir(self.directory)

    def close(self) -> None:
        with self._lock:
            for seg in self._segments:
                os.close(seg.fd)
            self._segments = []
