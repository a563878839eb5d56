"""``DUMP`` payloads (the argument of ``RESTORE`` / ``RESTORE-ASKING``) decoded into the same
events as an RDB value (Redis 7.0's ``cluster.c``: ``createDumpPayload`` /
``verifyDumpPayload``)::

    <type byte> <value, as in an RDB> <u16 RDB version, LE> <u64 CRC64, LE, over all before>

A cluster resharding moves keys with ``RESTORE-ASKING``; a replica sees that command in the
stream, and this turns its payload into ``KeyBegin`` ... ``KeyEnd`` for ``key`` (db 0,
``expire_ms`` from the command if the caller passes it). The payload is parsed by the
RDB parser itself, wrapped in a minimal RDB; error offsets count from the payload's start.
"""

from __future__ import annotations

import struct

from replicator.redis.errors import RdbChecksumError, RdbError, RdbUnsupportedError
from replicator.redis.rdb.crc64 import crc64
from replicator.redis.rdb.events import Event, KeyBegin, KeyEnd
from replicator.redis.rdb.parser import MAX_VERSION, RdbParser

__all__ = ["parse_dump_payload"]


def _string(b: bytes) -> bytes:
    n = len(b)
    if n < 64:
        return bytes([n]) + b
    if n < 16384:
        return bytes([0x40 | n >> 8, n & 0xFF]) + b
    return b"\x80" + n.to_bytes(4, "big") + b


def parse_dump_payload(
    payload: bytes, key: bytes = b"", expire_ms: int | None = None
) -> list[Event]:
    """The events of one DUMP payload: ``KeyBegin``, the value's parts, ``KeyEnd``."""
    if len(payload) < 11:
        raise RdbError(f"DUMP payload of {len(payload)} bytes", 0)
    body, version, stored = payload[:-10], *struct.unpack("<HQ", payload[-10:])
    if version > MAX_VERSION:
        raise RdbUnsupportedError(f"DUMP payload of RDB version {version}", len(body))
    crc = crc64(0, payload[:-8])
    if stored != crc:
        raise RdbChecksumError(
            f"CRC64 {crc:016x} over the payload, it says {stored:016x}", len(body)
        )
    prefix = b"REDIS%04d" % max(version, 1) + b"\xfe\x00" + bytes([body[0]]) + _string(key)
    parser = RdbParser(verify_checksum=False)
    parser.feed(prefix + body[1:] + b"\xff" + bytes(8))
    try:
        events = parser.events()
        parser.close()
    except RdbError as err:
        shift = len(prefix) - 1
        offset = None if err.offset is None else max(err.offset - shift, 0)
        raise type(err)(str(err).rsplit(" (at byte", 1)[0], offset) from None
    begin = next(i for i, e in enumerate(events) if isinstance(e, KeyBegin))
    end = max(i for i, e in enumerate(events) if isinstance(e, KeyEnd))
    out = events[begin : end + 1]
    first = out[0]
    assert isinstance(first, KeyBegin)
    out[0] = KeyBegin(0, key, first.kind, first.rdb_type, expire_ms, None, None, 0)
    return out
