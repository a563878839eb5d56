"""DUMP payloads (RESTORE's argument): value events, version and CRC checks, payload offsets."""

from __future__ import annotations

import struct

import pytest

from replicator.redis.errors import RdbChecksumError, RdbError, RdbUnsupportedError
from replicator.redis.rdb.crc64 import crc64
from replicator.redis.rdb.dump import parse_dump_payload
from replicator.redis.rdb.events import KeyBegin, KeyEnd, SetMembers
from tests.unit.replicator.redis.rdb.rdbgen import intset, string


def payload(body: bytes, version: int = 10) -> bytes:
    data = body + struct.pack("<H", version)
    return data + struct.pack("<Q", crc64(0, data))


def test_a_value_with_its_key_and_expiry() -> None:
    events = parse_dump_payload(payload(b"\x0b" + string(intset([2, 1], 2))), b"k", 99)
    assert events == [
        KeyBegin(0, b"k", "set", 11, 99, None, None, 0),
        SetMembers([b"1", b"2"]),
        KeyEnd(b"k"),
    ]


def test_refusals() -> None:
    with pytest.raises(RdbError, match="DUMP payload of 3 bytes"):
        parse_dump_payload(b"abc")
    with pytest.raises(RdbUnsupportedError, match="RDB version 11"):
        parse_dump_payload(payload(b"\x00" + string(b"v"), 11))
    broken = bytearray(payload(b"\x00" + string(b"v")))
    broken[-1] ^= 1
    with pytest.raises(RdbChecksumError):
        parse_dump_payload(bytes(broken))
    with pytest.raises(RdbError, match=r"string encoding 5 \(at byte 1\)"):
        parse_dump_payload(payload(b"\x00\xc5"))
    with pytest.raises(RdbUnsupportedError, match=r"value type 30 .*\(at byte 0\)"):
        parse_dump_payload(payload(b"\x1e" + string(b"v")))
