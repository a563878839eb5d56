"""RocketMQ's two message ids, made here only.

- The **offset message id** (RocketMQ 5's ``MessageDecoder.createMessageId``): the store host's IP
  (4 or 16 bytes), its port (int32) and the record's commit-log offset (int64), big-endian,
  as upper-case hex. A broker answers a send with it (``msgId``); a consumer falls back on
  it when a message has no UNIQ_KEY.
- The **client message id**, the property ``UNIQ_KEY`` (RocketMQ 5's ``MessageClientIDSetter``): 32
  hex digits a producer gives each message and keeps across resends, so consumers drop
  duplicates by it. Ours: process id (16 bits), 48 random bits, then a counter.

Sans I/O; imports nothing from the project.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import struct
from typing import Final, NamedTuple

__all__ = [
    "UNIQ_KEY",
    "OffsetMsgId",
    "offset_msg_id",
    "packed_ip",
    "parse_offset_msg_id",
    "uniq_key",
]

UNIQ_KEY: Final = "UNIQ_KEY"
"""The property holding the client message id (``MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX``)."""

_PORT_OFFSET: Final = struct.Struct(">iq")


@functools.lru_cache(maxsize=1024)
def packed_ip(ip: str) -> bytes:
    """The address's bytes (4 or 16), parsed once per address (a broker names its own
    address in every answer; a record names two hosts)."""
    return ipaddress.ip_address(ip).packed


def offset_msg_id(ip: str | bytes, port: int, commit_log_offset: int) -> str:
    """The offset message id of the record at ``commit_log_offset`` stored by ``ip:port``
    (``ip`` as text or already packed)."""
    raw = ip if isinstance(ip, bytes) else packed_ip(ip)
    return (raw + _PORT_OFFSET.pack(port, commit_log_offset)).hex().upper()


class OffsetMsgId(NamedTuple):
    """An offset message id's parts: the store host and the record's commit-log offset."""

    ip: str
    port: int
    offset: int


def parse_offset_msg_id(text: str) -> OffsetMsgId:
    """The parts of an offset message id (RocketMQ 5's ``MessageDecoder.decodeMessageId``:
    32 hex digits for an IPv4 store host, 56 for IPv6); ValueError saying why otherwise."""
    if len(text) not in (32, 56):
        raise ValueError(
            f"message id {text!r}: an offset message id has 32 or 56 hex digits, not {len(text)}"
        )
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"message id {text!r} is not hexadecimal") from None
    port, offset = _PORT_OFFSET.unpack(raw[-12:])
    if offset < 0 or port < 0:
        raise ValueError(f"message id {text!r}: negative port or offset")
    return OffsetMsgId(str(ipaddress.ip_address(raw[:-12])), port, offset)


_uniq = itertools.count()
_uniq_prefix = f"{os.getpid() & 0xFFFF:04X}{int.from_bytes(os.urandom(6), 'big'):012X}"


def uniq_key() -> str:
    """A new client message id: 32 hex digits like the Java client's ``MessageClientIDSetter``
    (process, random, then a counter); the caller keeps it across resends."""
    return f"{_uniq_prefix}{next(_uniq) & 0xFFFFFFFFFFFFFFFF:016X}"
