"""The POP books of one replica on disk: ``<data_dir>/pop/<group>/<topic>/<queueId>/``.

Each queue's directory holds ``bounds`` (``POP1``, low and next as int64, a CRC32: 24 bytes,
rewritten in place) and slot segments ``<first offset, 20 digits>.slots``, each
:data:`SEGMENT_SLOTS` slots of 12 bytes (:data:`broker.pop.state.SLOT`: visible_at_ms int64,
attempt uint16, flags uint16) at ``(offset - first) * 12``. Files are sparse and written
with ``pwrite`` (no mmap: a slot is one 12-byte write, a scan one ``pread`` per 768 KiB);
a segment whose offsets all fell below ``low`` is deleted. So an in-flight message costs
12 bytes on disk, and a queue at most one partly used segment more (768 KiB, sparse);
memory per queue is a book's few numbers, and open files are bounded by an LRU
(:data:`MAX_OPEN_FILES`).

Writes go to the page cache (like the commit log under ASYNC_FLUSH): a restart of the
process keeps every slot; :meth:`PopTable.flush` (called every second with the progress
flush, and at stop) fsyncs them, so a power loss loses at most the last second, which
then behaves as after a failover (redelivered, never lost). A torn or corrupt ``bounds``
(CRC) is rebuilt from the consumer offset (low) and the slots themselves.
"""

from __future__ import annotations

import collections
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from urllib.parse import quote, unquote

from broker.pop.state import SLOT, QueueBook

SEGMENT_SLOTS = 1 << 16
MAX_OPEN_FILES = 256
_BOUNDS = struct.Struct("<4sqqI")
_MAGIC = b"POP1"
_ZERO_SLOT = bytes(SLOT.size)
Key = tuple[str, str, int]  # group, topic, queue id


class _Files:
    """Open file descriptors, least recently used closed first."""

    def __init__(self, limit: int = MAX_OPEN_FILES) -> None:
        self.limit = limit
        self._fds: collections.OrderedDict[str, int] = collections.OrderedDict()

    def fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._fds[path] = fd
        while len(self._fds) > self.limit:
            _, old = self._fds.popitem(last=False)
            os.close(old)
        return fd

    def drop(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def sync(self) -> None:
        for fd in self._fds.values():
            os.fsync(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class FileSlots:
    """:class:`broker.pop.state.Slots` in one queue's directory."""

    def __init__(self, directory: str, files: _Files) -> None:
        self.dir = directory
        self.files = files
        os.makedirs(directory, exist_ok=True)
        self.bounds_path = os.path.join(directory, "bounds")
        self._segments = sorted(
            int(n[:-6]) for n in os.listdir(directory) if n.endswith(".slots") and n[:-6].isdigit()
        )

    def _path(self, first: int) -> str:
        return os.path.join(self.dir, f"{first:020d}.slots")

    def _fd(self, offset: int, create: bool) -> int | None:
        first = offset - offset % SEGMENT_SLOTS
        if first not in self._segments:
            if not create:
                return None
            self._segments.append(first)
            self._segments.sort()
        return self.files.fd(self._path(first))

    def read(self, offset: int) -> tuple[int, int]:
        fd = self._fd(offset, create=False)
        if fd is None:
            return 0, 0
        raw = os.pread(fd, SLOT.size, (offset % SEGMENT_SLOTS) * SLOT.size)
        if len(raw) < SLOT.size:
            return 0, 0
        vis, att, _flags = SLOT.unpack(raw)
        return vis, att

    def write(self, offset: int, visible_at_ms: int, attempt: int) -> None:
        fd = self._fd(offset, create=True)
        assert fd is not None
        os.pwrite(fd, SLOT.pack(visible_at_ms, attempt, 0), (offset % SEGMENT_SLOTS) * SLOT.size)

    def clear(self, lo: int, hi: int) -> None:
        for off, _vis, att in self.scan(lo, hi):
            if att:
                self.write(off, 0, 0)

    def scan(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        off = lo
        while off < hi:
            first = off - off % SEGMENT_SLOTS
            end = min(hi, first + SEGMENT_SLOTS)
            fd = self._fd(off, create=False)
            raw = b""
            if fd is not None:
                raw = os.pread(fd, (end - off) * SLOT.size, (off - first) * SLOT.size)
            have = len(raw) // SLOT.size
            for i, (vis, att, _flags) in enumerate(SLOT.iter_unpack(raw[: have * SLOT.size])):
                yield off + i, vis, att
            for i in range(have, end - off):  # past the file's end: never written
                yield off + i, 0, 0
            off = end

    def forget_below(self, offset: int) -> None:
        while self._segments and self._segments[0] + SEGMENT_SLOTS <= offset:
            path = self._path(self._segments.pop(0))
            self.files.drop(path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def save_bounds(self, low: int, next_offset: int) -> None:
        body = _BOUNDS.pack(_MAGIC, low, next_offset, 0)[:-4]
        os.pwrite(self.files.fd(self.bounds_path), body + struct.pack("<I", zlib.crc32(body)), 0)

    def load_bounds(self) -> tuple[int, int] | None:
        """(low, next) as last saved; None when missing or torn."""
        try:
            with open(self.bounds_path, "rb") as f:
                raw = f.read(_BOUNDS.size)
        except FileNotFoundError:
            return None
        if len(raw) < _BOUNDS.size:
            return None
        magic, low, nxt, crc = _BOUNDS.unpack(raw)
        if magic != _MAGIC or crc != zlib.crc32(raw[:-4]) or not 0 <= low <= nxt:
            return None
        return low, nxt

    def disk_bytes(self) -> int:
        """Bytes the slot files take on disk (allocated blocks: they are sparse)."""
        total = 0
        for first in self._segments:
            try:
                total += os.stat(self._path(first)).st_blocks * 512
            except FileNotFoundError:
                pass
        return total


def _name(part: str) -> str:
    return quote(part, safe="")


class PopTable:
    """Every book of one replica, opened on first use; ``init(key)`` gives the low of a
    queue with no book yet (its consumer offset, or where RocketMQ starts a new group)."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.files = _Files()
        self.books: dict[Key, QueueBook] = {}

    def _dir(self, key: Key) -> str:
        group, topic, queue_id = key
        return os.path.join(self.root, _name(group), _name(topic), str(queue_id))

    def get(self, key: Key) -> QueueBook | None:
        """The book of ``key`` if one is open or on disk."""
        book = self.books.get(key)
        if book is None and os.path.exists(os.path.join(self._dir(key), "bounds")):
            book = self.open(key, lambda: 0)
        return book

    def open(self, key: Key, init: Callable[[], int]) -> QueueBook:
        book = self.books.get(key)
        if book is not None:
            return book
        slots = FileSlots(self._dir(key), self.files)
        bounds = slots.load_bounds()
        if bounds is None:  # a new queue, or a torn bounds file: from the slots written
            low = init()
            nxt = low
            for first in slots._segments:
                for off, _vis, att in slots.scan(max(first, low), first + SEGMENT_SLOTS):
                    if att:
                        nxt = off + 1
            bounds = (low, nxt)
        book = QueueBook(slots, *bounds)
        self.books[key] = book
        return book

    def keys_on_disk(self) -> list[Key]:
        out = []
        for g in os.listdir(self.root):
            for t in os.listdir(os.path.join(self.root, g)):
                for q in os.listdir(os.path.join(self.root, g, t)):
                    if q.isdigit():
                        out.append((unquote(g), unquote(t), int(q)))
        return out

    def flush(self) -> None:
        self.files.sync()

    def close(self) -> None:
        self.files.close()
