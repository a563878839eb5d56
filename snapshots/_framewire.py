"""The snapshot writer's loop over records: each record's frame (its ``Effect`` by hand, the
body's CRC32C) and content hash, a chunk of frames at a time. Compiled by mypyc
(scripts/mypyc_modules.txt; a snapshot of a million records runs it a million times); the
Python source is the reference, and :func:`snapshots._writer._record_chunks` drives it.

A record whose key and value are each 1 to 16383 bytes (a length of one or two varint bytes)
is framed here; any other (an empty key or value, a longer one, an offset or sub-index out
of range) goes to the caller's ``slow`` function, which encodes it with protobuf and raises
what ``encode_record`` raises. Both give the same bytes (tests compare them with protobuf's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any, Final

from snapshots._digest import pack_len
from snapshots._format import crc32c
from snapshots._recordstream import _BODY_PREFIX, _FRAME, _U32_MAX, _U64_MAX, MAX_BODY_BYTES


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: lengths framed here are below this (a varint of one or two bytes)
SMALL: Final = 1 << 14
#: protobuf's varint of every length below SMALL, and the content hash's u64le of it
VARINTS: Final = tuple(_varint(n) for n in range(SMALL))
LENS: Final = tuple(pack_len(n) for n in range(SMALL))

#: the content hasher's methods, called unbound (a call a record each: no bound method made)
_COPY: Final = hashlib.blake2b.copy
_UPDATE: Final = hashlib.blake2b.update
_DIGEST: Final = hashlib.blake2b.digest
_FROM_BYTES: Final = int.from_bytes

#: a type's state: [its Effect field 1 (encoded once), its hasher, the sum of its records'
#: hashes, their count]; ``new_type(type)`` makes one
TypeState = list[Any]


def frame_records(
    records: Iterator[Any],
    offset: int,
    sub: int,
    types: dict[str, TypeState],
    new_type: Callable[[str], TypeState],
    slow: Callable[[int, int, TypeState, str, Any, Any], bytes],
    chunk: list[bytes],
    limit: int,
) -> tuple[int, bool]:
    """Frame records taken from ``records`` (each ``(type, key, value)``), numbered from
    ``sub`` + 1, appending the frames' bytes to ``chunk`` and each record's hash to its type's
    state in ``types``, until ``chunk`` holds ``limit`` bytes or more: then (the last record's
    sub-index, True); or until ``records`` ends: (the last sub-index, False)."""
    varint = VARINTS
    lens = LENS
    pack_prefix = _BODY_PREFIX.pack
    pack_frame = _FRAME.pack
    append = chunk.append
    join = b"".join
    copy = _COPY
    update = _UPDATE
    digest = _DIGEST
    from_bytes = _FROM_BYTES
    inline = 0 <= offset <= _U64_MAX  # else encode_record (in `slow`) raises
    pending = 0
    for record in records:
        type_, key, value = record
        if not type_:
            raise ValueError(f"record {sub + 1} has an empty type")
        sub += 1
        state = types.get(type_)
        if state is None:
            state = types[type_] = new_type(type_)
        nk = len(key)
        nv = len(value)
        if 0 < nk < SMALL and 0 < nv < SMALL and inline and sub <= _U32_MAX:
            # Effect(type=type_, key=key, value=value).SerializeToString() by hand (fields in
            # number order), after the body's prefix; then the frame's length and CRC32C
            body = join(
                (
                    pack_prefix(offset, sub),
                    state[0],
                    b"\x12",
                    varint[nk],
                    key,
                    b"\x1a",
                    varint[nv],
                    value,
                )
            )
            n = len(body)
            if n > MAX_BODY_BYTES:  # (a type name of megabytes)
                frame = slow(offset, sub, state, type_, key, value)  # raises
                append(frame)
                pending += len(frame)
            else:
                append(pack_frame(n, crc32c(body, 0)))
                append(body)
                pending += n + 8
            h = copy(state[1])
            update(h, join((lens[nk], key, lens[nv], value)))
        else:
            frame = slow(offset, sub, state, type_, key, value)
            append(frame)
            pending += len(frame)
            h = copy(state[1])
            update(h, join((pack_len(nk), key, pack_len(nv), value)))
        state[2] += from_bytes(digest(h), "little")
        state[3] += 1
        if pending >= limit:
            return sub, True
    return sub, False
