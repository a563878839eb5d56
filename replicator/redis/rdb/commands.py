"""RDB events -> Redis commands that rebuild the same dataset in an empty server.

    replay = CommandReplay()
    for event in parser_events:
        for argv in replay.commands(event):      # list[bytes] each, bounded in size
            send(argv)

Equal ``DEBUG DIGEST`` is the contract (tests/integration/replicator/redis/test_rdb_real.py).
Each command holds at most 512 elements or ~1 MiB of arguments (one element more than that
goes alone), so a big value becomes several commands:

- string: ``SET`` then ``APPEND`` per 64 KiB part;  list: ``RPUSH``;  set: ``SADD``;
  sorted set: ``ZADD`` with ``repr`` of the double (shortest text that parses back to the
  same bits; ``inf``/``-inf`` as Redis spells them);  hash: ``HSET``;
- expiry: ``PEXPIREAT key ms`` after the value (a time in the past deletes the key, as
  loading the RDB into a master would);
- db: ``SELECT n`` at each SELECTDB;  functions: ``FUNCTION LOAD REPLACE code``;
- stream: ``XADD key <id> f v ...`` per entry (an empty stream: ``XGROUP CREATE ... MKSTREAM``
  then ``XGROUP DESTROY`` of that helper group), ``XSETID key last ENTRIESADDED n
  MAXDELETEDID id``, ``XGROUP CREATE key g last ENTRIESREAD n`` per group, then per consumer
  ``XGROUP CREATECONSUMER`` and ``XCLAIM key g consumer 0 id... TIME t RETRYCOUNT n FORCE
  JUSTID`` per (delivery time, count) of its pending entries.

What Redis gives no command for, and so is not reproduced: a key's LRU idle time and LFU
counter (kept in ``KeyBegin`` as metadata), a consumer's seen-time / active-time (set to the
replay's time), and PEL entries whose message was deleted from the stream (``XCLAIM`` ignores
ids that are not in the stream). ``DEBUG DIGEST`` covers none of these.
"""

from __future__ import annotations

import math
from typing import Final

from replicator.redis.rdb.events import (
    Event,
    FunctionLib,
    HashFields,
    KeyBegin,
    KeyEnd,
    ListItems,
    SelectDb,
    SetMembers,
    StreamEntries,
    StreamGroup,
    StreamId,
    StreamMeta,
    StringPart,
    ZSetMembers,
)

__all__ = ["MAX_COMMAND_BYTES", "MAX_COMMAND_ITEMS", "CommandReplay", "format_score", "stream_id"]

MAX_COMMAND_ITEMS: Final = 512
MAX_COMMAND_BYTES: Final = 1 << 20
_HELPER_GROUP: Final = b"__metaledger_rdb_replay__"

Argv = list[bytes]


def format_score(score: float) -> bytes:
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    return repr(score).encode()


def stream_id(sid: StreamId) -> bytes:
    return b"%d-%d" % sid


def _chunks(head: Argv, flat: list[list[bytes]]) -> list[Argv]:
    """``head`` + groups of arguments, cut into commands of bounded size."""
    out: list[Argv] = []
    argv = list(head)
    size = items = 0
    for group in flat:
        if items and (items >= MAX_COMMAND_ITEMS or size >= MAX_COMMAND_BYTES):
            out.append(argv)
            argv = list(head)
            size = items = 0
        argv.extend(group)
        size += sum(len(a) for a in group)
        items += 1
    if items:
        out.append(argv)
    return out


class CommandReplay:
    """Turns the events of one RDB, in order, into commands; keeps only the current key."""

    def __init__(self) -> None:
        self._key: KeyBegin | None = None
        self._string_started = False
        self._meta: StreamMeta | None = None
        self._stream_has_entries = False

    def commands(self, event: Event) -> list[Argv]:
        if isinstance(event, KeyBegin):
            self._key = event
            self._string_started = False
            self._meta = None
            self._stream_has_entries = False
            return []
        if isinstance(event, SelectDb):
            return [[b"SELECT", b"%d" % event.db]]
        if isinstance(event, FunctionLib):
            return [[b"FUNCTION", b"LOAD", b"REPLACE", event.code]]
        key = self._key
        if key is None:
            return []
        k = key.key
        if isinstance(event, StringPart):
            verb = b"APPEND" if self._string_started else b"SET"
            self._string_started = True
            return [[verb, k, event.data]]
        if isinstance(event, ListItems):
            return _chunks([b"RPUSH", k], [[x] for x in event.items])
        if isinstance(event, SetMembers):
            return _chunks([b"SADD", k], [[x] for x in event.items])
        if isinstance(event, ZSetMembers):
            return _chunks([b"ZADD", k], [[format_score(s), m] for m, s in event.items])
        if isinstance(event, HashFields):
            return _chunks([b"HSET", k], [[f, v] for f, v in event.items])
        if isinstance(event, StreamEntries):
            self._stream_has_entries = self._stream_has_entries or bool(event.entries)
            return [
                [b"XADD", k, stream_id(e.id), *[x for pair in e.fields for x in pair]]
                for e in event.entries
            ]
        if isinstance(event, StreamMeta):
            return self._stream_meta(k, event)
        if isinstance(event, StreamGroup):
            return self._stream_group(k, event)
        if isinstance(event, KeyEnd):
            self._key = None
            if key.expire_ms is not None:
                return [[b"PEXPIREAT", k, b"%d" % key.expire_ms]]
        return []

    def _stream_meta(self, k: bytes, meta: StreamMeta) -> list[Argv]:
        self._meta = meta
        out: list[Argv] = []
        if not self._stream_has_entries:
            out.append([b"XGROUP", b"CREATE", k, _HELPER_GROUP, b"0", b"MKSTREAM"])
            out.append([b"XGROUP", b"DESTROY", k, _HELPER_GROUP])
        out.append(
            [
                b"XSETID",
                k,
                stream_id(meta.last_id),
                b"ENTRIESADDED",
                b"%d" % meta.entries_added,
                b"MAXDELETEDID",
                stream_id(meta.max_deleted_id),
            ]
        )
        return out

    def _stream_group(self, k: bytes, group: StreamGroup) -> list[Argv]:
        create = [b"XGROUP", b"CREATE", k, group.name, stream_id(group.last_id)]
        if group.entries_read >= 0:
            create += [b"ENTRIESREAD", b"%d" % group.entries_read]
        out: list[Argv] = [create]
        pel = {p.id: p for p in group.pending}
        for consumer in group.consumers:
            out.append([b"XGROUP", b"CREATECONSUMER", k, group.name, consumer.name])
            by_delivery: dict[tuple[int, int], list[bytes]] = {}
            for sid in consumer.pending:
                entry = pel.get(sid)
                when = (entry.delivery_time_ms, entry.delivery_count) if entry else (0, 0)
                by_delivery.setdefault(when, []).append(stream_id(sid))
            for (time_ms, count), ids in by_delivery.items():
                head = [b"XCLAIM", k, group.name, consumer.name, b"0"]
                tail = [b"TIME", b"%d" % time_ms, b"RETRYCOUNT", b"%d" % count, b"FORCE", b"JUSTID"]
                for argv in _chunks(head, [[i] for i in ids]):
                    out.append(argv + tail)
        return out
