"""Consume queues: per (topic, queue id), 20-byte units pointing into the commit log.

Unit = ``commitLogOffset i64 | size i32 | tagsCode i64`` (big-endian); the logical offset
of a message is its unit's byte position / 20. Files live in
``<root>/consumequeue/<topic>/<queueId>/`` named by the 20-digit byte position of their
first unit, each ``units_per_file * 20`` bytes at most. A consume queue is derived data:
after a crash it is cut to its last whole unit and the store re-dispatches the commit log
from the checkpoint (``broker.store.recovery``).
"""

from __future__ import annotations

import errno
import functools
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from broker.store.errors import ConsumeQueueBehindError
from broker.store.segments import fsync_dir, list_segments, makedirs_durable, segment_name

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str) -> int:
    """The tag hash kept in a unit: Java's ``String.hashCode`` of the tags, as RocketMQ stores
    it (``MessageExtBrokerInner.tagsString2tagsCode``) and as Java clients send their
    subscriptions' ``codeSet``; 0 for no tags."""
    h = 0
    data = tags.encode("utf-16-be")
    for i in range(0, len(data), 2):  # UTF-16 code units, as Java's char
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@dataclass(frozen=True)
class Unit:
    offset: int  # commit-log physical offset
    size: int
    tags_code: int


class ConsumeQueue:
    """One (topic, queue id)'s units; thread-safe."""

    def __init__(self, directory: str, units_per_file: int) -> None:
        self.directory = directory
        self.file_size = units_per_file * UNIT_SIZE
        self._lock = threading.Lock()
        self._files: list[tuple[int, str]] = list_segments(directory)
        self._fd: int | None = None
        self._end = 0  # byte position one past the last unit
        self._min = self._files[0][0] if self._files else 0
        if self._files:
            start, path = self._files[-1]
            size = os.path.getsize(path)
            whole = size - size % UNIT_SIZE
            if whole != size:
                with open(path, "r+b") as f:
                    f.truncate(whole)
            self._end = start + whole

    @property
    def max_offset(self) -> int:
        """The logical offset the next message gets."""
        return self._end // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self._min // UNIT_SIZE

    def last_unit(self) -> Unit | None:
        return self.get(self.max_offset - 1) if self.max_offset > self.min_offset else None

    def _active_fd(self) -> int:
        if self._files and self._end < self._files[-1][0] + self.file_size and self._fd is not None:
            return self._fd
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        if not self._files or self._end >= self._files[-1][0] + self.file_size:
            makedirs_durable(self.directory)
            path = os.path.join(self.directory, segment_name(self._end))
            self._files.append((self._end, path))
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fsync_dir(self.directory)
        else:
            self._fd = os.open(self._files[-1][1], os.O_RDWR)
        return self._fd

    def append(self, queue_offset: int, unit: Unit, may_start_later: bool = False) -> bool:
        """Put the unit at ``queue_offset``; False if it is already there (re-dispatch).

        ``may_start_later``: an empty queue may begin past offset 0 (a full re-dispatch from
        the commit log's minimum after retention deleted the queue's first messages).
        """
        with self._lock:
            if queue_offset < self.max_offset:
                return False
            if not self._files and may_start_later:
                self._end = self._min = queue_offset * UNIT_SIZE
            if queue_offset > self.max_offset:
                raise ConsumeQueueBehindError(
                    f"{self.directory}: queue offset {queue_offset} leaves a gap after {self.max_offset}"
                )
            fd = self._active_fd()
            os.pwrite(
                fd,
                UNIT.pack(unit.offset, unit.size, unit.tags_code),
                self._end - self._files[-1][0],
            )
            self._end += UNIT_SIZE
            return True

    def append_many(
        self,
        queue_offset: int,
        units: Sequence[tuple[int, int, int]],
        may_start_later: bool = False,
    ) -> None:
        """:meth:`append` of consecutive units, each (commit-log offset, size, tags code),
        from ``queue_offset``, with one write per file they land in (a batch of puts, a
        replicated frame). Units already there are skipped. A failed write is cut back from
        its file (the units of an earlier file stay) and its OSError propagates."""
        with self._lock:
            if not self._files and may_start_later:
                self._end = self._min = max(self._end, queue_offset * UNIT_SIZE)
            skip = self.max_offset - queue_offset
            if skip < 0:
                raise ConsumeQueueBehindError(
                    f"{self.directory}: queue offset {queue_offset} leaves a gap after "
                    f"{self.max_offset}"
                )
            i = skip
            while i < len(units):
                fd = self._active_fd()
                start = self._files[-1][0]
                room = (start + self.file_size - self._end) // UNIT_SIZE
                part = units[i : i + room]
                data = b"".join([UNIT.pack(*u) for u in part])
                at = self._end - start
                try:
                    if os.pwrite(fd, data, at) != len(data):
                        raise OSError(errno.ENOSPC, "short write")
                except OSError:
                    os.ftruncate(fd, at)
                    raise
                self._end += len(data)
                i += len(part)

    def get(self, queue_offset: int) -> Unit | None:
        units = self.get_range(queue_offset, 1)
        return units[0] if units else None

    def get_range(self, queue_offset: int, count: int) -> list[Unit]:
        """Up to ``count`` units from ``queue_offset`` within one file (callers loop)."""
        with self._lock:
            pos = queue_offset * UNIT_SIZE
            if pos < self._min or pos >= self._end:
                return []
            start, path = next((s, p) for s, p in reversed(self._files) if s <= pos)
            n = min(count * UNIT_SIZE, self._end - pos, start + self.file_size - pos)
            with open(path, "rb") as f:
                f.seek(pos - start)
                raw = f.read(n)
        return [
            Unit(*UNIT.unpack_from(raw, i)) for i in range(0, len(raw) - UNIT_SIZE + 1, UNIT_SIZE)
        ]

    def truncate_physical(self, end: int) -> None:
        """Drop units pointing at or past commit-log offset ``end`` (it was cut)."""
        while (last := self.last_unit()) is not None and last.offset + last.size > end:
            with self._lock:
                self._end -= UNIT_SIZE
                start, path = self._files[-1]
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                if self._end <= start and len(self._files) > 1:
                    os.unlink(path)
                    self._files.pop()
                else:
                    with open(path, "r+b") as f:
                        f.truncate(self._end - start)

    def delete_below(self, min_physical: int) -> None:
        """Remove whole files whose units all point below ``min_physical`` (never the last)."""
        with self._lock:
            removed = False
            while len(self._files) > 1:
                _start, path = self._files[0]
                with open(path, "rb") as f:
                    f.seek(self.file_size - UNIT_SIZE)
                    last = Unit(*UNIT.unpack(f.read(UNIT_SIZE)))
                if last.offset >= min_physical:
                    break
                os.unlink(path)
                self._files.pop(0)
                self._min = self._files[0][0]
                removed = True
            if removed:
                fsync_dir(self.directory)
        # within the first file, skip units whose message was deleted
        while (u := self.get(self.min_offset)) is not None and u.offset < min_physical:
            with self._lock:
                self._min += UNIT_SIZE

    def flush(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fdatasync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
