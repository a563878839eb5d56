"""Helpers for the store tests: a tiny-segment store and a message factory."""

from __future__ import annotations

from broker.store import FlushMode, MessageStore, StoreConfig
from rmq.message import StoredMessage

SEG = 1024  # tiny segments: records cross file boundaries after a few puts


def msg(
    i: int, topic: str = "T", queue_id: int = 0, size: int = 100, tags: str = ""
) -> StoredMessage:
    props = {"TAGS": tags} if tags else {}
    return StoredMessage(
        topic=topic, body=bytes([i % 256]) * size, queue_id=queue_id, properties=props
    )


def open_store(root: str, mode: FlushMode = FlushMode.SYNC_FLUSH, **kw: int) -> MessageStore:
    cfg = StoreConfig(
        segment_size=kw.get("segment_size", SEG),
        cq_units_per_file=kw.get("units", 4),
        flush_mode=mode,
        flush_interval_ms=kw.get("interval_ms", 60_000),  # no background checkpoint mid-test
    )
    return MessageStore(root, cfg)
