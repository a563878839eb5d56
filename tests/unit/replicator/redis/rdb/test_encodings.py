"""The compact encodings and the CRC, from hand-made bytes (research note §3.6)."""

from __future__ import annotations

import os
import struct

import pytest

from replicator.redis.errors import RdbError
from replicator.redis.rdb.crc64 import CHECK, POLY, crc64
from replicator.redis.rdb.encodings import (
    decode_intset,
    decode_listpack,
    decode_ziplist,
    decode_zipmap,
    lzf_decompress,
)
from tests.unit.replicator.redis.rdb import rdbgen

INTS = [
    0,
    1,
    12,
    13,
    127,
    128,
    -1,
    -128,
    -129,
    4095,
    -4096,
    4096,
    32767,
    -32768,
    32768,
    (1 << 23) - 1,
    -(1 << 23),
    1 << 23,
    (1 << 31) - 1,
    -(1 << 31),
    1 << 31,
    (1 << 63) - 1,
    -(1 << 63),
]
STRS = [b"", b"a", b"x" * 63, b"y" * 64, b"z" * 4095, b"w" * 4096, b"v" * 20000, bytes(range(256))]


def crc64_bitwise(crc: int, data: bytes) -> int:
    """Redis's crc64 one bit at a time (the definition, for cross-checking the package)."""
    reflected = int(f"{POLY:064b}"[::-1], 2)
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ reflected if crc & 1 else crc >> 1
    return crc


def test_crc64_check_value_and_chunking() -> None:
    """The package computes Redis's CRC-64: check value, the bitwise definition, any split."""
    assert crc64(0, b"123456789") == CHECK == crc64_bitwise(0, b"123456789")
    data = os.urandom(1000)
    whole = crc64(0, data)
    assert whole == crc64_bitwise(0, data)
    for cut in (0, 1, 7, 8, 9, 500, 999, 1000):
        assert crc64(crc64(0, data[:cut]), data[cut:]) == whole
        assert crc64(crc64(0, bytearray(data[:cut])), memoryview(data)[cut:]) == whole


def test_lzf_literals_and_references() -> None:
    # "abcabcabcab": literal "abc" then a reference of length 8 at distance 3 (overlapping)
    data = bytes([2]) + b"abc" + bytes([(6 << 5) | 0, 2])
    assert lzf_decompress(data, 11) == b"abcabcabcab"
    # a long reference: length 7 + 20 + 2 = 29 at distance 1
    data = bytes([0]) + b"q" + bytes([7 << 5, 20, 0])
    assert lzf_decompress(data, 30) == b"q" * 30
    # non-overlapping: "hello world " then "hello" at distance 12
    data = bytes([11]) + b"hello world " + bytes([(3 << 5), 11])
    assert lzf_decompress(data, 17) == b"hello world hello"
    with pytest.raises(RdbError, match="header said"):
        lzf_decompress(bytes([2]) + b"abc", 4)
    with pytest.raises(RdbError, match="before the start"):
        lzf_decompress(bytes([(1 << 5), 5]), 3)
    with pytest.raises(RdbError):
        lzf_decompress(bytes([5]) + b"ab", 6)
    with pytest.raises(RdbError):
        lzf_decompress(bytes([0, 0x41, 0x20]), 5)


def test_listpack_every_encoding() -> None:
    entries: list[bytes | int] = [*INTS, *STRS]
    want = [b"%d" % e if isinstance(e, int) else e for e in entries]
    assert decode_listpack(rdbgen.listpack(entries)) == want
    assert decode_listpack(rdbgen.listpack([])) == []


def test_ziplist_every_encoding() -> None:
    entries: list[bytes | int] = [*INTS, *STRS, b"after a long one"]
    want = [b"%d" % e if isinstance(e, int) else e for e in entries]
    assert decode_ziplist(rdbgen.ziplist(entries)) == want


def test_intset_widths_and_zipmap() -> None:
    assert decode_intset(rdbgen.intset([3, -2, 1], 2)) == [b"-2", b"1", b"3"]
    assert decode_intset(rdbgen.intset([1 << 20], 4)) == [b"1048576"]
    assert decode_intset(rdbgen.intset([-(1 << 40)], 8)) == [b"-1099511627776"]
    pairs = [(b"k", b"v"), (b"long" * 100, b"value" * 80)]
    assert decode_zipmap(rdbgen.zipmap(pairs)) == [x for p in pairs for x in p]


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        struct.pack("<IH", 100, 0) + b"\xff",  # total bytes wrong
        struct.pack("<IH", 8, 1) + b"\x85\xff",  # string past the end
        struct.pack("<IH", 9, 2) + b"\x01\x01\xff",  # count wrong
        struct.pack("<IH", 9, 1) + b"\xf5\x01\xff",  # encoding 0xf5
        struct.pack("<IH", 9, 1) + b"\x01\x01\x00",  # no end marker
    ],
)
def test_bad_listpacks(blob: bytes) -> None:
    with pytest.raises(RdbError):
        decode_listpack(blob, 100)


def test_bad_ziplist_intset_zipmap() -> None:
    good = rdbgen.ziplist([b"abc", 5])
    with pytest.raises(RdbError):
        decode_ziplist(good[:-1])
    with pytest.raises(RdbError):
        decode_ziplist(good[:-1] + b"\x00")
    with pytest.raises(RdbError, match="width 3"):
        decode_intset(struct.pack("<II", 3, 0))
    with pytest.raises(RdbError):
        decode_intset(rdbgen.intset([1, 2], 4)[:-1])
    with pytest.raises(RdbError):
        decode_zipmap(rdbgen.zipmap([(b"k", b"v")])[:-3])
