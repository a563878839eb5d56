"""Records are checked when they leave the store: a pull, a POP, a lookup by offset or key,
and the master's HA stream read what is on disk now, and a byte flipped or cut there while
the broker runs must not reach a consumer or a slave.

:class:`ReadGuard` is the check and the memory of damage. A record handed out is checked
for its place (inside the commit log; the consume queue's unit size equal to its TOTALSIZE),
its magic and its BODYCRC (RocketMQ's ``UtilAll.crc32``: java.util.zip.CRC32, zlib's, in
31 bits; :func:`rmq.message.verify_record`). The first mismatch is logged as an ERROR
naming the segment file and the byte in it, remembered (every later read raises it: a
damaged replica serves nothing more) and handed to ``on_damage``, which the broker process
wires to its exit (see ``docs/broker.md``). A mismatch found while the log was being cut
(a slave truncating to its master) is not damage: the bytes read are just gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.store.commitlog import CommitLog
from broker.store.errors import DamagedRecordError, StoreError
from rmq.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    PHYSICAL_OFFSET_AT,
    MalformedMessage,
    peek_total,
    verify_record,
)

log = logging.getLogger(__name__)

_BOUNDARIES_KEPT = 64  # HA chunk ends whose next record start is remembered


class ReadGuard:
    """Checks each record read for handing out; remembers the first damage found."""

    def __init__(self, commit_log: CommitLog, segment_size: int) -> None:
        self.log = commit_log
        self.segment_size = segment_size
        self.damaged: DamagedRecordError | None = None
        #: called once, with the first damage found (from whichever thread read it)
        self.on_damage: Callable[[DamagedRecordError], None] | None = None
        self._next_record: dict[int, int] = {}  # HA chunk end -> the next record's start

    def _found(self, error: DamagedRecordError, cuts: int) -> DamagedRecordError | StoreError:
        if self.log.cuts != cuts:  # cut while we read: the bytes are gone, not damaged
            return StoreError(f"the commit log was cut while reading: {error.reason}")
        if self.damaged is None:
            self.damaged = error
            log.error(
                "commit log damaged: %s: byte %d: %s; this replica stops serving reads and "
                "replicating",
                error.path,
                error.position,
                error.reason,
            )
            if self.on_damage is not None:
                self.on_damage(error)
        return error

    def check_healthy(self) -> None:
        if self.damaged is not None:
            raise self.damaged

    def record(self, offset: int, size: int) -> bytes:
        """The record at ``offset`` of ``size`` bytes, checked (DamagedRecordError if not)."""
        self.check_healthy()
        cuts = self.log.cuts
        try:
            return self.log.read_checked(offset, size)
        except DamagedRecordError as e:
            raise self._found(e, cuts) from None

    def record_at(self, offset: int) -> bytes:
        """The record starting at ``offset``, checked: the offset comes from a request (a
        message id, a transaction's or a resend's offset), so a position where no record
        starts (magic, PHYSICALOFFSET) is a plain StoreError; a record that starts there
        and does not check is damage."""
        self.check_healthy()
        cuts = self.log.cuts
        head = self.log.read_raw(offset, PHYSICAL_OFFSET_AT + 8)
        if len(head) < PHYSICAL_OFFSET_AT + 8:
            raise StoreError(f"no record at commit-log offset {offset}")
        total, magic = peek_total(head)
        physical = int.from_bytes(head[PHYSICAL_OFFSET_AT:], "big", signed=True)
        if magic not in (MAGIC_V1, MAGIC_V2) or physical != offset:
            raise StoreError(f"no record starts at commit-log offset {offset}")
        try:
            return self.log.read_checked(offset, total)
        except DamagedRecordError as e:
            raise self._found(e, cuts) from None

    def chunk(self, offset: int, data: bytes) -> None:
        """Check the records of raw commit-log bytes read for a slave (``data`` at
        ``offset``, within one segment): each whole record in it, and the one cut at its
        end read whole. The walk starts at ``offset`` when a record or a segment starts
        there, else where an earlier chunk's walk said the next record starts; a chunk
        starting inside a record nobody walked (a slave's first frame after it stopped in
        the middle of one) is checked from its first known record only."""
        self.check_healthy()
        cuts = self.log.cuts
        end = offset + len(data)
        p: int | None = offset if self._starts_record(data, offset) else None
        if p is None:
            p = self._next_record.get(offset)
        if p is None or p < offset:
            return
        if p >= end:  # the chunk lies inside a record already checked whole
            self._remember(end, p)
            return
        view = memoryview(data)
        seg_size = self.segment_size
        try:
            while p < end:
                seg_end = p - p % seg_size + seg_size
                if end - p >= 8:
                    total, magic = peek_total(view, p - offset)
                else:  # the header is cut: read it from the log
                    total, magic = peek_total(self.log.read_raw(p, 8).ljust(8, b"\0"))
                if magic == BLANK_MAGIC and total == seg_end - p:
                    p = seg_end
                    continue
                if magic not in (MAGIC_V1, MAGIC_V2) or not 8 < total <= seg_end - p:
                    path, at = self.log.locate(p)
                    raise DamagedRecordError(
                        path, at, f"TOTALSIZE {total} or magic {magic & 0xFFFFFFFF:#x}"
                    )
                if p + total <= end:
                    try:
                        verify_record(view, p - offset, total)
                    except MalformedMessage as e:
                        path, at = self.log.locate(p)
                        raise DamagedRecordError(path, at, str(e)) from None
                else:
                    self.log.read_checked(p, total)
                p += total
        except DamagedRecordError as e:
            raise self._found(e, cuts) from None
        self._remember(end, p)

    def _remember(self, chunk_end: int, next_start: int) -> None:
        if len(self._next_record) >= _BOUNDARIES_KEPT:
            self._next_record.clear()
        self._next_record[chunk_end] = next_start

    def _starts_record(self, data: bytes, offset: int) -> bool:
        if offset % self.segment_size == 0:
            return True
        if len(data) < PHYSICAL_OFFSET_AT + 8:
            return False
        total, magic = peek_total(data)
        if magic == BLANK_MAGIC:
            return total == self.segment_size - offset % self.segment_size
        if magic not in (MAGIC_V1, MAGIC_V2):
            return False
        return int.from_bytes(data[PHYSICAL_OFFSET_AT : PHYSICAL_OFFSET_AT + 8], "big") == offset
