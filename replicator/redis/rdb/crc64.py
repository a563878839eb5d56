"""Redis's CRC-64 (``src/crc64.c``): Jones polynomial, reflected in and out, init 0, no final XOR.

An RDB's trailer is this CRC of every byte from ``R`` of ``REDIS`` through the ``0xFF`` EOF
opcode, 8 bytes little-endian; 0 means the server ran with ``rdbchecksum no`` (research note
§3.6). Check value: ``crc64(0, b"123456789") == 0xE9C6D914C4B8D9CA``.

Pure Python, so the hot loop matters: 8 bytes per iteration through four 64 Ki-entry tables
indexed by 16 bits each ("slicing by 8" with 16-bit slices), the words read by
``memoryview.cast("Q")``; bytes that do not fill a word go through the byte table.
The tables (~10 MB of ints) are built on first use. That runs at ~10-15 MB/s, most of the
parse time of an RDB (bench/rdb_parse.py), so when the ``crcmod`` package is importable with
its C extension (Debian ``python3-crcmod``, or ``pip install crcmod``; not a declared
dependency) :func:`crc64` uses it instead (~500 MB/s, same function, same check value):
:data:`BACKEND` says which one runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Final

__all__ = ["BACKEND", "POLY", "crc64", "crc64_python"]

POLY: Final = 0x95AC9329AC4BC9B5
"""0xad93d23594c935a9 reflected (the form the reflected table algorithm uses)."""

_MASK: Final = 0xFFFFFFFFFFFFFFFF

_byte_tables: list[list[int]] = []
_word_tables: list[list[int]] = []


def _build() -> None:
    t0 = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ POLY if crc & 1 else crc >> 1
        t0.append(crc)
    tables = [t0]
    for _k in range(1, 8):
        prev = tables[-1]
        tables.append([(prev[i] >> 8) ^ t0[prev[i] & 0xFF] for i in range(256)])
    _byte_tables[:] = tables
    # the word loop xors 8 input bytes into the crc, then byte j (0 = lowest) of the result
    # still has 7 - j byte steps to go: table index 7 - j.
    words = []
    for pair in range(4):
        lo, hi = tables[7 - 2 * pair], tables[6 - 2 * pair]
        words.append([lo[i & 0xFF] ^ hi[i >> 8] for i in range(65536)])
    _word_tables[:] = words


def crc64_python(crc: int, data: bytes | bytearray | memoryview) -> int:
    """Continue ``crc`` over ``data`` (start with 0), in pure Python."""
    if not _byte_tables:
        _build()
    t0 = _byte_tables[0]
    view = memoryview(data).cast("B")
    n = len(view)
    nwords = (n // 8) if sys.byteorder == "little" else 0
    if nwords:
        w0, w1, w2, w3 = _word_tables
        for w in view[: nwords * 8].cast("Q"):
            crc ^= w
            crc = (
                w0[crc & 0xFFFF]
                ^ w1[(crc >> 16) & 0xFFFF]
                ^ w2[(crc >> 32) & 0xFFFF]
                ^ w3[crc >> 48]
            )
    for b in view[nwords * 8 :]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc & _MASK


def _crcmod() -> Callable[[int, bytes | bytearray | memoryview], int] | None:
    try:
        crcmod = importlib.import_module("crcmod")
        ext = importlib.import_module("crcmod.crcmod")
    except ImportError:
        return None
    if not getattr(ext, "_usingExtension", False):
        return None  # crcmod's own pure-Python fallback is slower than ours
    fn = crcmod.mkCrcFun(0x1AD93D23594C935A9, initCrc=0, rev=True, xorOut=0)
    if fn(b"123456789") != 0xE9C6D914C4B8D9CA:
        return None

    def update(crc: int, data: bytes | bytearray | memoryview) -> int:
        return int(fn(bytes(data), crc))

    return update


_fast = _crcmod()
crc64: Callable[[int, bytes | bytearray | memoryview], int] = _fast or crc64_python
"""Continue ``crc`` over ``data`` (start with 0)."""
BACKEND: Final = "crcmod" if _fast else "python"
