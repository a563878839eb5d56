"""Torn tail or corruption: the verdict on a bad frame of a stream appended in place.

A :class:`~snapshots._recordstream.RecordReader` reports the first bad frame of a stream
and only what it sees there (the data ends inside it, or it is complete and fails its
checks). For a stream appended in place, a change-log segment, :func:`tail_verdict` turns
that into a verdict with the rule of the Raft WAL (``raftlog.native.wal``, as etcd's WAL):

- a **torn tail**: no valid frame starts anywhere after the bad one, a run of zeros to the
  end included (space the file system extended but never filled). It is what a crash in
  the middle of a write leaves: a frame cut short, or (a power cut) a frame whose header
  reached the disk and whose data did not. Cutting at the bad frame drops only what was
  never synced.
- **corruption**: a valid frame starts after the bad one, so a byte changed in data that
  was synced (a flipped length field that makes its frame run past the end of the file
  included) and cutting there would drop synced records.

"Valid" means a length from 12 (offset and sub-index) to ``MAX_BODY_BYTES``, the whole
frame before the end of the data, a matching CRC32C and, when the caller gives the last
good key, a key ``(offset, sub)`` after it (records only go up, so a frame that was ever
synced after the bad one has such a key).

Cost. The search runs only once a reader has found a bad frame, never on a clean scan. It
looks at every position whose length field could be valid, found with ``bytes.find`` on
the length's high byte (runs of zeros are skipped whole), and CRCs the candidates in size
classes, shortest first, so the frame right after a corrupt one is found after about one
pass over what lies between them. Proving a torn tail costs a CRC of every candidate:
nothing for zeros or random bytes (64 MiB of zeros: 0.2 s), about 1 s for a 1 MiB tail of
small binary integers (each misaligned position is a candidate). It reads the rest of the
file into memory.

As for the WAL, a torn write whose pages reached the disk out of order (a zeroed page with
a whole frame of the same unsynced write after it) is reported as corruption: the safe
side, the member stops instead of guessing. So is a torn frame whose payload happens to
hold a whole valid frame with a key after the last good one.

A stream written whole and renamed into place (a snapshot) has no torn tail: its readers
treat every error as corruption and do not call this.
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Iterator
from typing import BinaryIO

from snapshots._crc import crc32c
from snapshots._recordstream import (
    HEADER_BYTES,
    MAX_BODY_BYTES,
    BadHeaderError,
    CorruptRecordError,
    RecordStreamError,
    TornTailError,
)

__all__ = ["find_valid_frame", "tail_verdict"]

_FRAME = struct.Struct("<II")  # length, crc32c(body): _recordstream's layout
_KEY = struct.Struct("<QI")  # offset, sub-index at the start of the body
_MIN_FRAME = _FRAME.size + _KEY.size
_NONZERO = re.compile(rb"[^\x00]")
#: Upper bounds of the frame lengths checked by each pass of the search, cheapest first.
_SIZE_CLASSES = (1 << 12, 1 << 16, 1 << 20, MAX_BODY_BYTES)

Source = BinaryIO | bytes | bytearray | memoryview


def find_valid_frame(
    source: Source,
    after: int,
    end: int | None = None,
    *,
    follows: tuple[int, int] | None = None,
) -> int | None:
    """Where a valid frame (module docstring) starting after byte `after` and ending by
    `end` (default: the end of `source`) is, or None when there is none: the first of the
    shortest size class that has one (almost always simply the first).

    `follows`: the last good key; a frame must have a greater ``(offset, sub)``. A file
    object's position is this function's from the call on.
    """
    data, base = _read_after(source, after + 1, end)
    i = _find(data, follows)
    return None if i < 0 else base + i


def tail_verdict(
    source: Source,
    error: RecordStreamError,
    *,
    end: int | None = None,
    follows: tuple[int, int] | None = None,
) -> RecordStreamError:
    """The verdict on the bad frame `error` reports, in a stream appended in place.

    Returns a :class:`TornTailError` at ``error.position`` (``repairable``: cut there) when
    no valid frame starts after it, else the corruption to raise: a CorruptRecordError (a
    BadHeaderError for the header) at the same position whose reason names the valid frame
    that follows. A header is a torn tail only when it is cut short or all zeros (a new
    file whose first write never reached the disk); any other bad header is corruption.
    `end` and `follows` as for :func:`find_valid_frame`.
    """
    position, path = error.position, error.path
    if isinstance(error, BadHeaderError) and not _zeroed_header(source):
        return error
    following = find_valid_frame(source, position, end, follows=follows)
    if following is None:
        reason = f"{error.reason}; no valid frame follows"
        return TornTailError(position, path, reason)
    if isinstance(error, BadHeaderError) or position == 0:
        return BadHeaderError(
            path, f"{error.reason}, and a valid frame follows at byte {following}"
        )
    what = error.reason
    if isinstance(error, TornTailError):
        what = _length_past_end(source, position, end) or what
    return CorruptRecordError(
        path, position, f"{what}, and a valid frame follows at byte {following}"
    )


def _read_after(source: Source, start: int, end: int | None) -> tuple[bytes, int]:
    """Bytes ``[start, end)`` of `source` (fewer if it is shorter) and `start`."""
    if isinstance(source, bytes | bytearray | memoryview):
        stop = len(source) if end is None else min(end, len(source))
        return bytes(source[start:stop]), start
    if end is None:
        end = source.seek(0, io.SEEK_END)
    source.seek(start)
    parts: list[bytes] = []
    want = max(0, end - start)
    while want > 0 and (chunk := source.read(want)):
        parts.append(chunk)
        want -= len(chunk)
    return b"".join(parts), start


def _zeroed_header(source: Source) -> bool:
    head, _ = _read_after(source, 0, HEADER_BYTES)
    return head.count(0) == len(head)


def _length_past_end(source: Source, position: int, end: int | None) -> str:
    """The reason 'length N runs past the end of the data'; "" if the field is cut short."""
    head, _ = _read_after(source, position, position + 4 if end is None else min(end, position + 4))
    if len(head) < 4:
        return ""
    (length,) = struct.unpack_from("<I", head)
    return f"length {length} runs past the end of the data"


def _find(data: bytes, follows: tuple[int, int] | None) -> int:
    """Index of a valid frame in `data` (the first one of the smallest size class that
    has one); -1 if none.

    Candidates are checked cheapest first: a pass over them CRCs only lengths in one size
    class, and the next pass runs only if a longer candidate was seen. A valid frame right
    after a bad one (corruption) is almost always in the first class, so the long
    candidates found in a payload of small binary numbers do not each cost a CRC of
    megabytes before it is found.
    """
    view = memoryview(data)
    low = 0
    for high in _SIZE_CLASSES:
        longer = False
        for p, length, crc in _candidates(data, follows):
            if length <= low:
                continue
            if length > high:
                longer = True
            elif crc32c(view[p + _FRAME.size : p + _FRAME.size + length]) == crc:
                return p
        if not longer:
            return -1
        low = high
    return -1


def _candidates(data: bytes, follows: tuple[int, int] | None) -> Iterator[tuple[int, int, int]]:
    """``(position, length, crc)`` of every place a valid frame could start in `data`, by
    all its checks but the CRC, in order."""
    n = len(data)
    last = n - _MIN_FRAME  # the last index a frame can start at
    if last < 0:
        return
    # A valid length is at most what is left and MAX_BODY_BYTES, so its high byte (the
    # 4th, little-endian) is at most `top` (0 unless 16 MiB or more are left).
    top = min(MAX_BODY_BYTES, n - _FRAME.size) >> 24
    needles = [bytes((v,)) for v in range(1, top + 1)]
    hits = [-2] * len(needles)  # next index of each needle at or after `i`; -1: none left
    find = data.find
    unpack_frame, unpack_key = _FRAME.unpack_from, _KEY.unpack_from
    i = 3  # the high byte of the length of a frame starting at i - 3
    while True:
        best = find(b"\x00", i)
        for k, needle in enumerate(needles):  # only with 16 MiB or more left
            hit = hits[k]
            if hit != -1 and hit < i:
                hit = hits[k] = find(needle, i)
            if hit >= 0 and (best < 0 or hit < best):
                best = hit
        if best < 0:
            return
        p = best - 3
        if p > last:
            return
        length, crc = unpack_frame(data, p)
        if length == 0:  # four zero bytes: no frame starts until a non-zero byte
            m = _NONZERO.search(data, best)
            if m is None:
                return
            i = m.start()
            continue
        i = best + 1
        body = p + _FRAME.size
        if length < _KEY.size or body + length > n or length > MAX_BODY_BYTES:
            continue
        if follows is not None and unpack_key(data, body) <= follows:
            continue
        yield p, length, crc
