"""The body of SEND_BATCH_MESSAGE (320), encoded and decoded here only.

RocketMQ 5's ``MessageDecoder.encodeMessages`` / ``decodeMessages`` (``SendMessageProcessor``), per
message, back to back::

    TOTALSIZE i32 | MAGIC i32 (0) | BODYCRC i32 (0) | FLAG i32 | BODYLEN i32 | BODY
    | PROPLEN i16 | PROPERTIES

Each item carries its own properties (UNIQ_KEY included). Sans I/O; errors are
``rmq.message``'s (:class:`~rmq.message.MalformedMessage` naming the byte where an item
starts).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from rmq.message import MAX_PROPERTIES, MalformedMessage, decode_properties, encode_properties
from rmq.properties import keep

__all__ = [
    "ITEM_OVERHEAD",
    "BatchItem",
    "decode_batch",
    "encode_batch",
    "encode_batch_raw",
    "fits_batch",
]

_HEAD = struct.Struct(">iiiii")
_PROPLEN = struct.Struct(">h")
ITEM_OVERHEAD: Final = _HEAD.size + _PROPLEN.size
"""A batch item's bytes beside its body and properties (its size: this + both lengths)."""


class BatchItem(NamedTuple):
    flag: int
    body: bytes
    properties: dict[str, str]


def fits_batch(props: bytes) -> bool:
    """Whether encoded properties can be a batch item's (their length is an int16 there)."""
    return len(props) <= MAX_PROPERTIES


def decode_batch(body: bytes) -> list[BatchItem]:
    """The messages of a batch body; :class:`MalformedMessage` naming the position when it
    does not parse, or when it holds no message. Each item's properties are
    :class:`~rmq.properties.KeptProperties`: a record stores their bytes as they came."""
    out = []
    pos = 0
    size = len(body)
    while pos < size:
        if pos + _HEAD.size > size:
            raise MalformedMessage(f"batch body: message at byte {pos} is cut inside its header")
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(body, pos)
        end = pos + total
        start = pos + _HEAD.size
        if total < ITEM_OVERHEAD or end > size or body_len < 0 or start + body_len + 2 > end:
            raise MalformedMessage(f"batch body: message at byte {pos} has inconsistent lengths")
        payload = body[start : start + body_len]
        (props_len,) = _PROPLEN.unpack_from(body, start + body_len)
        props_start = start + body_len + 2
        if props_len < 0 or props_start + props_len != end:
            raise MalformedMessage(f"batch body: message at byte {pos} has inconsistent lengths")
        raw = body[props_start:end]
        try:
            props = keep(decode_properties(raw), raw)  # a record stores them as they came
        except UnicodeDecodeError:
            raise MalformedMessage(
                f"batch body: properties of the message at byte {pos} are not UTF-8"
            ) from None
        out.append(BatchItem(flag, payload, props))
        pos = end
    if not out:
        raise MalformedMessage("batch body holds no message")
    return out


def encode_batch_raw(items: Iterable[tuple[int, bytes, bytes]]) -> bytes:
    """A batch body of (flag, body, encoded properties) items (each within
    :func:`fits_batch`)."""
    parts: list[bytes] = []
    head, plen = _HEAD.pack, _PROPLEN.pack
    for flag, body, props in items:
        parts += (
            head(ITEM_OVERHEAD + len(body) + len(props), 0, 0, flag, len(body)),
            body,
            plen(len(props)),
            props,
        )
    return b"".join(parts)


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    """The inverse of :func:`decode_batch`."""
    return encode_batch_raw((it.flag, it.body, encode_properties(it.properties)) for it in items)
