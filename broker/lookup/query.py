"""Reading what the index points at: the record at a commit-log offset, a query's records.

Both read the store through its public parts (``log``, ``config``, ``index``) and trust no
offset: an offset message id can name any number, an index entry can be a hash collision's
or point past a truncation. A record is served only when a whole, well-formed record starts
exactly there (magic, TOTALSIZE inside the log, the layout, PHYSICALOFFSET equal to the
offset) and, for a query, when its topic is the asked one and it holds the key: in its KEYS
or as its UNIQ_KEY, or only as its UNIQ_KEY for a unique-key query (RocketMQ's broker leaves
that check to the client, ``MQAdminImpl.queryMessage``; ours answers only matching records).
Under SYNC_FLUSH only durable bytes are read, as pulls do.
"""

from __future__ import annotations

import struct

from broker.store import DamagedRecordError, FlushMode, MessageStore, StoreError
from broker.store.index import IndexHits
from broker.store.index_file import KEY_SEPARATOR
from rmq.message import (
    MAGIC_V1,
    MAGIC_V2,
    DispatchInfo,
    MalformedMessage,
    dispatch_info,
    peek_total,
    property_value,
)

_KEYS = b"KEYS\x01"
_UNIQ_KEY = b"UNIQ_KEY\x01"


def _visible_end(store: MessageStore, limit: int | None) -> int:
    end = store.log.end_offset
    if store.config.flush_mode is FlushMode.SYNC_FLUSH:
        end = store.log.durable_offset
    return end if limit is None else min(end, limit)


def record_at(
    store: MessageStore, offset: int, limit: int | None = None
) -> tuple[bytes, DispatchInfo] | None:
    """The record starting at commit-log ``offset`` and what it says, or None when no
    whole record starts there below ``limit`` (RocketMQ's ``selectOneMessageByOffset``)."""
    log = store.log
    if offset < log.min_offset or offset + 8 > _visible_end(store, limit):
        return None
    try:
        total, magic = peek_total(log.read_raw(offset, 8))
        if magic not in (MAGIC_V1, MAGIC_V2) or total <= 8:
            return None
        if offset + total > _visible_end(store, limit):
            return None
        raw = store.read_record(offset)
        info = dispatch_info(raw)
    except DamagedRecordError:
        raise
    except (StoreError, OSError, MalformedMessage, struct.error):  # cut or deleted meanwhile
        return None
    return (raw, info) if info.physical_offset == offset else None


def holds_key(info: DispatchInfo, topic: str, key: str, unique: bool) -> bool:
    """Whether the record is ``topic``'s and is indexed under ``key``."""
    if info.topic != topic:
        return False
    if property_value(info.properties, _UNIQ_KEY) == key:
        return True
    return not unique and key in property_value(info.properties, _KEYS).split(KEY_SEPARATOR)


def query_messages(
    store: MessageStore,
    topic: str,
    key: str,
    max_num: int,
    begin_ms: int,
    end_ms: int,
    unique: bool = False,
    limit: int | None = None,
) -> tuple[list[bytes], IndexHits]:
    """The records of ``topic`` with ``key`` stored in [begin_ms, end_ms] and ending by
    ``limit``, oldest first, at most ``max_num`` (≤ 64), and the index's answer (how far
    it got)."""
    if store.index is None:
        return [], IndexHits([], 0, 0)
    hits = store.index.query(topic, key, max_num, begin_ms, end_ms)
    out = []
    for offset in sorted(hits.offsets):
        found = record_at(store, offset, limit)
        if found is not None and holds_key(found[1], topic, key, unique):
            out.append(found[0])
    return out, hits
