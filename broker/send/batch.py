"""Sans-I/O helpers of the send path: batch bodies, properties text, offset message ids.

Batch body (J5 ``MessageDecoder.java:663-731``, research/broker.md §3.1), per message::

    TOTALSIZE i32 | MAGIC i32 (0) | BODYCRC i32 (0) | FLAG i32 | BODYLEN i32 | BODY
    | PROPLEN i16 | PROPERTIES

The offset message id (§1): STOREHOST IP + port i32 + PHYSICALOFFSET i64, upper-case hex.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from dataclasses import dataclass

from rmq.codec import BadRequest

_HEAD = struct.Struct(">iiiii")
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"


@dataclass(frozen=True)
class BatchItem:
    flag: int
    body: bytes
    properties: dict[str, str]


def parse_properties(text: str) -> dict[str, str]:
    """``k \\x01 v \\x02`` repeated (RocketMQ's string2messageProperties)."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEP):
        key, sep, value = item.partition(NAME_VALUE_SEP)
        if sep and key:
            out[key] = value
    return out


def decode_batch(body: bytes) -> list[BatchItem]:
    """The messages of a batch body; BadRequest naming the position when it does not parse."""
    out = []
    pos = 0
    while pos < len(body):
        if pos + _HEAD.size > len(body):
            raise BadRequest(f"batch body: message at byte {pos} is cut inside its header")
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(body, pos)
        end = pos + total
        start = pos + _HEAD.size
        if total < _HEAD.size + 2 or end > len(body) or body_len < 0 or start + body_len + 2 > end:
            raise BadRequest(f"batch body: message at byte {pos} has inconsistent lengths")
        payload = body[start : start + body_len]
        (props_len,) = struct.unpack_from(">h", body, start + body_len)
        props_start = start + body_len + 2
        if props_len < 0 or props_start + props_len != end:
            raise BadRequest(f"batch body: message at byte {pos} has inconsistent lengths")
        try:
            props = parse_properties(body[props_start:end].decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRequest(
                f"batch body: properties of the message at byte {pos} are not UTF-8"
            ) from None
        out.append(BatchItem(flag, payload, props))
        pos = end
    if not out:
        raise BadRequest("batch body holds no message")
    return out


def offset_msg_id(ip: str, port: int, physical_offset: int) -> str:
    raw = _packed(ip) + struct.pack(">iq", port, physical_offset)
    return raw.hex().upper()


@functools.lru_cache(maxsize=256)
def _packed(ip: str) -> bytes:
    """The address's bytes (every answer names the broker's own address: parse it once)."""
    return ipaddress.ip_address(ip).packed


def encode_batch(items: list[BatchItem]) -> bytes:
    """The inverse of :func:`decode_batch` (for tests and the send CLI)."""
    parts = []
    for it in items:
        props = "".join(
            f"{k}{NAME_VALUE_SEP}{v}{PROPERTY_SEP}" for k, v in it.properties.items()
        ).encode()
        total = _HEAD.size + len(it.body) + 2 + len(props)
        parts.append(
            _HEAD.pack(total, 0, 0, it.flag, len(it.body))
            + it.body
            + struct.pack(">h", len(props))
            + props
        )
    return b"".join(parts)
