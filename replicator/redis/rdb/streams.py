"""The stream value reader: RDB types 15, 19 and 21 (``rdbLoadObject``, ``t_stream.c``).

    <len nodes> nodes x (<string 16-byte master id, big-endian ms,seq> <string listpack>)
    <len length> <len last_ms> <len last_seq>
    [19+] <len first_ms> <len first_seq> <len maxdel_ms> <len maxdel_seq> <len entries_added>
    <len groups> groups x (
        <string name> <len last_ms> <len last_seq> [19+] <len entries_read>
        <len pel> pel x (<16-byte id> <8-byte LE delivery ms> <len delivery count>)
        <len consumers> consumers x (<string name> <8-byte LE seen ms> [21+] <8-byte LE active ms>
                                     <len n> n x <16-byte id>))

Each node listpack starts with a master entry ``count, deleted, n, field1..fieldN, 0``; an
entry is ``flags, ms-diff, seq-diff``, then ``n, field, value...`` or, with SAMEFIELDS (2),
the master's fields' values only, then its lp-count. DELETED (1) entries are skipped.
An ``entries_read`` of UINT64_MAX means "unknown" and comes out as -1 (Redis 7.0's ``rdb.c``).
"""

from __future__ import annotations

import struct
from typing import Final

from replicator.redis.errors import RdbError
from replicator.redis.rdb import encodings
from replicator.redis.rdb.events import (
    Event,
    PendingEntry,
    StreamConsumer,
    StreamEntries,
    StreamEntry,
    StreamGroup,
    StreamId,
    StreamMeta,
)
from replicator.redis.rdb.values import Short, ValueReader, read_len, read_raw, read_string

_ID = struct.Struct(">QQ")
_MS = struct.Struct("<q")
_UINT64_MAX = (1 << 64) - 1


def decode_node(node_key: bytes, blob: bytes, offset: int) -> list[StreamEntry]:
    if len(node_key) != 16:
        raise RdbError(f"stream node key of {len(node_key)} bytes", offset)
    ms, seq = _ID.unpack(node_key)
    e = encodings.decode_listpack(blob, offset)
    if not e:
        raise RdbError("empty listpack inside a stream", offset)
    n_master = int(e[2])
    master = e[3 : 3 + n_master]
    i = 3 + n_master
    if i >= len(e) or e[i] != b"0":
        raise RdbError("stream master entry without its terminator", offset)
    i += 1
    out: list[StreamEntry] = []
    end = len(e)
    while i < end:
        flags = int(e[i])
        entry_id = (ms + int(e[i + 1]), seq + int(e[i + 2]))
        i += 3
        if flags & 2:
            fields = list(zip(master, e[i : i + n_master], strict=True))
            i += n_master
        else:
            nf = int(e[i])
            flat = e[i + 1 : i + 1 + 2 * nf]
            if len(flat) != 2 * nf:
                raise RdbError("stream entry runs past its listpack", offset)
            fields = list(zip(flat[0::2], flat[1::2], strict=True))
            i += 1 + 2 * nf
        i += 1  # lp-count
        if i > end:
            raise RdbError("stream entry runs past its listpack", offset)
        if not flags & 1:
            out.append(StreamEntry(entry_id, fields))
    return out


def _id_pair(buf: bytes, p: int, base: int) -> tuple[StreamId, int]:
    ms, p = read_len(buf, p, base)
    seq, p = read_len(buf, p, base)
    return (ms, seq), p


def _raw_id(buf: bytes, p: int) -> tuple[StreamId, int]:
    raw, p = read_raw(buf, p, 16)
    ms, seq = _ID.unpack(raw)
    return (ms, seq), p


def _ms(buf: bytes, p: int) -> tuple[int, int]:
    if p + 8 > len(buf):
        raise Short(p + 8)
    return _MS.unpack_from(buf, p)[0], p + 8


#: the RDB types of streams (RDB_TYPE_STREAM_LISTPACKS, _2 and _3)
STREAM_TYPES: Final = frozenset((15, 19, 21))


class StreamReader(ValueReader):
    kind = "stream"

    def __init__(self, rdb_type: int) -> None:
        self._type = rdb_type
        self._nodes: int | None = None
        self._groups: int | None = None

    def step(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        if self._nodes is None:
            self._nodes, p = read_len(buf, p, base)
            return p, None, False
        if self._nodes:
            start = p
            key, p = read_string(buf, p, base)
            blob, p = read_string(buf, p, base)
            entries = decode_node(key, blob, base + start)
            self._nodes -= 1
            return p, StreamEntries(entries) if entries else None, False
        if self._groups is None:
            return self._meta(buf, p, base)
        p, group = self._group(buf, p, base)
        self._groups -= 1
        return p, group, not self._groups

    def _meta(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        length, p = read_len(buf, p, base)
        last, p = _id_pair(buf, p, base)
        first, maxdel, added = (0, 0), (0, 0), length
        if self._type >= 19:
            first, p = _id_pair(buf, p, base)
            maxdel, p = _id_pair(buf, p, base)
            added, p = read_len(buf, p, base)
        groups, p = read_len(buf, p, base)
        self._groups = groups
        return p, StreamMeta(length, last, first, maxdel, added, groups), not groups

    def _group(self, buf: bytes, p: int, base: int) -> tuple[int, StreamGroup]:
        name, p = read_string(buf, p, base)
        last, p = _id_pair(buf, p, base)
        entries_read = -1
        if self._type >= 19:
            entries_read, p = read_len(buf, p, base)
            if entries_read == _UINT64_MAX:
                entries_read = -1
        n, p = read_len(buf, p, base)
        pel: list[PendingEntry] = []
        for _ in range(n):
            eid, p = _raw_id(buf, p)
            delivered, p = _ms(buf, p)
            count, p = read_len(buf, p, base)
            pel.append(PendingEntry(eid, delivered, count))
        n, p = read_len(buf, p, base)
        consumers: list[StreamConsumer] = []
        for _ in range(n):
            cname, p = read_string(buf, p, base)
            seen, p = _ms(buf, p)
            active = None
            if self._type >= 21:
                active, p = _ms(buf, p)
            k, p = read_len(buf, p, base)
            ids: list[StreamId] = []
            for _ in range(k):
                eid, p = _raw_id(buf, p)
                ids.append(eid)
            consumers.append(StreamConsumer(cname, seen, active, ids))
        return p, StreamGroup(name, last, entries_read, pel, consumers)
