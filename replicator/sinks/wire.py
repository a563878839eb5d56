"""The sink's slots as the bytes of a send that are not the frame (which ``rmq.codec``
makes): a slot's properties and the batch body of SEND_BATCH_MESSAGE (``rmq.batch``).
"""

from __future__ import annotations

from typing import Final

from replicator.sinks.base import Slot
from rmq import batch
from rmq.message import properties_text

__all__ = [
    "WAIT_ONLY",
    "encode_batch",
    "props_bytes",
]

WAIT_ONLY: Final = properties_text({"WAIT": "true"})


def props_bytes(slot: Slot) -> bytes:
    """A slot's encoded properties (the sink stores them as bytes at submit)."""
    wire = slot.wire
    return wire if isinstance(wire, bytes) else str(wire).encode("utf-8")


def encode_batch(slots: list[Slot]) -> bytes:
    """The batch body of ``slots`` (``rmq.batch``), each with its own properties (UNIQ_KEY
    included)."""
    return batch.encode_batch_raw([(s.msg.flag, s.msg.body, props_bytes(s)) for s in slots])
