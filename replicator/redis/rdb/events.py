"""The events an RDB parse yields (slotted dataclasses, hashable like frozen ones and
read-only by convention: not ``frozen``, whose ``__init__`` costs 3.6x as much, 1.4 µs a key
for ``KeyBegin`` alone, a seventh of a parse), in the order of the file. The events of every
key write their ``__init__`` out (``init=False``): compiled (scripts/mypyc_modules.txt), that
one is native, where the one dataclasses generates stays Python (a compiled parse of 200k
mixed keys took 0.67 s with the generated ones, 0.56 s with these).

    Header(version)
    Aux(key, value)*            FunctionLib(code)*            ModuleAux(module, when)*
    SelectDb(db) ResizeDb(db_size, expires_size)
    KeyBegin(db, key, kind, ...)  <value events>  KeyEnd(key)      once per key
    Eof(checksum)

A value never comes whole: it comes as parts, so memory stays bounded however big it is.
How a value is cut is fixed by the RDB's bytes alone (never by how they were chunked on
the way in), so any chunking of the input gives the same events:

- string: ``StringPart`` pieces of at most 64 KiB (a compressed or int-encoded string is one);
- list: ``ListItems`` per quicklist node, or per batch of at most 512 elements / 1 MiB;
- set / zset / hash: ``SetMembers`` / ``ZSetMembers`` / ``HashFields`` batches the same way
  (a listpack, intset, ziplist or zipmap blob is one batch);
- stream: ``StreamEntries`` per listpack node, then one ``StreamMeta`` and one ``StreamGroup``
  per consumer group (a group and its PEL are held whole).

Elements themselves (one list element, one hash value) are held whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Aux",
    "Eof",
    "Event",
    "FunctionLib",
    "HashFields",
    "Header",
    "KeyBegin",
    "KeyEnd",
    "ListItems",
    "ModuleAux",
    "PendingEntry",
    "ResizeDb",
    "SelectDb",
    "SetMembers",
    "StreamConsumer",
    "StreamEntries",
    "StreamEntry",
    "StreamGroup",
    "StreamId",
    "StreamMeta",
    "StringPart",
    "ZSetMembers",
]

StreamId = tuple[int, int]
"""(milliseconds, sequence)."""


@dataclass(slots=True, unsafe_hash=True)
class Header:
    version: int


@dataclass(slots=True, unsafe_hash=True)
class Aux:
    key: bytes
    value: bytes


@dataclass(slots=True, unsafe_hash=True)
class FunctionLib:
    """One function library (``0xF5``): its source code, as ``FUNCTION LOAD`` takes it."""

    code: bytes


@dataclass(slots=True, unsafe_hash=True)
class ModuleAux:
    """A module's aux data (``0xF7``), skipped: its module name and when it was written."""

    module: str
    when: int


@dataclass(slots=True, unsafe_hash=True)
class SelectDb:
    db: int


@dataclass(slots=True, unsafe_hash=True)
class ResizeDb:
    db_size: int
    expires_size: int


@dataclass(slots=True, unsafe_hash=True, init=False)
class KeyBegin:
    db: int
    key: bytes
    kind: str
    """``string``, ``list``, ``set``, ``zset``, ``hash`` or ``stream``."""
    rdb_type: int
    """The RDB type byte (the encoding the value was saved in, e.g. 18 = quicklist 2)."""
    expire_ms: int | None
    """Absolute Unix time in milliseconds, or None: no expiry."""
    lru_idle: int | None
    """Seconds idle (``0xF8``), written under an LRU ``maxmemory-policy``."""
    lfu_freq: int | None
    """The LFU counter (``0xF9``), written under an LFU ``maxmemory-policy``."""
    offset: int
    """Byte position of the type byte in the RDB."""

    def __init__(
        self,
        db: int,
        key: bytes,
        kind: str,
        rdb_type: int,
        expire_ms: int | None,
        lru_idle: int | None,
        lfu_freq: int | None,
        offset: int,
    ) -> None:
        self.db = db
        self.key = key
        self.kind = kind
        self.rdb_type = rdb_type
        self.expire_ms = expire_ms
        self.lru_idle = lru_idle
        self.lfu_freq = lfu_freq
        self.offset = offset


@dataclass(slots=True, unsafe_hash=True, init=False)
class StringPart:
    data: bytes

    def __init__(self, data: bytes) -> None:
        self.data = data


@dataclass(slots=True, unsafe_hash=True, init=False)
class ListItems:
    items: list[bytes]

    def __init__(self, items: list[bytes]) -> None:
        self.items = items


@dataclass(slots=True, unsafe_hash=True, init=False)
class SetMembers:
    items: list[bytes]

    def __init__(self, items: list[bytes]) -> None:
        self.items = items


@dataclass(slots=True, unsafe_hash=True, init=False)
class ZSetMembers:
    items: list[tuple[bytes, float]]

    def __init__(self, items: list[tuple[bytes, float]]) -> None:
        self.items = items


@dataclass(slots=True, unsafe_hash=True, init=False)
class HashFields:
    items: list[tuple[bytes, bytes]]

    def __init__(self, items: list[tuple[bytes, bytes]]) -> None:
        self.items = items


@dataclass(slots=True, unsafe_hash=True, init=False)
class StreamEntry:
    id: StreamId
    fields: list[tuple[bytes, bytes]]

    def __init__(self, id: StreamId, fields: list[tuple[bytes, bytes]]) -> None:
        self.id = id
        self.fields = fields


@dataclass(slots=True, unsafe_hash=True, init=False)
class StreamEntries:
    entries: list[StreamEntry]

    def __init__(self, entries: list[StreamEntry]) -> None:
        self.entries = entries


@dataclass(slots=True, unsafe_hash=True)
class StreamMeta:
    length: int
    last_id: StreamId
    first_id: StreamId
    max_deleted_id: StreamId
    entries_added: int
    group_count: int


@dataclass(slots=True, unsafe_hash=True)
class PendingEntry:
    id: StreamId
    delivery_time_ms: int
    delivery_count: int


@dataclass(slots=True, unsafe_hash=True)
class StreamConsumer:
    name: bytes
    seen_time_ms: int
    active_time_ms: int | None
    """Only in RDB type 21 (Redis 7.2+)."""
    pending: list[StreamId]


@dataclass(slots=True, unsafe_hash=True)
class StreamGroup:
    name: bytes
    last_id: StreamId
    entries_read: int
    """-1 when Redis does not know it (a group created with no reads)."""
    pending: list[PendingEntry]
    consumers: list[StreamConsumer] = field(default_factory=list)


@dataclass(slots=True, unsafe_hash=True, init=False)
class KeyEnd:
    key: bytes

    def __init__(self, key: bytes) -> None:
        self.key = key


@dataclass(slots=True, unsafe_hash=True)
class Eof:
    checksum: int
    """The CRC64 trailer; 0 when the server wrote none (``rdbchecksum no``)."""


Event = (
    Header
    | Aux
    | FunctionLib
    | ModuleAux
    | SelectDb
    | ResizeDb
    | KeyBegin
    | StringPart
    | ListItems
    | SetMembers
    | ZSetMembers
    | HashFields
    | StreamEntries
    | StreamMeta
    | StreamGroup
    | KeyEnd
    | Eof
)
