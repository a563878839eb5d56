"""Decoders of the compact encodings inside an RDB value (Redis 7.0.15's ``rdb.c``,
``listpack.c``, ``ziplist.c``, ``intset.c``, ``zipmap.c``).

Each takes the whole blob (one listpack, ziplist, intset or zipmap is a single RDB string,
at most a quicklist node or a small collection) and returns its elements; ``offset`` is the
blob's position in the RDB, so an error names the byte where the blob starts.

- LZF (``lzf_d.c``): control byte < 32 is a literal run of ctrl + 1 bytes; otherwise a back
  reference of length ``(ctrl >> 5) + 2`` (7 means one more length byte is added) at distance
  ``((ctrl & 0x1f) << 8) + next byte + 1``.
- listpack (``listpack.c``): ``<u32 total><u16 count>`` entries ``0xFF``; an entry is an
  encoding, its data and a 1-5 byte backlen.
- ziplist (``ziplist.c``): ``<u32 zlbytes><u32 zltail><u16 zllen>`` entries ``0xFF``; an entry is
  a prevlen (1 byte or ``0xFE`` + u32), an encoding and its data.
- intset (``intset.c``): ``<u32 width 2|4|8><u32 count>`` little-endian ints.
- zipmap (``zipmap.c``): ``<u8 count>`` then ``<len><key><len><u8 free><value><free bytes>``, ``0xFF``.

Integers come back as their decimal ASCII (``b"123"``), as Redis itself returns them.
"""

from __future__ import annotations

import struct
from typing import Final

from replicator.redis.errors import RdbError

__all__ = [
    "decode_intset",
    "decode_listpack",
    "decode_ziplist",
    "decode_zipmap",
    "lzf_decompress",
]

_U16: Final = struct.Struct("<H")
_I16: Final = struct.Struct("<h")
_U32: Final = struct.Struct("<I")
_I32: Final = struct.Struct("<i")
_I64: Final = struct.Struct("<q")
_BE_U32: Final = struct.Struct(">I")


def lzf_decompress(data: bytes, expected: int, offset: int = 0) -> bytes:
    """``lzf_decompress`` of ``lzf_d.c``; the result must be exactly ``expected`` bytes long.

    One Python step per LZF token, not per byte: literals and non-overlapping references are
    slice copies; an overlapping reference (distance < length) repeats its period.
    """
    out = bytearray()
    i = 0
    n = len(data)
    try:
        while i < n:
            ctrl = data[i]
            if ctrl < 32:
                j = i + 2 + ctrl
                out += data[i + 1 : j]
                i = j
                continue
            length = ctrl >> 5
            if length == 7:
                i += 1
                length += data[i]
            length += 2
            distance = ((ctrl & 0x1F) << 8) + data[i + 1] + 1
            i += 2
            start = len(out) - distance
            if start < 0:
                raise RdbError("LZF back reference before the start of the output", offset)
            if distance >= length:
                out += out[start : start + length]
            elif distance == 1:  # a run of one byte
                out += out[start:] * length
            else:
                out += (out[start:] * (length // distance + 1))[:length]
    except IndexError:
        raise RdbError("LZF data ends inside a back reference", offset) from None
    if i != n:
        raise RdbError("LZF literal runs past the compressed data", offset)
    if len(out) != expected:
        raise RdbError(f"LZF output is {len(out)} bytes, the header said {expected}", offset)
    return bytes(out)


def decode_intset(blob: bytes, offset: int = 0) -> list[bytes]:
    if len(blob) < 8:
        raise RdbError("intset shorter than its header", offset)
    width, count = struct.unpack_from("<II", blob, 0)
    fmt = {2: "h", 4: "i", 8: "q"}.get(width)
    if fmt is None:
        raise RdbError(f"intset with element width {width}", offset)
    if len(blob) != 8 + width * count:
        raise RdbError(f"intset of {count} x {width} bytes in a {len(blob)}-byte blob", offset)
    return [b"%d" % v for v in struct.unpack_from(f"<{count}{fmt}", blob, 8)]


def decode_listpack(blob: bytes, offset: int = 0) -> list[bytes]:
    """Every entry of one listpack, in order."""
    n = len(blob)
    if n < 7:
        raise RdbError("listpack shorter than its header", offset)
    total, count = struct.unpack_from("<IH", blob, 0)
    if total != n:
        raise RdbError(f"listpack header says {total} bytes, the blob has {n}", offset)
    out: list[bytes] = []
    append = out.append
    i = 6
    try:
        while True:
            b = blob[i]
            if b < 0x80:  # 7-bit uint
                append(b"%d" % b)
                i += 2
            elif b < 0xC0:  # 6-bit string
                ln = b & 0x3F
                j = i + 1 + ln
                append(blob[i + 1 : j])
                i = j + (1 if ln + 1 < 128 else 2)
            elif b < 0xE0:  # 13-bit int
                v = ((b & 0x1F) << 8) | blob[i + 1]
                append(b"%d" % (v - 8192 if v >= 4096 else v))
                i += 3
            elif b < 0xF0:  # 12-bit string
                ln = ((b & 0x0F) << 8) | blob[i + 1]
                j = i + 2 + ln
                append(blob[i + 2 : j])
                i = j + _backlen_size(ln + 2)
            elif b == 0xF0:
                ln = _U32.unpack_from(blob, i + 1)[0]
                j = i + 5 + ln
                if j > n:
                    raise IndexError
                append(blob[i + 5 : j])
                i = j + _backlen_size(ln + 5)
            elif b == 0xF1:
                append(b"%d" % _I16.unpack_from(blob, i + 1)[0])
                i += 4
            elif b == 0xF2:
                v = blob[i + 1] | blob[i + 2] << 8 | blob[i + 3] << 16
                append(b"%d" % (v - (1 << 24) if v >= 1 << 23 else v))
                i += 5
            elif b == 0xF3:
                append(b"%d" % _I32.unpack_from(blob, i + 1)[0])
                i += 6
            elif b == 0xF4:
                append(b"%d" % _I64.unpack_from(blob, i + 1)[0])
                i += 10
            elif b == 0xFF:
                break
            else:
                raise RdbError(f"listpack entry with encoding byte 0x{b:02x}", offset + i)
    except (IndexError, struct.error):
        raise RdbError("listpack entry runs past the end of its blob", offset) from None
    if i != n - 1:
        raise RdbError("listpack end marker before the end of its blob", offset + i)
    if count != 65535 and count != len(out):
        raise RdbError(f"listpack header counts {count} entries, found {len(out)}", offset)
    return out


def _backlen_size(entry_len: int) -> int:
    if entry_len < 128:
        return 1
    if entry_len < 16384:
        return 2
    if entry_len < 2097152:
        return 3
    if entry_len < 268435456:
        return 4
    return 5


def decode_ziplist(blob: bytes, offset: int = 0) -> list[bytes]:
    """Every entry of one ziplist, in order."""
    n = len(blob)
    if n < 11:
        raise RdbError("ziplist shorter than its header", offset)
    zlbytes, _tail, count = struct.unpack_from("<IIH", blob, 0)
    if zlbytes != n:
        raise RdbError(f"ziplist header says {zlbytes} bytes, the blob has {n}", offset)
    out: list[bytes] = []
    append = out.append
    i = 10
    try:
        while True:
            p = blob[i]
            if p == 0xFF:
                break
            i += 5 if p == 0xFE else 1
            b = blob[i]
            top = b >> 6
            if top == 0:
                ln = b & 0x3F
                append(blob[i + 1 : i + 1 + ln])
                i += 1 + ln
            elif top == 1:
                ln = ((b & 0x3F) << 8) | blob[i + 1]
                append(blob[i + 2 : i + 2 + ln])
                i += 2 + ln
            elif top == 2:
                ln = _BE_U32.unpack_from(blob, i + 1)[0]
                append(blob[i + 5 : i + 5 + ln])
                i += 5 + ln
            elif b == 0xC0:
                append(b"%d" % _I16.unpack_from(blob, i + 1)[0])
                i += 3
            elif b == 0xD0:
                append(b"%d" % _I32.unpack_from(blob, i + 1)[0])
                i += 5
            elif b == 0xE0:
                append(b"%d" % _I64.unpack_from(blob, i + 1)[0])
                i += 9
            elif b == 0xF0:
                v = blob[i + 1] | blob[i + 2] << 8 | blob[i + 3] << 16
                append(b"%d" % (v - (1 << 24) if v >= 1 << 23 else v))
                i += 4
            elif b == 0xFE:
                v = blob[i + 1]
                append(b"%d" % (v - 256 if v >= 128 else v))
                i += 2
            elif 0xF1 <= b <= 0xFD:
                append(b"%d" % ((b & 0x0F) - 1))
                i += 1
            else:
                raise RdbError(f"ziplist entry with encoding byte 0x{b:02x}", offset + i)
            if i > n:
                raise IndexError
    except (IndexError, struct.error):
        raise RdbError("ziplist entry runs past the end of its blob", offset) from None
    if i != n - 1:
        raise RdbError("ziplist end marker before the end of its blob", offset + i)
    if count != 65535 and count != len(out):
        raise RdbError(f"ziplist header counts {count} entries, found {len(out)}", offset)
    return out


def decode_zipmap(blob: bytes, offset: int = 0) -> list[bytes]:
    """Keys and values of one zipmap, alternating."""
    out: list[bytes] = []
    i = 1
    n = len(blob)
    try:
        while blob[i] != 0xFF:
            ln, i = _zipmap_len(blob, i)
            if i + ln > n:
                raise IndexError
            out.append(blob[i : i + ln])
            i += ln
            ln, i = _zipmap_len(blob, i)
            free = blob[i]
            i += 1
            if i + ln + free > n:
                raise IndexError
            out.append(blob[i : i + ln])
            i += ln + free
    except (IndexError, struct.error):
        raise RdbError("zipmap entry runs past the end of its blob", offset) from None
    if len(out) % 2:
        raise RdbError("zipmap with a key and no value", offset)
    return out


def _zipmap_len(blob: bytes, i: int) -> tuple[int, int]:
    b = blob[i]
    if b < 0xFE:
        return b, i + 1
    if b == 0xFE:
        return _U32.unpack_from(blob, i + 1)[0], i + 5
    raise RdbError("zipmap length byte 0xff inside an entry", i)
