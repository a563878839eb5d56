"""One index file: a fixed-size hash table of message keys → commit-log offsets.

RocketMQ's ``IndexFile`` (store/src/main/java/org/apache/rocketmq/store/index/IndexFile.java):
a 40-byte header, ``slots`` hash slots of 4 bytes, then up to ``entries`` entries of 20 bytes,
all in one memory-mapped file of fixed size, so memory and disk are bounded and a lookup
reads one slot and the few entries chained from it::

    header   beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 | endPhyOffset i64
             | hashSlotCount i32 | indexCount i32
    slot     i32: the number of the newest entry whose key hashes here (0: none)
    entry    keyHash i32 | phyOffset i64 | timeDiff i32 (seconds after beginTimestamp)
             | prevIndex i32 (the slot's entry before this one; 0 ends the chain)

Entry 0 is never used (``indexCount`` starts at 1, IndexFile.java:116-174). The key hash is
CRC32 of the UTF-8 key (RocketMQ takes Java's ``String.hashCode``; nothing outside this
broker reads the files), so colliding keys share chains: a hit is only a candidate, and the
store checks the record it points at. ``endPhyOffset`` is how far the index has seen the
commit log (:meth:`IndexFile.cut` lowers it after a truncation). Sans I/O apart from the
mapping; not thread-safe (:class:`broker.store.index.IndexService` locks).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from typing import Final

HEADER: Final = struct.Struct(">qqqqii")
SLOT: Final = struct.Struct(">i")
ENTRY: Final = struct.Struct(">iqii")
INT32_MAX: Final = 0x7FFFFFFF
KEY_SEPARATOR: Final = " "  # MessageConst.KEY_SEPARATOR: between a message's KEYS
# bound once: :meth:`IndexFile.put` runs per indexed key on the send and replication paths
_SLOT_READ: Final = SLOT.unpack_from
_SLOT_WRITE: Final = SLOT.pack_into
_ENTRY_WRITE: Final = ENTRY.pack_into
_HEADER_SIZE: Final = HEADER.size
_SLOT_SIZE: Final = SLOT.size
_ENTRY_SIZE: Final = ENTRY.size


def key_hash(key: str) -> int:
    """The (non-negative) hash an index keeps for ``key`` (``topic#KEY``)."""
    return zlib.crc32(key.encode()) & INT32_MAX


def record_hashes(topic: str, keys: str, uniq_key: str) -> list[int]:
    """The hashes a record is indexed under: ``topic#UNIQ_KEY``, then ``topic#K`` for each
    of its space-separated KEYS (``MessageConst.KEY_SEPARATOR``), in that order."""
    out = [zlib.crc32(f"{topic}#{uniq_key}".encode()) & INT32_MAX] if uniq_key else []
    if keys:
        for k in keys.split(KEY_SEPARATOR):
            if k:
                out.append(zlib.crc32(f"{topic}#{k}".encode()) & INT32_MAX)
    return out


def file_size(slots: int, entries: int) -> int:
    return HEADER.size + slots * SLOT.size + entries * ENTRY.size


class IndexFile:
    """One mapped index file of ``slots`` hash slots and ``entries`` entries (created
    zero-filled and allocated when missing, OSError when the disk cannot hold it; an
    existing file of another size is ValueError)."""

    def __init__(self, path: str, slots: int, entries: int) -> None:
        self.path = path
        self.slots = slots
        self.entries = entries
        size = file_size(slots, entries)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            have = os.fstat(fd).st_size
            if have == 0:  # reserved now: a full disk fails here, not as SIGBUS on a write
                os.posix_fallocate(fd, 0, size)
            elif have != size:
                raise ValueError(f"{path}: {have} bytes, {size} expected for this configuration")
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        fields: tuple[int, ...] = HEADER.unpack_from(self._map, 0)
        self.begin_timestamp, self.end_timestamp = fields[0], fields[1]
        self.begin_phy_offset, self.end_phy_offset = fields[2], fields[3]
        self.slot_count, self.count = fields[4], fields[5]
        if self.count < 1:  # a new file: entry 0 stays unused
            self.count = 1
            self.end_phy_offset = -1
            self.write_header()

    @property
    def full(self) -> bool:
        return self.count >= self.entries

    def write_header(self) -> None:
        """Write the header fields into the file (:meth:`put` and :meth:`seen` leave that
        to the caller, once per batch)."""
        HEADER.pack_into(
            self._map,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.slot_count,
            self.count,
        )

    def put(self, hashes: list[int], phy_offset: int, store_timestamp: int) -> int:
        """Index one record under each of ``hashes``; how many fitted (fewer when full).
        The header is written by :meth:`write_header`."""
        m, slots, count = self._map, self.slots, self.count
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        diff = (store_timestamp - self.begin_timestamp) // 1000
        diff = 0 if diff < 0 else min(diff, INT32_MAX)
        entries_at = _HEADER_SIZE + slots * _SLOT_SIZE
        # no room (a damaged header's count past the entries counts as full): nothing
        n = max(0, min(len(hashes), self.entries - count))
        new_slots = 0
        for h in hashes if n == len(hashes) else hashes[:n]:
            slot_at = _HEADER_SIZE + (h % slots) * _SLOT_SIZE
            (prev,) = _SLOT_READ(m, slot_at)
            if prev <= 0 or prev >= count:  # empty, or garbage past the last entry
                prev = 0
                new_slots += 1
            _ENTRY_WRITE(m, entries_at + count * _ENTRY_SIZE, h, phy_offset, diff, prev)
            _SLOT_WRITE(m, slot_at, count)
            count += 1
        self.count = count
        self.slot_count += new_slots
        if n == 0:  # full: the record is not in this file, so its end does not move
            return 0
        if phy_offset > self.end_phy_offset:
            self.end_phy_offset = phy_offset
        if store_timestamp > self.end_timestamp:
            self.end_timestamp = store_timestamp
        return n

    def put_records(
        self, records: list[tuple[int, str, str, str, int]], start: int, rest: list[int]
    ) -> tuple[int, list[int]]:
        """Index ``records[start:]`` (each: commit-log offset, topic, KEYS, UNIQ_KEY, store
        time; in commit-log order) until done or this file is full; ``rest``, when not empty,
        the hashes of ``records[start]`` a full file left over (indexed here without the
        check that the record is new). A record at or below ``end_phy_offset`` is skipped;
        one without keys is only seen. Returns where to go on: (the first record not done,
        the hashes of it still to index; empty unless this file filled inside a record).
        The header is written by :meth:`write_header`."""
        n = len(records)
        i = start
        if rest:
            done = self.put(rest, records[i][0], records[i][4])
            if done < len(rest):
                return i, rest[done:]
            i += 1
        while i < n:
            phy_offset, topic, keys, uniq_key, store_timestamp = records[i]
            if phy_offset <= self.end_phy_offset:
                i += 1
                continue
            hashes = record_hashes(topic, keys, uniq_key)
            if not hashes:
                self.seen(phy_offset)
                i += 1
                continue
            done = self.put(hashes, phy_offset, store_timestamp)
            if done < len(hashes):
                return i, hashes[done:]
            i += 1
        return i, []

    def seen(self, phy_offset: int) -> None:
        """Records up to ``phy_offset`` were given to the index (none had keys); the
        header is written by :meth:`write_header`."""
        if phy_offset > self.end_phy_offset:
            self.end_phy_offset = phy_offset

    def cut(self, end: int) -> None:
        """The commit log was cut back to ``end``: records from there are indexed again
        (entries already pointing there stay; lookups check what they point at)."""
        if self.end_phy_offset >= end:
            self.end_phy_offset = end - 1
            self.write_header()

    def time_matched(self, begin: int, end: int) -> bool:
        """Whether this file may hold entries stored in [begin, end] (IndexFile.isTimeMatched)."""
        if self.count <= 1:
            return False
        return not (end < self.begin_timestamp or begin > self.end_timestamp)

    def lookup(self, h: int, begin: int, end: int, out: list[int], max_num: int) -> None:
        """Append to ``out`` the offsets of entries with hash ``h`` stored in [begin, end],
        newest first, until ``out`` holds ``max_num`` (IndexFile.selectPhyOffset)."""
        m = self._map
        (at,) = SLOT.unpack_from(m, HEADER.size + (h % self.slots) * SLOT.size)
        entries_at = HEADER.size + self.slots * SLOT.size
        steps = 0
        while 0 < at < self.count and len(out) < max_num and steps < self.count:
            hash_read, phy, diff, prev = ENTRY.unpack_from(m, entries_at + at * ENTRY.size)
            stored = self.begin_timestamp + diff * 1000
            # an entry's time is rounded down to the second: compare at that grain
            if hash_read == h and begin - 999 <= stored <= end:
                out.append(phy)
            if prev >= at or stored < begin - 999:  # chains go back in time
                break
            at = prev
            steps += 1

    def flush(self) -> None:
        self._map.flush()

    def close(self) -> None:
        self._map.close()
