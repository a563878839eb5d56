"""The replicated log's entries and their encoding.

An :class:`Entry` is RIP-18's ``(type, key, value)`` plus where it sits in the
metadata log (``offset``, ``term``), when the proposer made it
(``timestamp_ms``) and who proposed it (``client_id``, ``seq``).

Time enters the log from the leader only: a leader appends what a follower forwarded with
its own clock added (:func:`stamp_item`), which then stands for every entry's
``timestamp_ms`` (a follower's clock may run slow or fast; the leader's deadlines are
counted against these stamps).

The entries of one client request form a *request* (``records.EntryBatch``),
applied atomically at one offset. Offsets number requests: 1, 2, 3, ... with
no gaps. Proposers group concurrent requests into one consensus item (group
commit), so the consensus engine's own index is not the offset: an item is
``u32 request count`` followed by a ``records.RaftItem``, and the apply thread
numbers its requests on from the last offset.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

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

    def encode(self, term: int = 0, timestamp_ms: int = 0, count: int = 0) -> bytes:
        """``count``: how many records the offset has, so that a reader can tell a complete
        last offset from one cut short by a crash between its records."""
        msg = records_pb2.Effect(
            type=self.type,
            key=self.key,
            value=self.value,
            delete=self.delete,
            term=term,
            timestamp_ms=timestamp_ms,
            count=count,
        )
        data: bytes = msg.SerializeToString()
        return data

    @staticmethod
    def decode(payload: bytes) -> Effect:
        msg = records_pb2.Effect.FromString(payload)
        return Effect(type=msg.type, key=msg.key, value=msg.value, delete=msg.delete)


def encode_batch(entries: Sequence[Entry]) -> bytes:
    """Encode the entries of one request for proposal (offset and term are left 0)."""
    return _encode(entries, None)


def encode_request(entries: Sequence[Entry], client_id: str, seq: int, timestamp_ms: int) -> bytes:
    """:func:`encode_batch` of ``entries`` stamped with the proposer's identity and clock,
    without copying each entry first (``dataclasses.replace`` cost the leader more than
    the encoding itself)."""
    return _encode(entries, (client_id, seq, timestamp_ms))


def _encode(entries: Sequence[Entry], stamp: tuple[str, int, int] | None) -> bytes:
    if not entries:
        raise ValueError("entries: a batch needs at least one entry")
    batch = records_pb2.EntryBatch()
    add = batch.entries.add
    for e in entries:
        client_id, seq, timestamp_ms = (
            stamp if stamp is not None else (e.client_id, e.seq, e.timestamp_ms)
        )
        add(
            type=e.type,
            key=e.key,
            value=e.value,
            timestamp_ms=timestamp_ms,
            client_id=client_id,
            seq=seq,
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


#: Effect's slot descriptors' setters, in field order (see put_effect)
_EFF_TYPE, _EFF_KEY, _EFF_VALUE, _EFF_DELETE = (
    getattr(Effect, f.name).__set__ for f in fields(Effect)
)
_NEW_EFFECT = Effect.__new__


def put_effect(type_: str, key: bytes, value: bytes) -> Effect:
    """``Effect(type_, key, value)`` (a put) at half the cost of its frozen ``__init__``
    (one per put, on every node's apply path; see :func:`_entry`)."""
    eff: Effect = _NEW_EFFECT(Effect)
    _EFF_TYPE(eff, type_)
    _EFF_KEY(eff, key)
    _EFF_VALUE(eff, value)
    _EFF_DELETE(eff, False)
    return eff


_COUNT = struct.Struct("<I")


#: Varints of 0..127: one byte each, prebuilt (tags and most lengths of the hot path).
_SMALL_VARINTS = tuple(bytes((i,)) for i in range(0x80))


def varint(n: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    if n < 0x80:
        return _SMALL_VARINTS[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_item(requests: Sequence[bytes]) -> bytes:
    """Frame encoded requests (``encode_batch`` results) as one consensus item.

    The body is a valid ``records.RaftItem`` (field 1, repeated EntryBatch), built by
    concatenation so that no request is encoded twice.
    """
    if not requests:
        raise ValueError("requests: an item needs at least one request")
    parts = [_COUNT.pack(len(requests))]
    for r in requests:
        parts += (b"\x0a", varint(len(r)), r)
    return b"".join(parts)


def length_delimited(field_number: int, data: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2): a message holding only the
    already-encoded sub-message ``data`` in field ``field_number``, byte for byte what
    protobuf would produce, without copying and re-encoding the sub-message."""
    return b"".join((varint(field_number << 3 | 2), varint(len(data)), data))


def item_count(data: bytes) -> int:
    """How many requests (offsets) a consensus item carries; 0 if it is not one of ours."""
    if len(data) < _COUNT.size:
        return 0
    return int(_COUNT.unpack_from(data)[0])


#: ``RaftItem.timestamp_ms``'s tag (field 2, varint)
_STAMP_TAG = b"\x10"


def stamp_item(data: bytes, timestamp_ms: int) -> bytes:
    """``data`` (an item a follower forwarded) with the leader's clock added: its
    ``RaftItem.timestamp_ms``, appended as one more field (a protobuf message may be
    extended by concatenation; a later value of a field wins), which :func:`decode_item`
    gives every entry of the item as its ``timestamp_ms``."""
    if timestamp_ms <= 0:
        return data
    return b"".join((data, _STAMP_TAG, varint(timestamp_ms)))


def decode_item(data: bytes, first_offset: int, term: int) -> list[list[Entry]]:
    """Decode a consensus item into its requests, numbered from ``first_offset``. An item
    the leader stamped (:func:`stamp_item`) gives all its entries the leader's time.

    Raises ``ValueError`` (or protobuf's ``DecodeError``) on bytes that are not an item.
    """
    count = item_count(data)
    item = records_pb2.RaftItem.FromString(data[_COUNT.size :])
    if len(item.requests) != count:
        raise ValueError(f"item announces {count} requests but holds {len(item.requests)}")
    stamp: int = item.timestamp_ms
    return [
        [
            _entry(
                m.type,
                m.key,
                m.value,
                first_offset + i,
                term,
                stamp or m.timestamp_ms,
                m.client_id,
                m.seq,
            )
            for m in req.entries
        ]
        for i, req in enumerate(item.requests)
    ]


#: Entry's slot descriptors' setters, in field order (see _entry).
_SET_TYPE, _SET_KEY, _SET_VALUE, _SET_OFFSET, _SET_TERM, _SET_TS, _SET_CLIENT, _SET_SEQ = (
    getattr(Entry, f.name).__set__ for f in fields(Entry)
)
_NEW = Entry.__new__  # object.__new__ for the Python class; the native one's when compiled


def _entry(
    type_: str,
    key: bytes,
    value: bytes,
    offset: int,
    term: int,
    timestamp_ms: int,
    client_id: str,
    seq: int,
) -> Entry:
    """``Entry(...)`` with every field given, at half the cost: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, this through the slot
    descriptors (every node decodes every entry on its apply thread)."""
    e: Entry = _NEW(Entry)
    _SET_TYPE(e, type_)
    _SET_KEY(e, key)
    _SET_VALUE(e, value)
    _SET_OFFSET(e, offset)
    _SET_TERM(e, term)
    _SET_TS(e, timestamp_ms)
    _SET_CLIENT(e, client_id)
    _SET_SEQ(e, seq)
    return e
