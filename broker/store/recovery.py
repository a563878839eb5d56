"""Crash recovery of the commit log, and the checkpoint it starts from.

The checkpoint (``<root>/checkpoint``, RocketMQ's layout: i64 physic @0, logics @8, index
@16) holds the commit-log offset known durable and the offset up to which the consume
queues were dispatched and flushed. Recovery scans from the start of the segment holding
the lower of the two, checking each record's magic, TOTALSIZE, PHYSICALOFFSET and body CRC,
and hands every good record to the caller for re-dispatch.

A bad record is a torn tail when no valid record follows it (in its file or any later
file): the log is cut there. A bad record with a valid record after it is corruption:
StoreCorruptionError names the file and the byte, and nothing is cut. A cut below the
checkpoint's durable offset would lose acknowledged messages and is corruption too.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from broker.store.commitlog import CommitLog, Segment
from broker.store.errors import StoreCorruptionError
from broker.store.segments import fsync_dir
from rmq.message import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, MalformedMessage, StoredMessage, decode

_CHECKPOINT = struct.Struct(">qqq")
_MAGIC_BYTES = (struct.pack(">i", MAGIC_V1), struct.pack(">i", MAGIC_V2))


@dataclass(frozen=True)
class Checkpoint:
    physic: int = 0
    logics: int = 0
    index: int = 0

    @classmethod
    def load(cls, path: str) -> Checkpoint:
        try:
            with open(path, "rb") as f:
                raw = f.read(_CHECKPOINT.size)
        except FileNotFoundError:
            return cls()
        if len(raw) < _CHECKPOINT.size:
            return cls()
        return cls(*_CHECKPOINT.unpack(raw))

    def save(self, path: str) -> None:
        """Write-then-rename, fsynced, so a crash leaves the old or the new checkpoint."""
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(_CHECKPOINT.pack(self.physic, self.logics, self.index))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path) or ".")


def _valid_at(buf: bytes | mmap.mmap, pos: int, physical: int) -> StoredMessage | None:
    """The record at ``pos`` if it is whole and good and sits at ``physical``."""
    if len(buf) - pos < 8:
        return None
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0 or pos + total > len(buf):
        return None
    try:
        m = decode(bytes(buf[pos : pos + total]))
    except MalformedMessage:
        return None
    return m if m.physical_offset == physical else None


def _valid_after(buf: bytes | mmap.mmap, pos: int, start: int) -> int | None:
    """Position of a valid record after ``pos`` in this file's bytes, if any."""
    for magic in _MAGIC_BYTES:
        i = buf.find(magic, pos + 1)
        while i != -1:
            cand = i - 4
            if cand > pos and _valid_at(buf, cand, start + cand) is not None:
                return cand
            i = buf.find(magic, i + 1)
    return None


def _map(path: str) -> bytes | mmap.mmap:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def recover(
    log: CommitLog, checkpoint: Checkpoint, on_record: Callable[[int, StoredMessage], None]
) -> int:
    """Check the log from the checkpoint, cut a torn tail, re-dispatch good records; the end offset."""
    segs = log.segments()
    if not segs:
        return 0
    from_offset = min(checkpoint.physic, checkpoint.logics)
    first = max((i for i, s in enumerate(segs) if s.start <= from_offset), default=0)
    for i in range(first, len(segs)):
        seg = segs[i]
        buf = _map(seg.path)
        pos = 0
        try:
            while pos < len(buf):
                phys = seg.start + pos
                if len(buf) - pos >= 8:
                    total, magic = struct.unpack_from(">ii", buf, pos)
                    if magic == BLANK_MAGIC and pos + total == len(buf) == log.segment_size:
                        pos = len(buf)
                        break
                m = _valid_at(buf, pos, phys)
                if m is None:
                    return _bad(log, segs, i, buf, pos, checkpoint)
                on_record(phys, m)
                pos += struct.unpack_from(">i", buf, pos)[0]
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
        if pos < log.segment_size and i + 1 < len(segs):
            # a file ends short of its size yet a later file exists: the later one must hold nothing
            return _bad(log, segs, i, b"", pos, checkpoint)
    return log.end_offset


def _bad(
    log: CommitLog,
    segs: list[Segment],
    i: int,
    buf: bytes | mmap.mmap,
    pos: int,
    checkpoint: Checkpoint,
) -> int:
    seg = segs[i]
    reason = "bad record (magic, size, physical offset or CRC)"
    if _valid_after(buf, pos, seg.start) is not None:
        raise StoreCorruptionError(seg.path, pos, reason + "; a valid record follows it")
    for later in segs[i + 1 :]:
        lbuf = _map(later.path)
        try:
            if _valid_at(lbuf, 0, later.start) is not None:
                raise StoreCorruptionError(
                    seg.path, pos, reason + f"; {later.path} holds valid records"
                )
        finally:
            if isinstance(lbuf, mmap.mmap):
                lbuf.close()
    end = seg.start + pos
    if end < checkpoint.physic:
        raise StoreCorruptionError(
            seg.path, pos, f"{reason}; durable data reached {checkpoint.physic}"
        )
    log.truncate(end)
    return end
