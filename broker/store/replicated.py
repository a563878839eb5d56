"""The scan of a master's raw commit-log bytes on a replica (the slave's dispatch).

:func:`scan_replicated` walks the records the bytes complete and gathers what each gives its
consume queue (a unit) and the index (a record), without touching the store: the
:class:`~broker.store.store.MessageStore` holds the lock, the queues and the log, and calls
it from ``append_replicated``. Apart from the store so that the mypyc build compiles this
loop (it runs once per replicated record) while tests keep wrapping the store's methods.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.store.consume_queue import tags_code
from broker.store.index import Record
from rmq.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MalformedMessage,
    dispatch_info,
    peek_total,
    property_value,
)

_KEYS, _UNIQ = b"KEYS\x01", b"UNIQ_KEY\x01"  # property names as encoded
Unit3 = tuple[int, int, int]  # a consume-queue unit as written: (commit-log offset, size, tags)
Units = dict[tuple[str, int], tuple[int, list[Unit3]]]


def scan_replicated(
    read: Callable[[int, int], bytes | memoryview],
    p: int,
    end: int,
    segment_size: int,
    keep_index: bool,
    units: Units,
    indexed: list[Record],
    write_queue: Callable[[str, int, int, list[Unit3]], None],
) -> tuple[int, int, str | None]:
    """The records from ``p`` up to ``end`` (``read(at, n)`` gives the log's bytes): each
    one's unit added to ``units`` (a queue whose next offset does not follow goes to
    ``write_queue(topic, queue_id, first, units)`` first) and, when ``keep_index``, its index
    record to ``indexed``. Returns (where the scan stopped, the log end the next record needs
    or 0, None) or, at a record that is not well formed, (its offset, 0, why)."""
    need = 0
    while p < end:
        seg_end = p - p % segment_size + segment_size
        if min(end, seg_end) - p < 8:
            need = p + 8
            break
        total, magic = peek_total(read(p, 8))
        if magic == BLANK_MAGIC and total == seg_end - p:  # the segment's closing blank
            if seg_end > end:
                need = seg_end
                break
            p = seg_end
            continue
        if magic not in (MAGIC_V1, MAGIC_V2) or not 8 < total <= seg_end - p:
            return p, 0, f"TOTALSIZE {total} or magic {magic & 0xFFFFFFFF:#x}"
        if end - p < total:
            need = p + total
            break
        try:
            m = dispatch_info(read(p, total))
        except MalformedMessage as e:
            return p, 0, str(e)
        if m.physical_offset != p:
            return p, 0, f"PHYSICALOFFSET says {m.physical_offset}"
        key = (m.topic, m.queue_id)
        batch = units.get(key)
        if batch is None or batch[0] + len(batch[1]) != m.queue_offset:
            if batch is not None:  # not the next offset: the queue says what it makes of it
                write_queue(m.topic, m.queue_id, batch[0], batch[1])
            units[key] = batch = (m.queue_offset, [])
        batch[1].append((p, total, tags_code(m.tags)))
        if keep_index:
            props = m.properties
            indexed.append(
                (p, m.topic, property_value(props, _KEYS), property_value(props, _UNIQ),
                 m.store_timestamp)
            )  # fmt: skip
        p += total
    return p, need, None
