"""The bytes of a send that are not the frame (which ``rmq.codec`` makes): the
batch body of SEND_BATCH_MESSAGE and the client-side message id, UNIQ_KEY.
"""

from __future__ import annotations

import itertools
import os
import struct
from typing import Final

from replicator.sinks.base import Slot

__all__ = [
    "MAX_PROPS",
    "WAIT_ONLY",
    "encode_batch",
    "fits_batch",
    "item_size",
    "props_bytes",
    "uniq_key",
]

WAIT_ONLY: Final = "WAIT\x01true\x02"
BATCH_HEAD = struct.Struct(">iiiii")
_PROPLEN = struct.Struct(">h")
MAX_PROPS = 32767  # a batch item's properties length is an int16


def props_bytes(slot: Slot) -> bytes:
    """A slot's encoded properties (the sink stores them as bytes at submit)."""
    wire = slot.wire
    return wire if isinstance(wire, bytes) else str(wire).encode("utf-8")


def item_size(slot: Slot) -> int:
    """A slot's bytes in a batch body."""
    return BATCH_HEAD.size + len(slot.msg.body) + 2 + len(props_bytes(slot))


def fits_batch(slot: Slot) -> bool:
    """Whether a slot can be a batch item: its properties' length is an int16 there."""
    return len(props_bytes(slot)) <= MAX_PROPS


def encode_batch(slots: list[Slot]) -> bytes:
    """The store's batch encoding (J5 ``MessageDecoder.encodeMessages``; research/broker.md
    §3.1): ``TOTALSIZE | MAGIC 0 | BODYCRC 0 | FLAG | BODYLEN | BODY | PROPLEN i16 | PROPS``;
    each item carries its own properties (UNIQ_KEY included)."""
    parts: list[bytes] = []
    head, plen = BATCH_HEAD.pack, _PROPLEN.pack
    for slot in slots:
        props = props_bytes(slot)
        body = slot.msg.body
        parts += (
            head(BATCH_HEAD.size + len(body) + 2 + len(props), 0, 0, slot.msg.flag, len(body)),
            body,
            plen(len(props)),
            props,
        )
    return b"".join(parts)


_uniq = itertools.count()
_uniq_prefix = f"{os.getpid() & 0xFFFF:04X}{int.from_bytes(os.urandom(6), 'big'):012X}"


def uniq_key() -> str:
    """A client-side message id (the property UNIQ_KEY), 32 hex digits like the Java
    client's ``MessageClientIDSetter``: process, random, then a counter; kept across resends."""
    return f"{_uniq_prefix}{next(_uniq) & 0xFFFFFFFFFFFFFFFF:016X}"
