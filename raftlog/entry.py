"""The replicated log's entries and their protobuf encoding (DESIGN.md §3).

An :class:`Entry` is RIP-18's ``(type, key, value)`` plus where it sits in the
log (``offset`` = Raft index, ``term``), when the proposer made it
(``timestamp_ms``) and who proposed it (``client_id``, ``seq``). One Raft log
item carries an :class:`EntryBatch`: the entries of one request, applied
atomically at one offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from protos import records_pb2


@dataclass(frozen=True, slots=True)
class Entry:
    type: str
    key: bytes = b""
    value: bytes = b""
    offset: int = 0
    term: int = 0
    timestamp_ms: int = 0
    client_id: str = ""
    seq: int = 0

    def at(self, offset: int, term: int) -> Entry:
        return replace(self, offset=offset, term=term)


@dataclass(frozen=True, slots=True)
class Effect:
    """One change-log record: a whole new value of ``(type, key)``, or its delete."""

    type: str
    key: bytes
    value: bytes = b""
    delete: bool = False

    def encode(self, term: int = 0, timestamp_ms: int = 0) -> bytes:
        msg = records_pb2.Effect(
            type=self.type,
            key=self.key,
            value=self.value,
            delete=self.delete,
            term=term,
            timestamp_ms=timestamp_ms,
        )
        data: bytes = msg.SerializeToString()
        return data

    @staticmethod
    def decode(payload: bytes) -> Effect:
        msg = records_pb2.Effect.FromString(payload)
        return Effect(type=msg.type, key=msg.key, value=msg.value, delete=msg.delete)


def encode_batch(entries: Sequence[Entry]) -> bytes:
    """Encode the entries of one request for proposal (offset and term are left 0)."""
    if not entries:
        raise ValueError("entries: a batch needs at least one entry")
    batch = records_pb2.EntryBatch()
    for e in entries:
        batch.entries.add(
            type=e.type,
            key=e.key,
            value=e.value,
            timestamp_ms=e.timestamp_ms,
            client_id=e.client_id,
            seq=e.seq,
        )
    data: bytes = batch.SerializeToString()
    return data


def decode_batch(data: bytes, offset: int, term: int) -> list[Entry]:
    """Decode a Raft log item into entries stamped with its offset and term.

    Raises ``google.protobuf.message.DecodeError`` on bytes that are not a batch.
    """
    batch = records_pb2.EntryBatch.FromString(data)
    return [
        Entry(
            type=m.type,
            key=m.key,
            value=m.value,
            offset=offset,
            term=term,
            timestamp_ms=m.timestamp_ms,
            client_id=m.client_id,
            seq=m.seq,
        )
        for m in batch.entries
    ]
